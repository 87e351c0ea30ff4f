// Package bench runs the broker benchmark workloads of shared/bench/WORKLOADS.md against a
// tinybroker over gRPC, with the same shapes, warm-up, repetitions, medians and output lines as
// the NATS peer (shared/bench/peers/nats), so that bench/compare.sh can set the figures side by
// side. `tinybroker bench` is its command line; bench/run.sh runs it against a fresh
// `tinybroker serve` process per workload.
//
// It speaks the generated gRPC client directly rather than sdk/go/client (which W3 can use,
// see Config.W3Publish), to control the batching: publishers pipeline PublishStream frames of
// several messages under a bounded window of unconfirmed frames, and W2 members ack each
// received batch with one AckBatch frame.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/internal/grpcbuf"
	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/server"
)

// Config selects the workloads and their sizes. Zero values take the defaults shown.
type Config struct {
	// Addr is the broker's host:port. Empty starts a fresh broker inside this process for each
	// workload; client and broker then share one Go runtime, so use it for tests, not figures.
	Addr string
	// Workloads to run, in order: W1 to W6. Default W1, W2, W3, W5, W6; W4 needs a second
	// broker (W4Addr or W4Config) and runs only when asked for.
	Workloads []string
	// N is the number of messages per repetition. Default: W1 and W2 500,000; W3 five seconds
	// at Rate; W5 200,000.
	N int
	// Size is the payload size in bytes, at least 8 (256).
	Size int
	// Reps is the number of measured repetitions, after one warm-up (3).
	Reps int
	// Rate is W3's publish rate in messages per second (20,000).
	Rate int
	// SubCounts are W5's subscription counts, each at least 4 (1,000, 10,000, 100,000).
	SubCounts []int
	// ServerPID is the broker's process id, to read its RSS from /proc for W5; 0 reports no
	// RSS figures.
	ServerPID int
	// Timeout bounds one repetition (and W5's subscription setup) (3m).
	Timeout time.Duration
	// Batch is the most messages per PublishStream frame (128); Window the most frames sent
	// and not yet confirmed (16).
	Batch, Window int
	// Progress is how often long steps report progress on stderr (5s); negative: never.
	Progress time.Duration
	// W3Publish is how W3 publishes: "frame" sends each message in a PublishStream frame of
	// its own as soon as it is stamped, errors_only (answered only on failure, as NATS core
	// publishes unconfirmed; a last plain frame confirms them all); "frame-ack" the same with
	// every frame answered; "unary" calls Publish for each and waits for the
	// answer; "sdk" uses sdk/go/client's Publisher, which sends a message at once when its
	// stream is idle and batches the messages that queue up meanwhile (default "frame").
	W3Publish string

	// Keys, if over 0, gives W2's (and W7's flood-free) messages keys, key-0 to key-<Keys-1>
	// in turn; Ordering ("", "key" or "group") is the ordering W2's members ask for
	// (OpenSubscription.ordering): W2 with -keys 10000 -ordering key is W2 with ordering on.
	Keys     int
	Ordering string
	// TTL, if over 0, gives W1's and W2's messages that time to live (PublishRequest.ttl):
	// W2 with -ttl 1m is W2 with expiry on, paying for it but with nothing expiring.
	TTL time.Duration
	// FairBy is the fair_by of W7's fair phase ("key" or "header:tenant"; default "key").
	FairBy string
	// W7Quiet is W7's number of quiet keys (99), each publishing W7Rate messages a second
	// (10); W7FloodRate caps the flooding key's rate (0: as fast as it can). W7Members
	// members (4) hold up to W7InFlight messages each (16) and ack each W7Work (5ms) after
	// receiving it, so the group takes W7Members*W7InFlight/W7Work messages a second.
	W7Quiet, W7Rate, W7FloodRate, W7Members, W7InFlight int
	W7Work                                              time.Duration

	// W4Addr is a second broker, already running with W4's plugins loaded, compared with the
	// plain broker at Addr. Needed for W4 when Addr is set.
	W4Addr string
	// W4Config is a config file (e.g. bench/w4-go.hcl) whose plugin blocks are loaded into a
	// second in-process broker, compared with a plain in-process one. Needed for W4 when Addr
	// is empty; only its plugins are used.
	W4Config string
	// W4Lang labels W4's lines with the plugins' language (default: the <lang> of a W4Config
	// named w4-<lang>.hcl, else "go").
	W4Lang string
	// W4Base are the workloads W4 runs plain and with plugins (W1, W2).
	W4Base []string

	// Streams is W6's number of fanout subscriber streams, each on a topic of its own (10,000).
	Streams int
	// Duration is W6's measured phase per repetition, every topic getting a message a second
	// (10s), and W7's publishing time per phase.
	Duration time.Duration
	// W6Conns is the number of connections W6's streams are spread over (8).
	W6Conns int

	// Scrape is a URL (the broker's /metrics) to GET every ScrapeEvery (1s) for the whole
	// run, as a Prometheus server would, to measure what metrics cost (BENCHMARKS.md).
	Scrape      string
	ScrapeEvery time.Duration
	// DialOptions are added to every connection's, e.g. TLS credentials and a token for a
	// secured broker (tinybroker bench --tls-ca ... --token-file ...).
	DialOptions []grpc.DialOption
	// JSON prints each result line as a JSON object (see jsonLine) instead of text.
	JSON bool
}

var defaultN = map[string]int{"W1": 500_000, "W2": 500_000, "W5": 200_000} // W3: 5 s at Rate

func (c *Config) setDefaults() error {
	if len(c.Workloads) == 0 {
		c.Workloads = []string{"W1", "W2", "W3", "W5", "W6"}
	}
	for _, w := range c.Workloads {
		if w != "W3" && w != "W4" && w != "W6" && w != "W7" && defaultN[w] == 0 {
			return fmt.Errorf("unknown workload %q: use W1, W2, W3, W4, W5, W6 or W7", w)
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Size, 256)
	def(&c.Reps, 3)
	def(&c.Rate, 20_000)
	def(&c.Batch, 128)
	def(&c.Window, 16)
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Minute
	}
	if c.Progress == 0 {
		c.Progress = 5 * time.Second
	}
	if c.W3Publish == "" {
		c.W3Publish = "frame"
	}
	if c.W3Publish != "frame" && c.W3Publish != "frame-ack" && c.W3Publish != "unary" && c.W3Publish != "sdk" {
		return fmt.Errorf("W3 publish mode %q: use frame, frame-ack, unary or sdk", c.W3Publish)
	}
	if len(c.SubCounts) == 0 {
		c.SubCounts = []int{1_000, 10_000, 100_000}
	}
	switch {
	case c.Size < 8:
		return fmt.Errorf("size %d: payloads need at least 8 bytes (W3 carries a timestamp)", c.Size)
	case c.Reps < 1:
		return fmt.Errorf("reps %d: need at least 1", c.Reps)
	case c.N < 0 || c.Rate < 1 || c.Batch < 1 || c.Window < 1 || c.Timeout < 0:
		return fmt.Errorf("n %d, rate %d, batch %d, window %d, timeout %v: need n >= 0 and the others positive", c.N, c.Rate, c.Batch, c.Window, c.Timeout)
	}
	for _, k := range c.SubCounts {
		if k < 4 {
			return fmt.Errorf("subscription count %d: W5 needs at least its 4 matching subscriptions", k)
		}
	}
	if err := c.w4Defaults(); err != nil {
		return err
	}
	if err := c.w6Defaults(); err != nil {
		return err
	}
	return c.w7Defaults()
}

// Run runs cfg's workloads, printing one line per repetition and a line of medians for each on
// stdout, and warm-ups and progress on stderr.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	payload := make([]byte, cfg.Size)
	_, _ = rand.Read(payload)
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	if cfg.Scrape != "" {
		if cfg.ScrapeEvery <= 0 {
			cfg.ScrapeEvery = time.Second
		}
		sctx, stop := context.WithCancel(ctx)
		summary := scrape(sctx, cfg.Scrape, cfg.ScrapeEvery)
		defer func() {
			stop()
			fmt.Fprintln(stderr, summary())
		}()
	}
	if cfg.Addr == "" && cfg.ServerPID == 0 && slices.Contains(cfg.Workloads, "W5") {
		fmt.Fprintln(stderr, "# in-process broker: W5 reports no RSS figures (run against `tinybroker serve` with -server-pid)")
	}
	if cfg.Addr == "" && cfg.ServerPID == 0 && slices.Contains(cfg.Workloads, "W6") {
		fmt.Fprintln(stderr, "# in-process broker: W6 reports no server RSS or CPU figures (run against `tinybroker serve` with -server-pid)")
	}
	for _, w := range cfg.Workloads {
		r := &runner{ctx: ctx, cfg: cfg, addr: cfg.Addr, stdout: stdout, stderr: stderr, payload: payload, n: cfg.N}
		if r.n == 0 {
			r.n = defaultN[w]
			if w == "W3" {
				r.n = 5 * cfg.Rate
			}
		}
		stop := func() error { return nil }
		if r.addr == "" {
			var err error
			if r.addr, stop, err = startBroker(); err != nil {
				return err
			}
		}
		var err error
		switch w {
		case "W1":
			err = r.repeat("W1 tinybroker", r.w1)
		case "W2":
			err = r.repeat("W2 tinybroker"+r.keysLabel(), r.w2)
		case "W3":
			err = r.repeat("W3 tinybroker", r.w3)
		case "W4":
			err = r.w4()
		case "W5":
			err = r.w5()
		case "W6":
			err = r.w6()
		case "W7":
			err = r.w7()
		}
		if serr := stop(); err == nil && serr != nil {
			err = fmt.Errorf("stop the in-process broker: %w", serr)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
	}
	return nil
}

// runner runs one workload.
type runner struct {
	cfg            Config
	addr           string
	stdout, stderr io.Writer
	payload        []byte
	n              int             // messages per repetition
	ctx            context.Context // the whole run's
}

// metric is one named figure of a repetition; sum metrics are added up over the repetitions
// instead of taking their median (used for error counts).
type metric struct {
	name string
	v    float64
	sum  bool
}

// repeat runs f once as a warm-up (reported on stderr) and then Reps times, printing one
// line per repetition and a final line of medians. Each run of f gets a context that ends
// after Timeout.
func (r *runner) repeat(prefix string, f func(context.Context) ([]metric, error)) error {
	_, err := r.repeatMedians(prefix, f)
	return err
}

// repeatMedians is repeat, returning the medians.
func (r *runner) repeatMedians(prefix string, f func(context.Context) ([]metric, error)) ([]metric, error) {
	run := func(what string) ([]metric, error) {
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
		defer cancel()
		m, err := f(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return m, nil
	}
	m, err := run("warm-up")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.stderr, "# %s warmup %s\n", prefix, format(m))
	var all [][]metric
	for i := 1; i <= r.cfg.Reps; i++ {
		m, err := run(fmt.Sprintf("repetition %d", i))
		if err != nil {
			return nil, err
		}
		r.result(prefix, fmt.Sprintf("rep=%d", i), m, jsonLine{Rep: i})
		all = append(all, m)
	}
	med := slices.Clone(all[0])
	for j := range med {
		vals := make([]float64, len(all))
		for i := range all {
			vals[i] = all[i][j].v
		}
		if med[j].sum {
			med[j].v = 0
			for _, v := range vals {
				med[j].v += v
			}
			continue
		}
		slices.Sort(vals)
		med[j].v = vals[len(vals)/2]
		if len(vals)%2 == 0 {
			med[j].v = (vals[len(vals)/2-1] + vals[len(vals)/2]) / 2
		}
	}
	r.result(prefix, fmt.Sprintf("reps=%d median", r.cfg.Reps), med, jsonLine{Reps: r.cfg.Reps, Median: true})
	return med, nil
}

// jsonLine is a result line of bench --json: the workload (W1...), the labels of its text
// line's prefix (W5's subs=1000, W4's lang and workload...), which repetition or the
// median of how many, and the figures by name.
type jsonLine struct {
	Workload string             `json:"workload"`
	Labels   map[string]string  `json:"labels,omitempty"`
	Rep      int                `json:"rep,omitempty"`
	Reps     int                `json:"reps,omitempty"`
	Median   bool               `json:"median,omitempty"`
	Figures  map[string]float64 `json:"figures"`
}

// result prints one result line: prefix, what (rep=N or the median), and the figures ms;
// with Config.JSON, line filled in as a JSON object.
func (r *runner) result(prefix, what string, ms []metric, line jsonLine) {
	if !r.cfg.JSON {
		fmt.Fprintf(r.stdout, "%s %s %s\n", prefix, what, format(ms))
		return
	}
	words := strings.Fields(prefix) // "W4 tinybroker lang=go workload=W1"
	line.Workload = words[0]
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			if line.Labels == nil {
				line.Labels = map[string]string{}
			}
			line.Labels[k] = v
		}
	}
	line.Figures = make(map[string]float64, len(ms))
	for _, m := range ms {
		line.Figures[m.name] = m.v
	}
	b, _ := json.Marshal(line)
	fmt.Fprintf(r.stdout, "%s\n", b)
}

func format(ms []metric) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		if strings.HasSuffix(m.name, "_us") || strings.HasSuffix(m.name, "_pct") {
			parts[i] = fmt.Sprintf("%s=%.1f", m.name, m.v)
		} else if m.name == "ratio" || m.name == "target" || strings.HasSuffix(m.name, "_per_msg") || strings.HasSuffix(m.name, "_ratio") {
			parts[i] = fmt.Sprintf("%s=%.2f", m.name, m.v)
		} else {
			parts[i] = fmt.Sprintf("%s=%.0f", m.name, m.v)
		}
	}
	return strings.Join(parts, " ")
}

// watch prints "# what: status()" on stderr every Progress until the returned stop is called.
func (r *runner) watch(what string, status func() string) (stop func()) {
	if r.cfg.Progress < 0 {
		return func() {}
	}
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(r.cfg.Progress)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				fmt.Fprintf(r.stderr, "# %s: %s (%.0fs)\n", what, status(), time.Since(start).Seconds())
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

// dial opens a connection of its own to the broker and waits until it is ready.
func (r *runner) dial(ctx context.Context) (*grpc.ClientConn, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodecV2(grpcbuf.Codec{})), experimental.WithBufferPool(grpcbuf.Pool),
		grpc.WithInitialWindowSize(grpcbuf.StreamWindow), grpc.WithInitialConnWindowSize(grpcbuf.ConnWindow)},
		r.cfg.DialOptions...) // later options win: TLS credentials replace the plaintext ones
	conn, err := grpc.NewClient(r.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", r.addr, err)
	}
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return conn, nil
		}
		if s == connectivity.TransientFailure || !conn.WaitForStateChange(ctx, s) {
			conn.Close()
			return nil, fmt.Errorf("connect to %s: %s (is a broker listening there?)", r.addr, s)
		}
	}
}

func closeAll(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// inProcessOptions configure the in-process broker: the defaults; tests change them.
var inProcessOptions = memory.Options{}

// startBroker starts a broker with default options and its gRPC server on a free loopback
// port, and returns its address and a function that shuts both down.
func startBroker() (addr string, stop func() error, err error) { return startBrokerWith(nil) }

// startBrokerWith is startBroker with plugins: chain, if not nil, hooks the broker, and its
// counters are served by Stats.
func startBrokerWith(chain *plugins.Chain) (addr string, stop func() error, err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("in-process broker: %w", err)
	}
	b := memory.New(inProcessOptions)
	var sopts server.Options
	if chain != nil {
		b.SetHooks(chain)
		sopts.Plugins = chain.Stats
	}
	srv := server.New(b, inProcessOptions.MaxMessageBytes, sopts)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	return lis.Addr().String(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		return errors.Join(err, <-served)
	}, nil
}

// serverRSS is the broker's RSS in KB, or 0 when its process id is not known.
func (r *runner) serverRSS() (float64, error) {
	if r.cfg.ServerPID == 0 {
		return 0, nil
	}
	return rssKB(r.cfg.ServerPID)
}

// endSetup ends a subscribing phase: it stops the phase's progress line, and fails if the
// timeout fired first (saying how far it got) or a subscriber failed. It returns the broker's
// RSS once the phase is over (serverRSS).
func (r *runner) endSetup(stop func(), timedOut *time.Timer, opened int64, k int, errs []error) (float64, error) {
	stop()
	if !timedOut.Stop() {
		return 0, fmt.Errorf("subscribing took over %v: %d of %d subscribed", r.cfg.Timeout, opened, k)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return r.serverRSS()
}

// rssKB returns the resident set size of process pid in KiB, from /proc.
func rssKB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("server RSS: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("server RSS: no VmRSS in /proc/%d/status", pid)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// lockedWriter serializes writes: progress lines come from their own goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
