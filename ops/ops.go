// Package ops is tinybroker's HTTP listener for operators: Prometheus metrics at /metrics, a
// live web dashboard at / (embedded: no CDN, works offline), its JSON API under /api/, and
// the Go profiler under /debug/pprof/. It is off unless asked for (serve --http-listen, or
// an http block in the config file). Requests are authenticated by Options.Authenticate (serve:
// the broker's users, admins only); without it the listener stays on loopback unless told
// otherwise (see RATIONALE.md, "Operating").
//
// Metrics are read from the counters the engine, the server and the plugins keep anyway, at
// scrape time (collector.go): nothing is counted for Prometheus on the path of a message.
package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/server"
)

// Server is the part of the gRPC server the metrics read (a *server.Server).
type Server interface {
	Traffic() server.Traffic
	Connections() (open int, refused uint64)
}

// Options configure an ops listener. Engine is required; the rest is optional.
type Options struct {
	Engine broker.Admin // what ops reads and changes: stats, groups, dead letters
	Server Server       // nil: no connection, stream, byte or refusal metrics
	// Plugins reports the loaded plugins' metrics (nil: none), e.g. the current
	// plugins.Chain's Metrics.
	Plugins func() []plugins.PluginMetrics
	// Admin backs the dashboard's group actions and dead-letter panel (default
	// EngineAdmin{Engine}).
	Admin Admin
	// Interval is how often the dashboard's event stream sends a snapshot (1s).
	Interval time.Duration
	// HistoryInterval is how often a point of the dashboard's history is taken (5s), and
	// HistoryLen how many are kept (720: an hour at 5 s); see history.go.
	HistoryInterval time.Duration
	HistoryLen      int
	// MaxGroupSeries is how many groups get metrics of their own (1,000); the others are
	// summed under group="_other".
	MaxGroupSeries int
	// StuckAfter is how long a group may be stalled (broker.GroupStats.Stalled: messages
	// queued, members with room, nothing delivered) before it is reported stuck: in the
	// metrics, the dashboard and, as the history samples it, the log (1m).
	StuckAfter time.Duration
	// Authenticate, if not nil, is asked about every request: an error refuses it (a gRPC
	// status: Unauthenticated answers 401 and asks the browser for a user and token,
	// PermissionDenied 403). serve passes the broker's users, admins only (server/auth).
	Authenticate func(*http.Request) error
	// AllowRemote accepts requests for any host name; without it, and without Authenticate,
	// only requests for an IP address or localhost are answered (against DNS rebinding).
	AllowRemote bool
	// Version labels tinybroker_build_info (default: the main module's version), and Commit
	// its revision label (default: Go's VCS stamping, if any).
	Version, Commit string
	Logger          hclog.Logger
}

// Ops serves the ops HTTP listener.
type Ops struct {
	opts    Options
	log     hclog.Logger
	http    *http.Server
	snaps   snapshotter
	quit    chan struct{} // closed when Shutdown starts: ends event streams
	started time.Time
	once    sync.Once
	hist    history
	stuck   map[string]bool // the groups the sampler last saw stuck, to log each episode once
	serving sync.Once       // the history's sampler is started by the first Serve
	bg      sync.WaitGroup  // the sampler

	mu      sync.Mutex
	closing bool           // set when Shutdown starts: no more event streams
	streams sync.WaitGroup // event streams running
}

// New returns the ops listener's handler for opts; Serve runs it on a listener.
func New(opts Options) *Ops {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.MaxGroupSeries <= 0 {
		opts.MaxGroupSeries = 1000
	}
	if opts.HistoryInterval <= 0 {
		opts.HistoryInterval = 5 * time.Second
	}
	if opts.HistoryLen <= 0 {
		opts.HistoryLen = 720
	}
	if opts.StuckAfter <= 0 {
		opts.StuckAfter = time.Minute
	}
	if opts.Admin == nil {
		opts.Admin = EngineAdmin{Engine: opts.Engine}
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if opts.Version == "" && bi.Main.Version != "" {
			opts.Version = bi.Main.Version
		}
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" && opts.Commit == "" {
				opts.Commit = kv.Value
			}
		}
	}
	if opts.Version == "" {
		opts.Version = "(devel)"
	}
	o := &Ops{opts: opts, log: opts.Logger, quit: make(chan struct{}), started: time.Now()}
	o.snaps.src = &sources{engine: opts.Engine, server: opts.Server, plugins: opts.Plugins, stuckAfter: opts.StuckAfter}
	o.snaps.maxAge = opts.Interval / 2

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		&collector{src: o.snaps.src, maxGroups: opts.MaxGroupSeries},
		definedCollector{plugins: opts.Plugins},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		buildInfo(opts.Version, opts.Commit, runtime.Version()),
	)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: promLog{o.log}}))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	o.routes(mux)
	o.http = &http.Server{
		Handler:           o.probes(o.authenticate(http.NewCrossOriginProtection().Handler(mux))),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          o.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return o
}

// Serve serves HTTP on lis until Shutdown; it returns nil after a Shutdown.
func (o *Ops) Serve(lis net.Listener) error {
	o.serving.Do(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.closing {
			o.bg.Go(o.sample) // stopped by Shutdown, which waits for it
		}
	})
	return server.ServeError(o.http.Serve(lis), http.ErrServerClosed)
}

// Shutdown ends the event streams, then shuts the HTTP server down, waiting until ctx is
// done for requests in progress. Idempotent.
func (o *Ops) Shutdown(ctx context.Context) error {
	var err error
	o.once.Do(func() {
		o.mu.Lock()
		o.closing = true
		o.mu.Unlock()
		close(o.quit)
		if err = o.http.Shutdown(ctx); err != nil {
			_ = o.http.Close()
		}
		o.streams.Wait()
		o.bg.Wait()
	})
	return err
}

// Listen listens on addr for the ops listener. Unless allowRemote is set (serve sets it too
// when the broker has users, who then authenticate here as on the gRPC API), the address
// must be a loopback one ("127.0.0.1:7879", "[::1]:7879", "localhost:7879"): without
// authentication, anything that can reach the listener can purge groups and replay dead
// letters.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("http listen address %q: %w (use HOST:PORT, e.g. 127.0.0.1:7879)", addr, err)
	}
	if !allowRemote && host != "localhost" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("http listen address %q is not a loopback address, and the broker has no users to authenticate its requests, so anyone who reaches it could purge groups and replay dead letters; listen on 127.0.0.1 (and reach it through an SSH tunnel), declare users (README.md, \"Securing tinybroker\": admins may use the HTTP listener), or set http { allow_remote = true } (serve --http-allow-remote) to accept that", addr)
		}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listen on %s: %w", addr, err)
	}
	if tcp, ok := lis.Addr().(*net.TCPAddr); ok && !allowRemote && !tcp.IP.IsLoopback() {
		lis.Close()
		return nil, fmt.Errorf("http listen address %q resolved to %s, not a loopback address; set http { allow_remote = true } to accept that", addr, tcp.IP)
	}
	return lis, nil
}

// authenticate refuses requests Options.Authenticate refuses.
func (o *Ops) authenticate(h http.Handler) http.Handler {
	if o.opts.Authenticate == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := o.opts.Authenticate(r)
		switch status.Code(err) {
		case codes.OK:
			h.ServeHTTP(w, r)
		case codes.Unauthenticated:
			w.Header().Set("WWW-Authenticate", `Basic realm="tinybroker", charset="UTF-8"`)
			writeError(w, http.StatusUnauthorized, errors.New(status.Convert(err).Message()+" (over HTTP: the header Authorization: Bearer USER:TOKEN, or Basic with the user and token)"))
		case codes.PermissionDenied:
			writeError(w, http.StatusForbidden, errors.New(status.Convert(err).Message()))
		default:
			writeError(w, http.StatusInternalServerError, err)
		}
	})
}

// promLog passes promhttp's errors to the logger.
type promLog struct{ log hclog.Logger }

func (l promLog) Println(v ...any) { l.log.Warn("metrics", "error", fmt.Sprint(v...)) }

// probes serves the liveness and readiness probes, /healthz and /readyz, before next (the
// authenticated routes): an orchestrator's probe carries no token, and the answers say only
// whether the process serves HTTP and whether the engine serves. /healthz is 200 while the
// process answers; /readyz is 200 while the engine serves (broker.Admin.Ready), 503 with the
// reason otherwise: shutting down, or the JetStream engine cut off from its NATS server.
func (o *Ops) probes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case "/healthz":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		case "/readyz":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := o.opts.Engine.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		default:
			next.ServeHTTP(w, r)
		}
	})
}
