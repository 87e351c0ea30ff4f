// Package jetstream is tinybroker's engine on NATS JetStream: the broker.Engine interface
// mapped onto a NATS server, embedded in the process (a single durable node with nothing
// else to run, or one node of a cluster of tinybroker nodes) or external. Fanout
// subscriptions are core NATS subscriptions (at most once); consumer groups are durable
// JetStream pull consumers with explicit acks on one interest-retention stream. See
// RATIONALE.md, "The JetStream engine", for the mapping and where it differs from the
// memory engine.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
	"github.com/tinybroker/tinybroker/broker/internal/streaming"
)

// Options configure an Engine. Zero values take the defaults shown.
type Options struct {
	broker.Limits

	// URL, if set, is an existing NATS server or cluster to use (nats://host:4222, several
	// separated by commas), with NATSOptions (credentials, TLS) as nats.go takes them.
	// Otherwise the engine starts a NATS server in the process (Embedded).
	URL         string
	NATSOptions []nats.Option
	Embedded    EmbeddedOptions

	// Server, if set, is an embedded NATS server already running in this process that the
	// engine uses and does not stop (tests share one between engines, each with a Prefix and
	// Stream of its own: without a listener, an engine's fanout copies do not go through the
	// server, so engines sharing a prefix there would not see each other's).
	Server *natsserver.Server

	// Replicas of the stream and consumers: 1, or 3 in a cluster of three or more.
	Replicas int
	// Prefix starts every NATS subject the engine uses ("tb"): topic T is published as
	// <prefix>.f.T for fanout subscribers and <prefix>.g.T for consumer groups. Engines with
	// different prefixes and streams share a NATS server without seeing each other.
	Prefix string
	// Stream is the JetStream stream holding what consumer groups have not acked ("TB").
	Stream string
	// MemoryStorage keeps the stream, the dead letters and the consumers' state in memory
	// instead of files (storage = "memory"): nothing is kept across a restart of every node,
	// but with Replicas 3 the loss of a node is survived without a disk. An existing stream
	// keeps the storage it was made with, and the consumers follow it.
	MemoryStorage bool
	// MaxBytes bounds the stream (max_bytes): past it a publish to a group's topic is refused
	// (ResourceExhausted), never an older message dropped; fanout, which JetStream does not
	// store, goes on. 0: JetStream's own limits only (the server's max_file_store or
	// max_memory_store, by default most of the disk or of the memory).
	MaxBytes int64
	// DeleteStreamOnShutdown removes the stream and its consumers when the engine stops
	// (tests, on a shared server).
	DeleteStreamOnShutdown bool

	// RequestTimeout bounds each call to JetStream: a publish's store, a consumer's
	// creation (5s).
	RequestTimeout time.Duration

	FanoutBufferMessages int  // deliveries buffered per stream for fanout subscriptions (262,144)
	FanoutBufferBytes    int  // payload bytes buffered per stream for fanout subscriptions (64 MiB)
	DropSlowConsumers    bool // drop what a full buffer cannot take instead of ending the stream

	Logger hclog.Logger
}

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

func (o *Options) setDefaults() {
	o.Limits = o.Limits.WithDefaults()
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Prefix == "" {
		o.Prefix = "tb"
	}
	if o.Stream == "" {
		o.Stream = "TB"
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	o.Limits = o.Limits.WithGroupDefaults(128<<20, 64<<20)
	if o.FanoutBufferMessages <= 0 {
		o.FanoutBufferMessages = 262_144
	}
	if o.FanoutBufferBytes <= 0 {
		o.FanoutBufferBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
}

// maxPendingStores bounds the stores sent to JetStream and not yet acknowledged, over every
// publisher of the engine: past it, a publish waits (up to RequestTimeout) for room.
const maxPendingStores = 4096

// metaIDKey is the stream metadata key holding the system_id key of the cluster.
const metaIDKey = "tinybroker-id-key"

var _ broker.Engine = (*Engine)(nil)

// Engine is the JetStream engine. Its methods are safe for concurrent use.
//
// Lock order: Engine.mu → group.mu → Stream.mu. No lock is held while calling JetStream's
// API or a hook, except Engine.mu while a consumer group is created or changed (so that
// two members cannot create it twice).
type Engine struct {
	opts Options
	log  hclog.Logger
	srv  *natsserver.Server // the embedded server, if the engine started it
	nc   *nats.Conn
	js   jetstream.JetStream
	ids  idCodec
	st   *stores // the stores sent to the stream and not yet acknowledged (store.go)
	solo bool    // one embedded node: every delivery of the stream is held in this process
	// local: the embedded server has no listener (clients, cluster, gateways), so only this
	// process's connections reach it: fanout copies go straight to the local subscriptions
	// instead of through NATS and back (see fanout).
	local bool
	// interest says whether any NATS subscription, on this server or (by its routes) on
	// another node, wants a subject; nil with an external server, where the engine cannot ask.
	interest func(subject string) bool
	// interestCount is how many NATS subscriptions want a subject, this server's and (one
	// per node) the other nodes'; nil with an external server.
	interestCount func(subject string) int
	self          string         // this engine's id in announcements
	announcing    []announceWait // under mu: announcements whose answers are awaited
	// storeLimit is the bytes JetStream may store for the engine's account (0: unknown).
	storeLimit int64
	subjF      string
	subjG      string
	subjX      string // <prefix>.x.<consumer>: a consumer group changed (announce)
	subjD      string // <prefix>.d.<consumer>.<system_id>: a dead letter kept (dlq.go)
	subjS      string // <prefix>.s.<consumer>: settle a delivery another node holds (forward)
	dlq        jetstream.Stream
	closing    atomic.Bool

	hooks                                     publishing.HookSlot
	gate                                      publishing.Gate // the steps of a publish every engine shares
	published, unrouted, hookDropped, refused atomic.Uint64
	streamSeq                                 atomic.Uint64
	fanoutDelivered                           atomic.Uint64
	gen                                       atomic.Uint64 // bumped when subscriptions or groups change: the match cache's tag
	cache                                     sync.Map      // topic → *matchResult
	cacheSize                                 atomic.Int64
	fanCh                                     chan *nats.Msg
	stop                                      chan struct{}
	wg                                        sync.WaitGroup
	shutdownOnce                              sync.Once
	mu                                        sync.RWMutex
	fanouts                                   map[string]*Subscription
	patSubs                                   map[string]*patSub // fanout pattern → its NATS subscription
	groups                                    map[string]*group
	groupNames                                map[string]string
	gone                                      map[goneKey]time.Time // consumers deleted, when forgotten (rememberGoneLocked)
	streams                                   map[uint64]*Stream
	autoID                                    uint64
}

// patSub is one NATS subscription for a fanout pattern, shared by the local subscriptions
// that have it.
type patSub struct {
	pattern string
	sub     *nats.Subscription
	subs    []*Subscription // copied on write under Engine.mu
}

// New starts the engine: the embedded NATS server (unless URL or Server is set), the
// connection, and the stream. It fails with the reason if the data directory is not
// writable, the NATS server cannot be reached, or JetStream is not enabled there.
func New(opts Options) (*Engine, error) {
	opts.setDefaults()

	e := &Engine{opts: opts, log: opts.Logger, subjF: opts.Prefix + ".f.", subjG: opts.Prefix + ".g.", subjX: opts.Prefix + ".x.", subjD: opts.Prefix + ".d.", subjS: opts.Prefix + ".s.", self: nats.NewInbox(),
		fanCh: make(chan *nats.Msg, 1<<16), stop: make(chan struct{}),
		fanouts: make(map[string]*Subscription), patSubs: make(map[string]*patSub),
		groups: make(map[string]*group), groupNames: make(map[string]string), streams: make(map[uint64]*Stream)}
	e.gate = publishing.Gate{Limits: &e.opts.Limits, Hooks: &e.hooks, Closing: &e.closing}
	if err := e.connect(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.ensureStream(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.ensureDLQ(); err != nil {
		e.close()
		return nil, err
	}
	// The groups every node made: those that exist now, and those announced from now on;
	// and those JetStream deleted for their inactivity (GroupExpireAfter).
	if _, err := e.nc.Subscribe(e.subjX+"*", e.onAnnounce); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if _, err := e.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.DELETED."+e.opts.Stream+".*", e.onConsumerDeleted); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if _, err := e.nc.Subscribe(e.subjS+"*", e.onSettle); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if err := e.nc.Flush(); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if _, err := e.refreshGroups(); err != nil {
		e.close()
		return nil, err
	}
	e.wg.Add(1)
	go e.dispatchFanout()
	return e, nil
}

// connect starts the embedded server if needed and connects to NATS.
func (e *Engine) connect() error {
	o := &e.opts
	nopts := append([]nats.Option{nats.Name("tinybroker"), nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1), // a publish while disconnected fails at once: the client hears UNAVAILABLE
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				e.log.Warn("disconnected from NATS; publishes and acks fail until it is back", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { e.log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			e.log.Warn("NATS error", "error", err)
		}),
	}, o.NATSOptions...)
	srv := o.Server
	switch {
	case o.URL != "":
		nopts = append(nopts, nats.Timeout(o.RequestTimeout))
		nc, err := nats.Connect(o.URL, nopts...)
		if err != nil {
			return fmt.Errorf("%w: cannot reach the NATS server at %s: %v (is it running, and the url, credentials and TLS settings right?)", broker.ErrUnavailable, o.URL, err)
		}
		e.nc = nc
	default:
		if srv == nil {
			var err error
			if srv, err = startEmbedded(o.Embedded, o.Limits, e.log); err != nil {
				return err
			}
			e.srv = srv
			e.solo = len(o.Embedded.Routes) == 0
		}
		nc, err := nats.Connect("", append(nopts, nats.InProcessServer(srv))...)
		if err != nil {
			return fmt.Errorf("connect to the embedded NATS server: %w", err)
		}
		e.nc = nc
		// The engine's connection has no user: it is in the global account, whose
		// subscriptions include the other nodes' (routes register their interest there).
		e.interest = srv.GlobalAccount().SubscriptionInterest
		e.interestCount = srv.GlobalAccount().Interest
		if o.Server != nil {
			e.solo = len(srv.ClusterName()) == 0 || !srv.JetStreamIsClustered()
		}
		e.local = e.solo && srv.Addr() == nil && srv.ClusterAddr() == nil && srv.GatewayAddr() == nil
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		return err
	}
	e.js = js
	if err := e.startStores(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(o.RequestTimeout, 30*time.Second))
	defer cancel()
	for {
		// A cluster electing its meta leader drops requests: ask again every 2s.
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		ai, err := js.AccountInfo(actx)
		acancel()
		if err == nil {
			// What JetStream may store is the budget Stats reports beside what the groups hold.
			e.storeLimit = ai.Limits.MaxStore
			if o.MemoryStorage {
				e.storeLimit = ai.Limits.MaxMemory
			}
			if cfg := srvConfig(srv); e.storeLimit <= 0 && cfg != nil {
				e.storeLimit = cfg.MaxStore
				if o.MemoryStorage {
					e.storeLimit = cfg.MaxMemory
				}
			}
			return nil
		}
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("%w: JetStream is not enabled on the NATS server (run nats-server with -js)", broker.ErrUnavailable)
		}
		if ctx.Err() != nil { // a cluster still electing its meta leader
			return fmt.Errorf("%w: JetStream did not answer within %v: %v", broker.ErrUnavailable, max(o.RequestTimeout, 30*time.Second), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
func (n natsLogger) Warnf(f string, a ...any)   { n.l.Warn(fmt.Sprintf(f, a...)) }
func (n natsLogger) Fatalf(f string, a ...any)  { n.l.Error(fmt.Sprintf(f, a...)) }
func (n natsLogger) Errorf(f string, a ...any)  { n.l.Error(fmt.Sprintf(f, a...)) }
func (n natsLogger) Debugf(f string, a ...any)  { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n natsLogger) Tracef(f string, a ...any)  { n.l.Trace(fmt.Sprintf(f, a...)) }

// ensureStream creates the stream, or reads the existing one's id key.
func (e *Engine) ensureStream() error {
	cfg := jetstream.StreamConfig{Name: e.opts.Stream, Subjects: []string{e.subjG + ">"}, Retention: jetstream.InterestPolicy,
		Storage: jetstream.FileStorage, Replicas: e.opts.Replicas, Discard: jetstream.DiscardOld,
		Metadata: map[string]string{metaIDKey: newIDSecret()}, Description: "tinybroker: messages of consumer groups not yet acked"}
	if e.opts.MemoryStorage {
		cfg.Storage = jetstream.MemoryStorage
	}
	if e.opts.MaxBytes > 0 {
		// Refuse what does not fit: DiscardOld would drop a group's oldest unacked message.
		cfg.MaxBytes, cfg.Discard = e.opts.MaxBytes, jetstream.DiscardNew
	}
	s, err := e.openStream(cfg)
	if err != nil {
		return err
	}
	if c := s.CachedInfo().Config; max(c.MaxBytes, 0) != cfg.MaxBytes {
		// The stream exists with another bound (JetStream's -1 is none): take the configured one.
		c.MaxBytes, c.Discard = cfg.MaxBytes, cfg.Discard
		if c.MaxBytes == 0 {
			c.MaxBytes = -1
		}
		uctx, ucancel := e.ctx()
		s, err = e.js.UpdateStream(uctx, c)
		ucancel()
		if err != nil {
			return fmt.Errorf("%w: JetStream stream %s: setting max_bytes to %d: %v", broker.ErrUnavailable, cfg.Name, cfg.MaxBytes, err)
		}
	}
	if mem := s.CachedInfo().Config.Storage == jetstream.MemoryStorage; mem != e.opts.MemoryStorage {
		// JetStream cannot change a stream's storage; a consumer group's state is kept as
		// its messages are.
		e.log.Warn("the JetStream stream exists with another storage; it keeps it (delete the stream, or choose another stream name, to change it)",
			"stream", cfg.Name, "storage", storageName(mem), "configured", storageName(e.opts.MemoryStorage))
		e.opts.MemoryStorage = mem
	}
	key := s.CachedInfo().Config.Metadata[metaIDKey]
	if key == "" {
		return fmt.Errorf("JetStream stream %s exists but was not made by tinybroker (no %s in its metadata); choose another stream name", cfg.Name, metaIDKey)
	}
	e.ids, err = newIDCodec(key)
	return err
}

func storageName(memory bool) string {
	if memory {
		return "memory"
	}
	return "file"
}

// openStream opens the stream cfg names, creating it as cfg says if there is none.
func (e *Engine) openStream(cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	ctx := context.Background()
	// Several nodes starting together may race to create it; a cluster still settling may
	// not answer: look again until RequestTimeout has passed three times.
	var s jetstream.Stream
	var err error
	for deadline := time.Now().Add(3 * e.opts.RequestTimeout); ; {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		s, err = e.js.Stream(actx, cfg.Name)
		acancel()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			cctx, ccancel := e.ctx()
			s, err = e.js.CreateStream(cctx, cfg)
			ccancel()
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: JetStream stream %s: %v", broker.ErrUnavailable, cfg.Name, err)
	}
	return s, nil
}

// ctx is a context bounded by RequestTimeout.
func (e *Engine) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.opts.RequestTimeout)
}

// close releases the connection and the embedded server.
func (e *Engine) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
}

// Server returns the embedded NATS server the engine started, or nil.
func (e *Engine) Server() *natsserver.Server { return e.srv }

// SetHooks installs h (nil removes the hooks).
func (e *Engine) SetHooks(h broker.Hooks) { e.hooks.Set(h) }

func (e *Engine) currentHooks() broker.Hooks { return e.hooks.Load() }

// unavailable says whether the connection to NATS is down, as an error for the client.
func (e *Engine) unavailable() error {
	if e.nc.IsConnected() {
		return nil
	}
	return fmt.Errorf("%w: the broker has lost its NATS server (%s); retry shortly", broker.ErrUnavailable, e.nc.Status())
}

// Publish validates the message, runs the OnPublish hook and routes it.
func (e *Engine) Publish(topic string, payload []byte, headers map[string]string) (broker.PublishResult, error) {
	m, emit, err := e.gate.One(topic, payload, broker.MakeHeaders(headers))
	var res [1]broker.PublishResult
	if err == nil {
		errs := [1]error{}
		e.routeBatch([]publishing.Msg{m}, res[:], errs[:])
		err = errs[0]
	}
	e.emit(emit)
	return res[0], err
}

// PublishBatch publishes a frame in order; see broker.Engine.
func (e *Engine) PublishBatch(frame []broker.Draft, res []broker.PublishResult, errs []error) {
	clear(res)
	bt := e.gate.Batch(frame, errs)
	defer bt.Release()
	if len(bt.Msgs) == len(frame) { // every message passed: route in place
		e.routeBatch(bt.Msgs, res, errs)
	} else if len(bt.Msgs) > 0 {
		r, er := make([]broker.PublishResult, len(bt.Msgs)), make([]error, len(bt.Msgs))
		e.routeBatch(bt.Msgs, r, er)
		for j, i := range bt.At {
			res[i], errs[i] = r[j], er[j]
		}
	}
	e.emit(bt.Emitted())
}

// emit routes the messages hooks emitted, without OnPublish; one refused is logged.
func (e *Engine) emit(ds []broker.Draft) {
	for m, err := range e.gate.Emitted(ds) {
		if err == nil {
			_, err = e.route(&m)
		}
		if err != nil {
			e.log.Warn("message emitted by a plugin refused", "topic", m.Topic, "error", err)
		}
	}
}

// dropped answers a message dropped by a plugin's verdict, and counts it.
func (e *Engine) dropped(m *publishing.Msg) broker.PublishResult {
	e.hookDropped.Add(1)
	e.published.Add(1)
	seq := rand.Uint64() | 1
	return broker.PublishResult{Seq: seq, SystemID: e.ids.format(seq, e.ids.fanout), DroppedBy: m.DroppedBy, DropReason: m.DropReason}
}

// route publishes one valid message, as routeBatch does a frame.
func (e *Engine) route(m *publishing.Msg) (broker.PublishResult, error) {
	var res [1]broker.PublishResult
	var errs [1]error
	e.routeBatch([]publishing.Msg{*m}, res[:], errs[:])
	return res[0], errs[0]
}

// routeBatch routes messages that passed the gate in order, writing each one's result and
// error to res[i] and errs[i]; one a plugin dropped is counted and answered (dropped). Those a consumer group this node knows matches
// are stored in the stream first: every store of the batch is sent at once (asynchronous
// JetStream publishes, at most maxPendingStores outstanding in the engine), then every
// acknowledgement is awaited, so that a message is answered OK only once JetStream has it
// (with replicas 3, a quorum). Then each message goes to fanout subscribers by core NATS,
// in order, carrying its system_id. One round trip to JetStream per frame instead of one
// per message is what makes a frame of 128 publishes to a group cheap (BENCHMARKS.md).
func (e *Engine) routeBatch(ms []publishing.Msg, res []broker.PublishResult, errs []error) {
	for i := range ms {
		if ms[i].Drop {
			res[i] = e.dropped(&ms[i])
		}
	}
	if err := e.unavailable(); err != nil {
		for i := range errs {
			if !ms[i].Drop {
				errs[i] = err
			}
		}
		return
	}
	now := time.Now().UnixNano()
	var deadline time.Time // RequestTimeout from the frame's first store
	ps := make([]pendingStore, len(ms))
	var b *storeBatch     // made for the frame's first store
	var plain nats.Header // the stored headers of a message without headers of its own
	for i, m := range ms {
		if m.Drop {
			continue
		}
		p := &ps[i]
		p.mr = e.match(m.Topic)
		if len(p.mr.groups) == 0 {
			continue
		}
		var skip []string
		if skip, errs[i] = e.admit(p, &m); errs[i] != nil || len(p.took) == 0 {
			continue
		}
		var h nats.Header
		if len(m.Headers) == 0 && len(skip) == 0 {
			// The same for every such message of the frame (nats.go only reads it).
			if plain == nil {
				plain = encodeHeaders(nil, now)
			}
			h = plain
		} else {
			h = encodeHeaders(m.Headers, now)
			if len(skip) > 0 {
				h[hdrSkip] = []string{strings.Join(skip, ",")}
			}
		}
		if b == nil {
			b, deadline = newStoreBatch(len(ms)), time.Now().Add(e.opts.RequestTimeout)
		}
		if err := e.st.send(e.nc, b, i, &nats.Msg{Subject: e.subjG + m.Topic, Data: m.Payload, Header: h}, deadline); err != nil {
			errs[i] = e.storeError(err)
			p.unadmit()
			continue
		}
		p.sent = true
	}
	if b != nil {
		e.st.wait(b, deadline)
	}
	for i := range ps {
		p := &ps[i]
		if !p.sent {
			continue
		}
		if err := b.errs[i]; err != nil {
			errs[i] = e.storeError(err)
			p.unadmit()
			continue
		}
		p.seq = b.seqs[i]
	}
	for i := range ms {
		if errs[i] == nil && !ms[i].Drop {
			res[i], errs[i] = e.fanout(&ms[i], &ps[i], now)
		}
	}
}

// pendingStore is one message of RouteBatch on its way.
type pendingStore struct {
	mr   *matchResult
	took []*group // the groups that admitted it (see admit)
	cost int64    // what it costs each of them
	sent bool     // sent to the stream (not: no group took it, or it could not be sent)
	seq  uint64   // its stream sequence, once stored
}

// admit asks every group m matches to take it (group.admit). The groups that refuse it are
// named in the stored message (skip), so that their members end it unseen; if every group
// refused it and no fanout subscription here wants it either, the publish is refused with
// the first group's reason, as the memory engine does.
func (e *Engine) admit(p *pendingStore, m *publishing.Msg) ([]string, error) {
	p.cost = heldCost(m.Topic, m.Payload, m.Headers, m.HB)
	var full error
	var skip []string
	for _, g := range p.mr.groups {
		if err := g.admit(p.cost); err != nil {
			if full == nil {
				full = err
			}
			skip = append(skip, g.consumer)
			continue
		}
		p.took = append(p.took, g)
	}
	if len(p.took) == 0 && len(p.mr.subs) == 0 {
		e.refused.Add(1)
		return nil, full
	}
	if len(p.took) > 0 { // stored: the refusing groups' consumers will pass it
		for _, g := range p.mr.groups {
			if !slices.Contains(p.took, g) {
				g.skipping(1)
			}
		}
	}
	return skip, nil
}

// heldCost is what a group holding a message is charged (grouping.MessageCost and a holder,
// as in the memory engine), computed alike at publish and when the message is settled.
func heldCost(topic string, payload []byte, headers broker.Headers, hb int) int64 {
	return grouping.MessageCost(topic, "", payload, len(headers), hb, 1) + idLen + grouping.HolderOverhead
}

// unadmit gives back what admit charged, for a message that was not stored after all.
func (p *pendingStore) unadmit() {
	for _, g := range p.mr.groups {
		if slices.Contains(p.took, g) {
			g.release(p.cost, true)
		} else {
			g.skipping(-1)
		}
	}
	p.took = nil
}

// storeError is what a publisher hears when JetStream did not store its message.
func (e *Engine) storeError(err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: the message is larger than the NATS server's max_payload (%d bytes)", broker.ErrInvalidMessage, e.nc.MaxPayload())
	}
	if full(err) && e.opts.MemoryStorage && e.opts.URL == "" && e.opts.Server == nil {
		return fmt.Errorf("%w: the consumer groups' store is full (JetStream: %v); wait for members to ack, or raise engine \"jetstream\" { max_bytes } (the embedded server keeps at most %d bytes in memory storage: max_bytes + 64 MiB, by default a quarter of GOMEMLIMIT)", broker.ErrLimit, err, e.storeLimit)
	}
	if full(err) {
		return fmt.Errorf("%w: the consumer groups' store is full (JetStream: %v); wait for members to ack, or raise engine \"jetstream\" { max_bytes } or the NATS server's storage limits", broker.ErrLimit, err)
	}
	if permanent(err) {
		// Not the publisher's doing (broker.CheckHeaders admitted the message) and not
		// transient: INTERNAL, without the "retry" that would never succeed.
		return fmt.Errorf("JetStream cannot store this message for its consumer groups: %v; storing it again cannot succeed: this is a bug of tinybroker's JetStream engine, please report it with the message's topic and header names", err)
	}
	return fmt.Errorf("%w: JetStream did not store the message for its consumer groups: %v; retry", broker.ErrUnavailable, err)
}

// permanent says whether err, from a store, is one that storing the same message again
// would meet again: nats.go could not encode it. (A refusal by JetStream stays UNAVAILABLE:
// the stream's configuration, which an operator may change, decides it.)
func permanent(err error) bool {
	return errors.Is(err, nats.ErrBadHeaderMsg) || errors.Is(err, nats.ErrInvalidMsg) || errors.Is(err, nats.ErrBadSubject)
}

// full says whether err is JetStream refusing a store for want of room: the stream's
// max_bytes (with discard new), or the account's or the server's storage.
func full(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case 10023, 10028, 10047: // JetStream's JSInsufficientResourcesErr, JSMemoryResourcesExceededErr, JSStorageResourcesExceededErr
		return true
	case 10077: // JSStreamStoreFailedF, which also says why
		return strings.Contains(api.Description, "maximum bytes exceeded") || strings.Contains(api.Description, "maximum messages exceeded")
	}
	return false
}

// fanout publishes m (stored already, as p says, if a group wanted it) to the fanout
// subscribers and returns its result.
func (e *Engine) fanout(m *publishing.Msg, p *pendingStore, publishedAt int64) (broker.PublishResult, error) {
	topic := m.Topic
	seq := p.seq
	var id string
	if len(p.took) > 0 {
		id = e.ids.format(seq, e.ids.stored)
	} else {
		seq = rand.Uint64() | 1
		id = e.ids.format(seq, e.ids.fanout)
	}
	var err error
	if e.local {
		e.deliverLocal(m, p.mr.subs, seq, id, publishedAt)
	} else {
		err = e.publishFanout(m, seq, id, publishedAt)
	}
	if err != nil {
		if len(p.took) == 0 {
			if errors.Is(err, nats.ErrMaxPayload) {
				return broker.PublishResult{}, e.storeError(err)
			}
			return broker.PublishResult{}, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
		}
		e.log.Warn("fanout publish failed after the message was stored for its groups", "topic", topic, "error", err)
	}
	e.published.Add(1)
	routed := len(p.mr.subs) + len(p.took)
	if routed == 0 {
		e.unrouted.Add(1)
	}
	return broker.PublishResult{Seq: seq, SystemID: id, Routed: routed}, nil
}

// publishFanout publishes m as a fanout envelope, unless no fanout subscription anywhere
// wants it: a consumer group's topic usually has none, and its message then costs no second
// trip through NATS.
func (e *Engine) publishFanout(m *publishing.Msg, seq uint64, id string, publishedAt int64) error {
	subj := e.subjF + m.Topic
	if e.interest != nil && !e.interest(subj) {
		return nil
	}
	data := appendEnvelope(make([]byte, 0, len(m.Payload)+envelopeSize(id, m.Headers)), seq, publishedAt, id, m.Headers, m.Payload)
	return e.nc.Publish(subj, data)
}

// deliverLocal gives a fanout copy of m to the local subscriptions that want it, as the
// dispatcher does with what NATS brings back (Engine.local): the same message, without the
// envelope and the round trip through the embedded server, which were two fifths of the
// broker's CPU in W1.
func (e *Engine) deliverLocal(m *publishing.Msg, subs []*Subscription, seq uint64, id string, publishedAt int64) {
	if len(subs) == 0 {
		return
	}
	msg := &broker.Message{ID: seq, SystemID: id, Topic: m.Topic, Payload: m.Payload, Headers: m.Headers, PublishedAt: publishedAt,
		HeaderBytes: m.HB, Targets: 1}
	for _, s := range subs {
		s.st.deliverFanout(s, msg)
	}
}

// matchResult is the local fanout subscriptions and the known consumer groups a topic
// matches, cached per topic and tagged with Engine.gen.
type matchResult struct {
	gen    uint64
	subs   []*Subscription
	groups []*group
}

func (e *Engine) match(topic string) *matchResult {
	gen := e.gen.Load()
	if v, ok := e.cache.Load(topic); ok {
		if mr := v.(*matchResult); mr.gen == gen {
			return mr
		}
	}
	mr := &matchResult{gen: gen}
	e.mu.RLock()
	for _, s := range e.fanouts {
		for _, p := range s.patterns {
			if broker.Pattern(p).Match(topic) {
				mr.subs = append(mr.subs, s)
				break
			}
		}
	}
	for _, g := range e.groups {
		if g.matches(topic) {
			mr.groups = append(mr.groups, g)
		}
	}
	e.mu.RUnlock()
	if e.cacheSize.Add(1) > 8192 {
		e.cache.Clear()
		e.cacheSize.Store(0)
	}
	e.cache.Store(topic, mr)
	return mr
}

// changed invalidates the match cache. Engine.mu must be held.
func (e *Engine) changed() { e.gen.Add(1) }

// dispatchFanout hands what the fanout patterns' NATS subscriptions receive to the local
// subscriptions, in the connection's order. A subscription with several patterns that
// match a topic gets it through the first of them only.
func (e *Engine) dispatchFanout() {
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			return
		case m := <-e.fanCh:
			e.mu.RLock()
			ps := e.patSubs[strings.TrimPrefix(m.Sub.Subject, e.subjF)]
			var subs []*Subscription
			if ps != nil && ps.sub == m.Sub {
				subs = ps.subs
			}
			e.mu.RUnlock()
			if len(subs) == 0 {
				continue
			}
			msg, err := parseEnvelope(strings.TrimPrefix(m.Subject, e.subjF), m.Data)
			if err != nil {
				e.log.Warn("fanout message dropped", "error", err)
				continue
			}
			for _, s := range subs {
				// With one pattern, NATS matched it already.
				if len(s.patterns) == 1 || s.firstMatch(msg.Topic) == ps.pattern {
					s.st.deliverFanout(s, msg)
				}
			}
		}
	}
}

// decode makes a broker.Message of a stored message JetStream delivered.
func (e *Engine) decode(m *nats.Msg, sseq uint64) *broker.Message {
	h, at, hb := decodeHeaders(m.Header)
	return &broker.Message{ID: sseq, SystemID: e.ids.format(sseq, e.ids.stored), Topic: strings.TrimPrefix(m.Subject, e.subjG),
		Payload: m.Data, Headers: h, PublishedAt: at, HeaderBytes: hb, Targets: 1}
}

// Shutdown refuses new work, stops handing out messages, waits until ctx is done for
// in-flight acks, then gives back what members still hold (JetStream redelivers it to the
// next member, here or on another node), ends every stream and disconnects.
func (e *Engine) Shutdown(ctx context.Context) error {
	var err error
	e.shutdownOnce.Do(func() {
		e.closing.Store(true)
		e.mu.RLock()
		groups := make([]*group, 0, len(e.groups))
		for _, g := range e.groups {
			groups = append(groups, g)
		}
		e.mu.RUnlock()
		for _, g := range groups {
			g.setDraining()
		}
		err = e.drain(ctx, groups)
		for _, st := range e.allStreams() {
			st.end(fmt.Errorf("%w: the broker is stopping; reconnect to its replacement", broker.ErrShuttingDown))
			st.detachAll()
		}
		close(e.stop)
		e.wg.Wait()
		if e.opts.DeleteStreamOnShutdown {
			c, cancel := e.ctx()
			_ = e.js.DeleteStream(c, e.opts.Stream)
			_ = e.js.DeleteStream(c, e.opts.Stream+"_DLQ")
			cancel()
		}
		if e.nc.IsConnected() {
			_ = e.nc.FlushTimeout(time.Second) // the acks and naks of the streams' ends
		}
		e.close()
	})
	return err
}

func (e *Engine) allStreams() []*Stream {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*Stream, 0, len(e.streams))
	for _, st := range e.streams {
		out = append(out, st)
	}
	return out
}

// drain waits until no member holds a message, or ctx is done.
func (e *Engine) drain(ctx context.Context, groups []*group) error {
	return streaming.Drain(ctx, e.log, "shutdown grace period over with messages unacked; JetStream redelivers them", func() (busy int) {
		for _, g := range groups {
			busy += g.inFlight()
		}
		return busy
	})
}
