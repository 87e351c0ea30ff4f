// Command tinybroker is the broker server and its command-line client.
//
//	tinybroker serve [--listen ADDR] [--config FILE] [--http-listen ADDR] [--log-format text|json] [--log-level LEVEL]
//	tinybroker pub   [--addr ADDR] [-H key=value]... TOPIC DATA
//	tinybroker sub   [--addr ADDR] [--group G] [--count N] PATTERN...
//	tinybroker bench [--addr ADDR] [-w W1,W2,W3,W5] ...
//	tinybroker passwd
//	tinybroker plugin test [--config key=value]... [--hook HOOK] PLUGIN.wasm < messages
//	tinybroker plugin new  --lang go|rust|c|assemblyscript|zig [--dir DIR] [--sdk TREE] NAME
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/internal/config"
	"github.com/tinybroker/tinybroker/internal/gctuner"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

const usage = `tinybroker: a single-node, in-memory message broker spoken to over gRPC.

Usage:
  tinybroker serve [--listen ADDR] [--config FILE] [--http-listen ADDR] [--log-format text|json] [--log-level LEVEL]
  tinybroker pub   [--addr ADDR] [-H key=value]... TOPIC DATA
  tinybroker sub   [--addr ADDR] [--group G] [--id ID] [--count N] PATTERN...
  tinybroker bench [--addr ADDR] [-w W1,W2,W3,W5] [-n N] [-reps R]
  tinybroker passwd < TOKEN    (prints the bcrypt hash of a user's token)
  tinybroker plugin test [--config key=value]... [--hook HOOK] PLUGIN.wasm < MESSAGES
  tinybroker plugin new  --lang go|rust|c|assemblyscript|zig [--dir DIR] [--sdk TREE] NAME

pub, sub and bench take --tls-ca FILE, --tls-cert FILE --tls-key FILE, --tls-server-name NAME
and --token-file FILE (or TINYBROKER_TOKEN=USER:TOKEN) for a secured broker.
Run "tinybroker COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "tinybroker:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr, nil)
	case "pub":
		return runPub(args[1:], stdout, stderr)
	case "sub":
		return runSub(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "passwd":
		return runPasswd(args[1:], stdin, stdout, stderr)
	case "plugin":
		switch {
		case len(args) >= 2 && args[1] == "test":
			return runPluginTest(args[2:], stdin, stdout, stderr)
		case len(args) >= 2 && args[1] == "new":
			return runPluginNew(args[2:], stdout, stderr)
		}
		fmt.Fprint(stderr, usage)
		return errors.New(`plugin: use "plugin test" or "plugin new"`)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// gcHeapFloor is the heap size under which the garbage collector does not start a cycle.
const gcHeapFloor = 32 << 20

// serve runs the broker until ctx is done, then shuts it down within the grace period.
// listening, if not nil, receives the bound address (tests listen on port 0).
func serve(ctx context.Context, args []string, stderr io.Writer, listening chan<- net.Addr) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on (default 127.0.0.1:7878, or the config file's listen)")
	configPath := fs.String("config", "", "HCL configuration file (default: built-in in-memory defaults)")
	logFormat := fs.String("log-format", "", "log format: text or json")
	logJSON := fs.Bool("log-json", false, "log as JSON (same as --log-format json)")
	logLevel := fs.String("log-level", "", "log level: trace, debug, info, warn or error")
	httpFlags := addOpsFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	cfg := config.Default()
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			return err
		}
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	httpFlags.apply(&cfg.HTTP)
	if *logJSON {
		cfg.LogFormat = "json"
	}
	if *logFormat != "" {
		if *logFormat != "text" && *logFormat != "json" {
			return fmt.Errorf("--log-format %q: use text or json", *logFormat)
		}
		cfg.LogFormat = *logFormat
	}
	if *logLevel != "" {
		if hclog.LevelFromString(*logLevel) == hclog.NoLevel {
			return fmt.Errorf("--log-level %q: use trace, debug, info, warn or error", *logLevel)
		}
		cfg.LogLevel = *logLevel
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "tinybroker",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		JSONFormat: cfg.LogFormat == "json",
		Output:     stderr,
	})

	if err := checkExposure(cfg, *configPath, log); err != nil {
		return err
	}
	guard, err := auth.New(auth.Options{Users: cfg.Users, TLS: cfg.TLS, Logger: log.Named("auth")})
	if err != nil {
		return fmt.Errorf("%s: %w", cfgName(*configPath), err)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pass --listen HOST:PORT to choose another address)", cfg.Listen, err)
	}
	// A heap floor for the garbage collector (internal/gctuner); GOGC in the environment
	// turns it off.
	defer gctuner.Start(gcHeapFloor)()
	// A soft memory limit for the Go runtime (3/4 of the machine's or cgroup's memory unless
	// GOMEMLIMIT is set), and the broker's budget for what it holds, half of that by default.
	memLimit := memory.SetMemoryLimit()
	cfg.Broker.Logger = log.Named("broker")
	b := memory.New(cfg.Broker)
	for _, g := range cfg.Groups {
		if err := b.Declare(g); err != nil {
			lis.Close()
			_ = b.Shutdown(context.Background())
			return fmt.Errorf("%s: group %q: %w", cfgName(*configPath), g.Name, err)
		}
	}
	log.Info("memory", "gomemlimit", memLimit, "budget_bytes", b.MemoryBudget(), "declared_groups", len(cfg.Groups))
	pm, err := newPluginManager(cfg, *configPath, b, log.Named("plugin"))
	if err != nil {
		lis.Close()
		_ = b.Shutdown(context.Background())
		return err
	}
	defer pm.close(context.Background())
	srvOpts := server.Options{
		KeepaliveTime:           cfg.KeepaliveTime,
		KeepaliveTimeout:        cfg.KeepaliveTimeout,
		MaxHeaderBytes:          cfg.Broker.MaxHeaderBytes,
		MaxPublishBatch:         cfg.Limits.MaxPublishBatch,
		MaxStreamsPerConnection: cfg.Limits.MaxStreamsPerConnection,
		MaxConnections:          cfg.Limits.MaxConnections,
		HandshakeTimeout:        cfg.Limits.HandshakeTimeout,
		Logger:                  log.Named("server"),
		Plugins:                 pm.stats,
		Auth:                    guard,
	}
	// A reload re-reads the TLS files, then the plugins; users need a restart.
	reload := func(ctx context.Context) ([]string, error) {
		if err := guard.Reload(); err != nil {
			return nil, err
		}
		return pm.reload(ctx)
	}
	if *configPath != "" {
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
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("listening", "addr", lis.Addr().String(), "config", cfgName(*configPath), "tls", cfg.TLS != nil, "users", len(cfg.Users))
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
				log.Error("reload refused; the running plugins stay", "error", err)
			}
		case <-ctx.Done():
			running = false
		}
	}
	log.Info("shutting down", "grace", cfg.ShutdownGrace)
	grace, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		log.Warn("grace period ended with messages unacked", "error", err)
	}
	if err := <-served; err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func cfgName(path string) string {
	if path == "" {
		return "built-in defaults"
	}
	return path
}
