// Command chaos runs tinybroker's hostile-client scenarios (issue 8) against a real
// `tinybroker serve` process, one fresh server per scenario, and checks that the broker
// stays within its memory budget, keeps serving a canary and never crashes.
//
//	go build -o .bin/tinybroker ./cmd/tinybroker && go run ./chaos -bin .bin/tinybroker
//
// or `make chaos`. Every scenario runs at the size of the finding it reproduces; -scale
// shrinks them while developing, -run selects them. See RELIABILITY.md for what each one
// measures and the figures of the last full run.
//
// Each server gets a config file with `memory { max_bytes = BUDGET }` and GOMEMLIMIT =
// 2 × BUDGET (the budget defaults to a quarter of GOMEMLIMIT; the default-budget scenario
// runs at that ratio instead). Its
// RSS (VmRSS) is sampled every 0.5 s; a scenario passes when
//
//   - the peak RSS stays under BUDGET + overhead, overhead = BUDGET + 64 MiB: the Go heap
//     runs to about twice its live size before a collection (GOGC=100, capped by GOMEMLIMIT
//     at 2 × BUDGET), and 64 MiB covers what is not the broker's held data: the runtime,
//     the binary, goroutine stacks and gRPC's per-connection buffers;
//   - the canary (a process publishing on its own topic every 10 ms, and a fanout
//     subscriber on another connection) loses nothing, sees no error and has p99 < 100 ms;
//   - the server is alive at the end, answers a health check on a new connection and stops
//     on SIGTERM;
//   - and the scenario's own checks hold (the bound is enforced with the expected status).
//
// The exit status is 1 if any scenario failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

type options struct {
	gomemlimit int64 // a scenario's, with the default budget (scenario.gomemlimit)
	bin        string
	budget     int64
	overhead   int64
	scale      float64
	run        *regexp.Regexp
	killRSS    int64
	timeout    time.Duration
	plugin     string
	keep       bool
	env        []string
	// minAttack is how long the short attacks are repeated, and minCanary the least time the
	// canary runs in a scenario: a p99 needs a few hundred samples.
	minAttack, minCanary time.Duration
}

func main() {
	canaryAddr := flag.String("canary", "", "run as the canary process against this address (used by the harness itself)")
	guessAddr := flag.String("guess", "", "run as the wrong-token attacker against this address until stdin closes (used by the harness itself)")
	bin := flag.String("bin", ".bin/tinybroker", "the tinybroker binary to test")
	budget := flag.String("budget", "256MiB", "the server's memory { max_bytes }")
	overhead := flag.String("overhead", "64MiB", "RSS allowed besides 2 × budget (see the package comment)")
	scale := flag.Float64("scale", 1, "scale the scenarios' sizes (counts of messages, subscriptions, connections) by this factor; 1 is full size")
	run := flag.String("run", "", "run only the scenarios whose name matches this regular expression")
	killRSS := flag.String("kill-rss", "2GiB", "kill a server whose RSS passes this (the machine is shared)")
	timeout := flag.Duration("timeout", 90*time.Second, "time limit of one scenario")
	plugin := flag.String("plugin", "plugins/testdata/pass.wasm", "a valid plugin, for the reload scenario")
	minAttack := flag.Duration("min-attack", 5*time.Second, "repeat the short attacks (16 MiB frames, 15 MiB publishes, 1.5M patterns) for this long")
	minCanary := flag.Duration("min-canary", 3*time.Second, "run the canary at least this long in each scenario")
	keep := flag.Bool("keep", false, "keep each scenario's folder (config, server log)")
	list := flag.Bool("list", false, "list the scenarios and exit")
	procs := flag.Int("procs", 0, "GOMAXPROCS of the harness's attacking clients (0: all cores); the canary and the server are not affected")
	serverEnv := flag.String("server-env", "", "extra environment for the servers, comma-separated (e.g. GODEBUG=gctrace=1; see -keep)")
	flag.Parse()
	if *canaryAddr != "" {
		if err := runCanary(*canaryAddr); err != nil {
			fmt.Fprintln(os.Stderr, "canary:", err)
			os.Exit(1)
		}
		return
	}
	if *guessAddr != "" {
		if err := runGuesser(*guessAddr); err != nil {
			fmt.Fprintln(os.Stderr, "attacker:", err)
			os.Exit(1)
		}
		return
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *list {
		for _, s := range scenarios {
			fmt.Printf("%-22s finding %s%s: %s\n", s.name, s.finding, limitsMark(s), s.what)
		}
		return
	}
	o := &options{bin: *bin, scale: *scale, timeout: *timeout, keep: *keep, minAttack: *minAttack, minCanary: *minCanary}
	if *serverEnv != "" {
		o.env = strings.Split(*serverEnv, ",")
	}
	var err error
	for _, f := range []struct {
		s string
		p *int64
	}{{*budget, &o.budget}, {*overhead, &o.overhead}, {*killRSS, &o.killRSS}} {
		if *f.p, err = config.ParseSize(f.s); err != nil {
			fatal(err)
		}
	}
	if o.run, err = regexp.Compile(*run); err != nil {
		fatal(err)
	}
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		fatal(err)
	}
	if o.plugin, err = filepath.Abs(*plugin); err != nil {
		fatal(err)
	}
	for _, p := range []string{o.bin, o.plugin} {
		if _, err := os.Stat(p); err != nil {
			fatal(err)
		}
	}
	host, _ := os.Hostname()
	host += ", load average " + loadAvg()
	fmt.Printf("chaos: %s, budget %s, RSS limit %s (2 × budget + %s), GOMEMLIMIT %s, scale %g, %s, %s\n",
		o.bin, mib(o.budget), mib(o.rssLimit()), mib(o.overhead), mib(2*o.budget), o.scale, host, time.Now().UTC().Format(time.RFC3339))
	var results []*result
	start := time.Now()
	for _, s := range scenarios {
		if !o.run.MatchString(s.name) {
			continue
		}
		r := runScenario(o, s)
		results = append(results, r)
		fmt.Printf("%-22s %s %5.1fs peak %s%s\n", s.name, r.verdict(), r.dur.Seconds(), mib(r.peak), failSummary(r))
	}
	fmt.Printf("\n%d scenarios in %.0fs\n\n", len(results), time.Since(start).Seconds())
	printTable(os.Stdout, results)
	for _, r := range results {
		if len(r.fails) > 0 {
			os.Exit(1)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(2)
}

func (o *options) rssLimit() int64 { return 2*o.budget + o.overhead }

// n scales a full-size count, keeping at least min.
func (o *options) n(full, least int) int { return max(least, int(float64(full)*o.scale)) }

func limitsMark(s *scenario) string {
	if s.limits {
		return " (limits)"
	}
	return ""
}

func failSummary(r *result) string {
	if len(r.fails) == 0 {
		return ""
	}
	return "\n    " + strings.Join(r.fails, "\n    ")
}

// A scenario is one hostile client's attack, from a finding of issue 8.
type scenario struct {
	name    string
	finding string
	what    string
	// limits is true when the protection comes from the limits branch (server limits,
	// plugin file checks, linear detach, small Stats).
	limits bool
	// config returns the scenario's part of the config file; it may create files in dir.
	config func(o *options, dir string) (string, error)
	// noServer: run starts (and checks) the server itself, e.g. one that must refuse to start.
	noServer bool
	// canaryToken is the USER:TOKEN the canary sends, for a config that declares users.
	canaryToken string
	// gomemlimit, if set, runs the server with the default memory budget: no memory block
	// in its config file, and this GOMEMLIMIT, as serve sets it on a machine (or cgroup) of
	// 4/3 of it. The scenario's budget is then the default's, a quarter of it.
	gomemlimit int64
	run        func(e *env) error
}

// env is what a scenario's run gets.
type env struct {
	ctx  context.Context
	o    *options
	s    *scenario
	dir  string
	cfg  string // the config file
	srv  *server
	addr string
	r    *result

	mu    sync.Mutex
	conns []*grpc.ClientConn
}

// conn opens a client connection, closed when the scenario ends.
func (e *env) conn() *grpc.ClientConn {
	c, err := dial(e.addr)
	if err != nil {
		panic(err) // only a malformed address makes NewClient fail
	}
	e.mu.Lock()
	e.conns = append(e.conns, c)
	e.mu.Unlock()
	return c
}

func (e *env) client() pb.BrokerClient { return pb.NewBrokerClient(e.conn()) }

// result is a scenario's outcome.
type result struct {
	s       *scenario
	dur     time.Duration
	peak    int64
	limit   int64
	canary  *canaryStats
	mu      sync.Mutex
	codes   map[codes.Code]int
	samples map[codes.Code]string
	figures []string
	fails   []string
	load    string        // the machine's 1-minute load average before and after
	cpu     time.Duration // the server's CPU time (user + system), start-up included
}

// refused counts a refusal by its status code, keeping the first message of each code.
func (r *result) refused(err error) {
	st := status.Convert(err)
	r.refusedCode(st.Code(), st.Message())
}

func (r *result) refusedCode(c codes.Code, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.codes == nil {
		r.codes, r.samples = map[codes.Code]int{}, map[codes.Code]string{}
	}
	r.codes[c]++
	if _, ok := r.samples[c]; !ok {
		r.samples[c] = msg
	}
}

func (r *result) count(c codes.Code) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.codes[c]
}

// figure records a measured figure for the table.
func (r *result) figure(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figures = append(r.figures, fmt.Sprintf(format, args...))
}

// fail records a failed check.
func (r *result) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fails = append(r.fails, fmt.Sprintf(format, args...))
}

func (r *result) verdict() string {
	if len(r.fails) > 0 {
		return "FAIL"
	}
	return "ok  "
}

// baseConfig is every scenario's config file before its own part.
func baseConfig(o *options) string {
	if o.gomemlimit > 0 {
		return "# written by the chaos harness, with the default memory budget\nshutdown_grace = \"2s\"\n\n"
	}
	return fmt.Sprintf("# written by the chaos harness\nshutdown_grace = \"2s\"\n\nmemory {\n  max_bytes = %d\n}\n\n", o.budget)
}

func runScenario(o *options, s *scenario) *result {
	if s.gomemlimit > 0 {
		oc := *o
		oc.gomemlimit, oc.budget = s.gomemlimit, s.gomemlimit/4
		o = &oc
	}
	r := &result{s: s, limit: o.rssLimit()}
	start := time.Now()
	load0 := loadAvg()
	defer func() {
		r.dur = time.Since(start)
		r.load = fmt.Sprintf("%s → %s", load0, loadAvg())
	}()
	dir, err := os.MkdirTemp("", "chaos-"+s.name+"-")
	if err != nil {
		r.fail("%v", err)
		return r
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Println("  folder:", dir)
	}
	cfg := baseConfig(o)
	if s.config != nil {
		extra, err := s.config(o, dir)
		if err != nil {
			r.fail("config: %v", err)
			return r
		}
		cfg += extra
	}
	cfgPath := filepath.Join(dir, "chaos.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		r.fail("%v", err)
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	e := &env{ctx: ctx, o: o, s: s, dir: dir, cfg: cfgPath, r: r}
	if s.noServer {
		if err := s.run(e); err != nil {
			r.fail("%v", err)
		}
		if e.srv != nil {
			r.peak = e.srv.peak()
			if r.peak > r.limit {
				r.fail("peak RSS %s over the limit %s", mib(r.peak), mib(r.limit))
			}
		}
		return r
	}

	e.srv, err = e.startServer(false)
	if err != nil {
		r.fail("%v", err)
		if e.srv != nil {
			e.srv.terminate(time.Second)
		}
		return r
	}
	e.addr = e.srv.addr
	c, err := startCanary(e.addr, s.canaryToken)
	if err != nil {
		r.fail("%v", err)
		e.srv.terminate(5 * time.Second)
		return r
	}
	canaryStart := time.Now()
	runErr := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				runErr <- fmt.Errorf("panic: %v", p)
			}
		}()
		runErr <- s.run(e)
	}()
	select {
	case err = <-runErr:
	case <-ctx.Done():
		err = fmt.Errorf("did not finish within %v", o.timeout)
	}
	if err != nil {
		r.fail("%v", err)
	}
	if e.srv.alive() {
		time.Sleep(time.Until(canaryStart.Add(o.minCanary)))
	}
	st, cerr := c.finish()
	r.canary = &st
	if cerr != nil {
		r.fail("%v", cerr)
	}
	e.mu.Lock()
	for _, c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	if why := e.srv.killedWhy(); why != "" {
		r.fail("server killed by the harness: %s", why)
	} else if !e.srv.alive() {
		r.fail("server exited: %v; log: %s", e.srv.err, e.srv.logTail(3))
	} else if err := healthy(e.addr); err != nil {
		r.fail("health check: %v", err)
	}
	r.cpu = cpuTime(e.srv.pid)
	stopped := e.srv.terminate(15 * time.Second)
	if !stopped && e.srv.killedWhy() == "" {
		r.fail("server did not stop within 15s of SIGTERM")
	}
	r.peak = e.srv.peak()
	if r.peak > r.limit {
		r.fail("peak RSS %s over the limit %s", mib(r.peak), mib(r.limit))
	}
	switch {
	case st.Sent == 0:
		r.fail("canary published nothing")
	case st.Lost > 0 || st.Errors > 0 || st.Dupes > 0 || st.SubEnded != "":
		r.fail("canary: %d lost, %d errors, %d duplicates (%s)", st.Lost, st.Errors, st.Dupes, st.FirstErr)
	}
	if st.P99 >= 100*time.Millisecond {
		r.fail("canary p99 %v ≥ 100ms", st.P99.Round(time.Millisecond))
	}
	return r
}

// startServer starts the scenario's server with its config file.
func (e *env) startServer(wantExit bool) (*server, error) {
	limit := 2 * e.o.budget
	if e.o.gomemlimit > 0 {
		limit = e.o.gomemlimit
	}
	env := append([]string{fmt.Sprintf("GOMEMLIMIT=%dMiB", limit>>20)}, e.o.env...)
	return startServer(e.o.bin, e.dir, e.cfg, env,
		e.o.killRSS, wantExit, "reload refused", "reload", "slow consumer")
}

func printTable(w *os.File, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tfinding\tresult\ttime\tserver CPU\tpeak RSS\tlimit\tcanary sent\tlost\tp50\tp99\tmax\trefusals")
	for _, r := range results {
		cs := []string{"-", "-", "-", "-", "-"}
		if c := r.canary; c != nil {
			cs = []string{fmt.Sprint(c.Sent), fmt.Sprint(c.Lost + c.Errors), ms(c.P50), ms(c.P99), ms(c.Max)}
		}
		cpu := "-"
		if r.cpu > 0 {
			cpu = fmt.Sprintf("%.1fs", r.cpu.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t%.1fs\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.s.name, r.s.finding, limitsMark(r.s), strings.TrimSpace(r.verdict()),
			r.dur.Seconds(), cpu, mib(r.peak), mib(r.limit), cs[0], cs[1], cs[2], cs[3], cs[4], r.codeSummary())
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%s (finding %s%s): %s\n", r.s.name, r.s.finding, limitsMark(r.s), r.s.what)
		fmt.Fprintf(w, "    %.1fs, machine load average %s\n", r.dur.Seconds(), r.load)
		for _, f := range r.figures {
			fmt.Fprintf(w, "    %s\n", f)
		}
		var cs []codes.Code
		for c := range r.samples {
			cs = append(cs, c)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
		for _, c := range cs {
			fmt.Fprintf(w, "    %s × %d: %q\n", codeName(c), r.codes[c], truncate(r.samples[c], 300))
		}
		if c := r.canary; c != nil {
			fmt.Fprintf(w, "    canary: %d sent, %d received, longest gap between publishes %s", c.Sent, c.Received, ms(c.LongestGap))
			if len(c.Slow) > 0 {
				fmt.Fprintf(w, "; %d ≥ %v: %s", len(c.Slow), canarySlow, strings.Join(c.Slow[:min(len(c.Slow), 8)], ", "))
			}
			fmt.Fprintln(w)
		}
		for _, f := range r.fails {
			fmt.Fprintf(w, "    FAIL: %s\n", f)
		}
	}
}

func (r *result) codeSummary() string {
	var parts []string
	var cs []codes.Code
	for c := range r.codes {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s×%d", codeName(c), r.codes[c]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// codeName spells a status code as the protocol does: RESOURCE_EXHAUSTED.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// loadAvg is the machine's 1-minute load average: the canary's latency depends on what else
// the machine runs.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
