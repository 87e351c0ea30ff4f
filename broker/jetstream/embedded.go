package jetstream

// The NATS server the engine may start in its own process: one node, or a node of a cluster.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tinybroker/tinybroker/broker"
)

// EmbeddedOptions configure the NATS server the engine starts in its own process.
type EmbeddedOptions struct {
	// DataDir holds JetStream's files; it must be writable. Required.
	DataDir string
	// Name is the server's name, unique in its cluster (default: the host name and the
	// cluster listen address).
	Name string
	// ClusterName, ClusterListen and Routes form a cluster: the nodes' cluster addresses
	// (host:port), each node listing the others (or all, itself included). Empty: one node.
	ClusterName   string
	ClusterListen string
	Routes        []string
	// Listen, if set, also serves NATS clients on host:port (nats CLI, other tools). The
	// engine itself connects in-process.
	Listen string
	// MaxMemoryStore bounds what JetStream keeps in memory storage, in bytes (its
	// max_memory_store): with Options.MemoryStorage, the stream and the dead letters. 0:
	// JetStream's default, 3/4 of the machine's memory, whose heap at GOGC=100 is twice that.
	MaxMemoryStore int64
}

// srvConfig is an embedded server's JetStream configuration, or nil.
func srvConfig(srv *natsserver.Server) *natsserver.JetStreamConfig {
	if srv == nil {
		return nil
	}
	return srv.JetStreamConfig()
}

// CheckDataDir makes dir if needed and checks that files can be written there.
func CheckDataDir(dir string) error {
	if dir == "" {
		return errors.New("the embedded NATS server needs a data directory (engine \"jetstream\" { data_dir = \"...\" })")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".tinybroker-write-check-*")
	if err != nil {
		return fmt.Errorf("data directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// StartEmbedded starts a NATS server with JetStream in this process, as the engine does
// when neither URL nor Server is set.
func StartEmbedded(eo EmbeddedOptions, limits broker.Limits, log hclog.Logger) (*natsserver.Server, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return startEmbedded(eo, limits.WithDefaults(), log)
}

func startEmbedded(eo EmbeddedOptions, limits broker.Limits, log hclog.Logger) (*natsserver.Server, error) {
	if err := CheckDataDir(eo.DataDir); err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(eo.DataDir)
	// A payload and its headers must fit a NATS message: max_message_bytes, the headers
	// (counted twice, for their framing) and room for the engine's own.
	maxPayload := limits.MaxMessageBytes + 2*limits.MaxHeaderBytes + 4096
	so := &natsserver.Options{ServerName: eo.Name, JetStream: true, StoreDir: abs, NoSigs: true,
		MaxPayload: int32(min(maxPayload, 64<<20)), DontListen: eo.Listen == "", JetStreamMaxMemory: eo.MaxMemoryStore}
	if eo.Listen != "" {
		host, port, err := splitHostPort(eo.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS listen %q: %w", eo.Listen, err)
		}
		so.Host, so.Port = host, port
	}
	if eo.ClusterListen != "" || len(eo.Routes) > 0 {
		if eo.ClusterName == "" {
			eo.ClusterName = "tinybroker"
		}
		host, port, err := splitHostPort(eo.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("cluster listen %q: %w", eo.ClusterListen, err)
		}
		so.Cluster = natsserver.ClusterOpts{Name: eo.ClusterName, Host: host, Port: port}
		if so.DontListen { // the server routes only once its client listener is up: a random loopback port
			so.DontListen, so.Host, so.Port = false, "127.0.0.1", natsserver.RANDOM_PORT
		}
		routes := make([]string, len(eo.Routes))
		for i, r := range eo.Routes {
			if !strings.Contains(r, "://") {
				r = "nats://" + r
			}
			routes[i] = r
		}
		so.Routes = natsserver.RoutesFromStr(strings.Join(routes, ","))
		if so.ServerName == "" {
			hn, _ := os.Hostname()
			so.ServerName = fmt.Sprintf("%s-%s", hn, strings.ReplaceAll(eo.ClusterListen, ":", "-"))
		}
	}
	srv, err := natsserver.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.SetLogger(natsLogger{log.Named("nats")}, false, false)
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("the embedded NATS server did not start within 30s (data directory %s; see its log above)", abs)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return nil, fmt.Errorf("the embedded NATS server could not enable JetStream in %s (see its log above)", abs)
	}
	return srv, nil
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, errors.New("want host:port")
	}
	var port int
	if _, err := fmt.Sscanf(addr[i+1:], "%d", &port); err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("want host:port with a port number")
	}
	return strings.Trim(addr[:i], "[]"), port, nil
}

// natsLogger writes the embedded server's log through hclog. Its notices (the banner, every
// route and client connecting) go to debug: at info they drowned tinybroker's own log.
type natsLogger struct{ l hclog.Logger }

func (n natsLogger) Noticef(f string, a ...any) { n.l.Debug(fmt.Sprintf(f, a...)) }

func (n natsLogger) Warnf(f string, a ...any) { n.l.Warn(fmt.Sprintf(f, a...)) }

func (n natsLogger) Fatalf(f string, a ...any) { n.l.Error(fmt.Sprintf(f, a...)) }

func (n natsLogger) Errorf(f string, a ...any) { n.l.Error(fmt.Sprintf(f, a...)) }

func (n natsLogger) Debugf(f string, a ...any) { n.l.Debug(fmt.Sprintf(f, a...)) }

func (n natsLogger) Tracef(f string, a ...any) { n.l.Trace(fmt.Sprintf(f, a...)) }
