package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/internal/gctuner"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

// serveOptions are serve's command line.
type serveOptions struct {
	listen, configPath, logFormat, logLevel string
	logJSON, check                          bool
	httpListen                              string // the ops HTTP listener (ops.go)
	httpAllowRemote                         bool
}

func (a *app) serveCmd() *cobra.Command {
	var o serveOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker",
		Long: `Runs the broker until SIGINT or SIGTERM, then shuts it down within shutdown_grace.

With no flags it listens on 127.0.0.1:7878 with the built-in defaults; --config reads an
HCL file (examples/config/tinybroker.hcl lists every setting). SIGHUP, or the Reload RPC,
re-reads the file's TLS files, users and plugins (other settings need a restart). --check validates the file (settings, declared groups, and the
plugins, which it compiles) and exits: 0 if it is good, 1 with the problems if not.`,
		Example: `  tinybroker serve
  tinybroker serve --config tinybroker.hcl --log-format json
  tinybroker serve --check --config tinybroker.hcl`,
		Args: noArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), o, a.stdout, a.stderr, a.listening)
		},
	}
	f := c.Flags()
	f.StringVar(&o.listen, "listen", "", "address to listen on (default 127.0.0.1:7878, or the config file's listen)")
	f.StringVar(&o.configPath, "config", "", "HCL configuration `file` (default: built-in in-memory defaults)")
	f.StringVar(&o.logFormat, "log-format", "", "log format: text or json")
	f.BoolVar(&o.logJSON, "log-json", false, "log as JSON (same as --log-format json)")
	f.StringVar(&o.logLevel, "log-level", "", "log level: trace, debug, info, warn or error")
	f.BoolVar(&o.check, "check", false, "validate the configuration (and compile its plugins), then exit")
	f.StringVar(&o.httpListen, "http-listen", "", "serve metrics, the dashboard and pprof over HTTP on this `address` (loopback only unless --http-allow-remote; default: off, or the config file's http block)")
	f.BoolVar(&o.httpAllowRemote, "http-allow-remote", false, "let --http-listen be a non-loopback address without users to authenticate its requests")
	_ = c.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"trace", "debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.MarkFlagFilename("config", "hcl")
	return c
}

// gcHeapFloor is the heap size under which the garbage collector does not start a cycle.
const gcHeapFloor = 32 << 20

// loadConfig reads the configuration serve runs with: the file's, then the flags'.
func loadConfig(o serveOptions) (config.Config, error) {
	cfg := config.Default()
	if o.configPath != "" {
		var err error
		if cfg, err = config.Load(o.configPath); err != nil {
			return cfg, err
		}
	}
	if o.listen != "" {
		cfg.Listen = o.listen
	}
	if o.httpListen != "" {
		cfg.HTTP.Listen = o.httpListen
	}
	if o.httpAllowRemote {
		cfg.HTTP.AllowRemote = true
	}
	if o.logJSON {
		cfg.LogFormat = "json"
	}
	if o.logFormat != "" {
		if o.logFormat != "text" && o.logFormat != "json" {
			return cfg, fmt.Errorf("--log-format %q: use text or json", o.logFormat)
		}
		cfg.LogFormat = o.logFormat
	}
	if o.logLevel != "" {
		if hclog.LevelFromString(o.logLevel) == hclog.NoLevel {
			return cfg, fmt.Errorf("--log-level %q: use trace, debug, info, warn or error", o.logLevel)
		}
		cfg.LogLevel = o.logLevel
	}
	return cfg, nil
}

// newEngine starts the engine cfg describes (engine "memory", the default, or
// "jetstream"), with its declared groups.
func newEngine(cfg config.Config, configPath string, log hclog.Logger) (broker.Engine, error) {
	var b broker.Engine
	switch cfg.Engine {
	case config.EngineJetStream:
		opts, err := jetStreamOptions(cfg, log.Named("broker"))
		if err != nil {
			return nil, fmt.Errorf("%s: engine \"jetstream\": %w", cfgName(configPath), err)
		}
		log.Info("engine", "kind", "jetstream", "url", opts.URL, "data_dir", opts.Embedded.DataDir, "cluster", opts.Embedded.ClusterListen, "replicas", opts.Replicas)
		e, err := jetstream.New(opts)
		if err != nil && errors.Is(err, broker.ErrUnavailable) && len(opts.Embedded.Routes) > 0 {
			// A node of a cluster that cannot be reached yet (its meta leader is being
			// elected, another node is down) waits for it, answering NOT_SERVING meanwhile.
			log.Warn("the cluster cannot be reached yet: serving NOT_SERVING and retrying", "error", err)
			start := func() (broker.Engine, error) { return jetstream.New(opts) }
			declare := func(b broker.Engine) error { return declareGroups(b, cfg, configPath, log) }
			return newStartingEngine(err, start, declare, log.Named("engine")), nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: engine \"jetstream\": %w", cfgName(configPath), err)
		}
		b = e
	default:
		cfg.Broker.Logger = log.Named("broker")
		b = memory.New(cfg.Broker)
	}
	if err := declareGroups(b, cfg, configPath, log); err != nil {
		_ = b.Shutdown(context.Background())
		return nil, err
	}
	return b, nil
}

// declareGroups declares the configuration's groups on b.
func declareGroups(b broker.Engine, cfg config.Config, configPath string, log hclog.Logger) error {
	for _, g := range cfg.Groups {
		if err := declareAgain(b, g, log); err != nil {
			return fmt.Errorf("%s: group %q: %w", cfgName(configPath), g.Name, err)
		}
	}
	return nil
}

// declareAgainFor is how long declareAgain keeps asking.
var declareAgainFor = 30 * time.Second

// declareAgain declares g on b, and asks again while b answers that it is unavailable, for
// up to declareAgainFor: a JetStream cluster that has just formed can leave a first request
// unanswered while a peer catches up or leadership moves (a node whose read of a group timed
// out so exited at start before). Any other refusal is returned at once.
func declareAgain(b broker.Engine, g broker.GroupConfig, log hclog.Logger) error {
	deadline := time.Now().Add(declareAgainFor)
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		err := b.Declare(g)
		if err == nil || !errors.Is(err, broker.ErrUnavailable) || time.Now().Add(pause).After(deadline) {
			return err
		}
		log.Warn("declaring a group from the configuration: the engine is unavailable; asking again", "group", g.Name, "error", err, "next_attempt_in", pause)
		time.Sleep(pause)
	}
}

// newAuth checks that the broker is not exposed without users and builds its authenticator.
func newAuth(cfg config.Config, configPath string, log hclog.Logger) (*auth.Authenticator, error) {
	if err := checkExposure(cfg, configPath, log); err != nil {
		return nil, err
	}
	guard, err := auth.New(auth.Options{Users: cfg.Users, TLS: cfg.TLS, Logger: log.Named("auth")})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgName(configPath), err)
	}
	return guard, nil
}

// checkConfig is serve --check: everything serve does before it listens, then stop.
func checkConfig(cfg config.Config, configPath string, stdout io.Writer, log hclog.Logger) error {
	if _, err := newAuth(cfg, configPath, log); err != nil {
		return err
	}
	b, err := newEngine(cfg, configPath, log)
	if err != nil {
		return err
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	pm, err := newPluginManager(cfg, b, log.Named("plugin"))
	if err != nil {
		return err
	}
	pm.close(context.Background())
	fmt.Fprintf(stdout, "configuration %s is valid: listen %s, %d declared groups, %d plugins\n", cfgName(configPath), cfg.Listen, len(cfg.Groups), len(cfg.Plugins))
	return nil
}

// runServe runs the broker until ctx is done, then shuts it down within the grace period.
// listening, if not nil, receives the bound address (tests listen on port 0).
func runServe(ctx context.Context, o serveOptions, stdout, stderr io.Writer, listening chan<- net.Addr) error {
	cfg, err := loadConfig(o)
	if err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if o.check {
		return checkConfig(cfg, o.configPath, stdout, log)
	}
	guard, err := newAuth(cfg, o.configPath, log)
	if err != nil {
		return err
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pass --listen HOST:PORT to choose another address)", cfg.Listen, err)
	}
	// A heap floor for the garbage collector (internal/gctuner); GOGC in the environment
	// turns it off.
	defer gctuner.Start(gcHeapFloor)()
	// A soft memory limit for the Go runtime (3/4 of the machine's or cgroup's memory unless
	// GOMEMLIMIT is set), and the broker's budget for what it holds, a quarter of that by
	// default: a full budget's heap is twice what it holds (memory.DefaultBudget).
	memLimit := memory.SetMemoryLimit()
	b, err := newEngine(cfg, o.configPath, log)
	if err != nil {
		lis.Close()
		return err
	}
	if m, ok := b.(*memory.Engine); ok {
		log.Info("memory", "gomemlimit", memLimit, "budget_bytes", m.MemoryBudget(), "declared_groups", len(cfg.Groups))
	}
	pm, err := newPluginManager(cfg, b, log.Named("plugin"))
	if err != nil {
		lis.Close()
		_ = b.Shutdown(context.Background())
		return err
	}
	defer func() {
		// By now the server has stopped (after its grace period): a plugin call still
		// running (one that loops, with call_timeout = "none") is given a second, then stopped.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pm.close(ctx)
	}()
	srvOpts := server.Options{
		KeepaliveTime:           cfg.KeepaliveTime,
		KeepaliveTimeout:        cfg.KeepaliveTimeout,
		MaxHeaderBytes:          cfg.Broker.MaxHeaderBytes,
		MaxHeaders:              cfg.Broker.MaxHeaders,
		MaxPublishBatch:         cfg.Limits.MaxPublishBatch,
		MaxStreamsPerConnection: cfg.Limits.MaxStreamsPerConnection,
		MaxConnections:          cfg.Limits.MaxConnections,
		HandshakeTimeout:        cfg.Limits.HandshakeTimeout,
		Logger:                  log.Named("server"),
		Plugins:                 pm.stats,
		PluginLifecycle:         pm,
		Auth:                    guard,
	}
	// A reload re-reads the configuration: the TLS files and users, then the plugins. One
	// at a time (SIGHUP and the Reload RPC may come together), so that what runs after it
	// is one file's.
	var reloading sync.Mutex
	reload := func(ctx context.Context) ([]string, error) {
		reloading.Lock()
		defer reloading.Unlock()
		next, err := config.Load(o.configPath)
		if err != nil {
			return nil, fmt.Errorf("nothing changed: %w", err)
		}
		if err := guard.Reload(next.Users); err != nil {
			return nil, fmt.Errorf("nothing changed: %s: %w", o.configPath, err)
		}
		names, err := pm.reload(ctx, next.Plugins)
		if err != nil {
			return nil, fmt.Errorf("the TLS files and users were reloaded, but the plugins were refused and the running ones stay: %w", err)
		}
		return names, nil
	}
	if o.configPath != "" {
		srvOpts.Reload = reload
	}
	srv := server.New(b, cfg.Broker.MaxMessageBytes, srvOpts)
	stopOps, httpAddr, err := startOps(cfg.HTTP, b, srv, pm, guard, log.Named("http"))
	if err != nil {
		lis.Close()
		_ = srv.Shutdown(context.Background())
		return err
	}
	defer stopOps()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	served := make(chan error, 1) // every return below receives from it: the wait for Serve
	var serving sync.WaitGroup
	serving.Go(func() { served <- srv.Serve(lis) })
	log.Info("listening", "addr", lis.Addr().String(), "config", cfgName(o.configPath), "tls", cfg.TLS != nil, "users", len(cfg.Users))
	if httpAddr != nil { // after the gRPC address, which scripts take from the first such line
		log.Named("http").Info("http listening", "addr", httpAddr.String(), "metrics", "/metrics", "dashboard", "/", "pprof", "/debug/pprof/")
	}
	if listening != nil {
		listening <- lis.Addr()
	}

	for running := true; running; {
		select {
		case err := <-served:
			_ = srv.Shutdown(context.Background())
			return fmt.Errorf("serve: %w", err)
		case <-hup:
			if _, err := reload(ctx); err != nil {
				logReloadFailure(ctx, log, err)
			}
		case <-ctx.Done():
			running = false
		}
	}
	log.Info("shutting down", "grace", cfg.ShutdownGrace)
	grace, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	// Once the grace period is over, plugin calls still running (a plugin that loops, with
	// call_timeout = "none") are given a second more and stopped: the publishes waiting on
	// them end, and so can the server.
	defer context.AfterFunc(grace, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pm.close(ctx)
	})()
	if err := srv.Shutdown(grace); err != nil {
		log.Warn("grace period ended with messages unacked", "error", err)
	}
	if err := <-served; err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// logReloadFailure logs why a SIGHUP's reload did not happen: refused (a bad file), or cut
// short because the broker is shutting down (ctx, serve's, is done: a SIGTERM that came
// during the reload), which is not the configuration's fault.
func logReloadFailure(ctx context.Context, log hclog.Logger, err error) {
	if ctx.Err() != nil {
		log.Warn("reload cut short: the broker is shutting down", "cause", context.Cause(ctx).Error(), "error", err)
		return
	}
	log.Error("reload refused", "error", err)
}

func cfgName(path string) string {
	if path == "" {
		return "built-in defaults"
	}
	return path
}
