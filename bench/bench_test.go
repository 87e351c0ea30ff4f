package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/plugins"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quick runs workload w against an in-process broker with small sizes, one repetition.
func quick(t *testing.T, w string, edit func(*Config)) (stdout string) {
	t.Helper()
	cfg := Config{Workloads: []string{w}, N: 2000, Reps: 1, Rate: 4000, SubCounts: []int{100}, Timeout: 30 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	var out, errOut bytes.Buffer
	if err := Run(context.Background(), cfg, &out, &errOut); err != nil {
		t.Fatalf("Run(%s): %v\nstderr:\n%s", w, err, errOut.String())
	}
	t.Logf("stdout:\n%sstderr:\n%s", out.String(), errOut.String())
	if !strings.Contains(errOut.String(), "warmup") {
		t.Errorf("no warm-up line on stderr:\n%s", errOut.String())
	}
	return out.String()
}

// figures checks that stdout has a rep=1 line and a median line for prefix, and returns the
// median line's figures.
func figures(t *testing.T, stdout, prefix string) map[string]float64 {
	t.Helper()
	rep := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + ` rep=1 \S+=`)
	if !rep.MatchString(stdout) {
		t.Errorf("no %q rep=1 line in:\n%s", prefix, stdout)
	}
	med := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + ` reps=\d+ median (.*)$`).FindStringSubmatch(stdout)
	if med == nil {
		t.Fatalf("no %q median line in:\n%s", prefix, stdout)
	}
	fs := map[string]float64{}
	for _, kv := range strings.Fields(med[1]) {
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			t.Fatalf("bad figure %q in %q", kv, med[0])
		}
		fs[k] = f
	}
	return fs
}

func positive(t *testing.T, fs map[string]float64, names ...string) {
	t.Helper()
	for _, n := range names {
		if v, ok := fs[n]; !ok || v <= 0 {
			t.Errorf("%s = %v (present: %v), want > 0", n, v, ok)
		}
	}
}

func TestW1(t *testing.T) {
	fs := figures(t, quick(t, "W1", nil), "W1 tinybroker")
	positive(t, fs, "delivered_msgs_per_s", "elapsed_ms")
}

// TestJSON: bench --json prints each repetition and the median as a JSON object, with the
// text line's labels and figures.
func TestJSON(t *testing.T) {
	out := quick(t, "W5", func(c *Config) { c.JSON = true })
	var lines []jsonLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var j jsonLine
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		lines = append(lines, j)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want a repetition and the median:\n%s", len(lines), out)
	}
	rep, med := lines[0], lines[1]
	if rep.Workload != "W5" || rep.Labels["subs"] != "100" || rep.Rep != 1 || rep.Median {
		t.Errorf("repetition line %+v, want W5 subs=100 rep 1", rep)
	}
	if med.Workload != "W5" || !med.Median || med.Reps != 1 || med.Figures["msgs_per_s"] <= 0 {
		t.Errorf("median line %+v, want W5's median of 1 with msgs_per_s", med)
	}
}

func TestW2(t *testing.T) {
	// Two repetitions: the second reuses the consumer group the first leaves behind.
	fs := figures(t, quick(t, "W2", func(c *Config) { c.Reps = 2 }), "W2 tinybroker")
	positive(t, fs, "acked_msgs_per_s", "elapsed_ms")
	if fs["redelivered"] != 0 {
		t.Errorf("redelivered = %v, want 0", fs["redelivered"])
	}
}

// W2 with keys and ordering: the members ask for ordering key (the bench checks that the
// group has it), every message is delivered once.
func TestW2Keyed(t *testing.T) {
	fs := figures(t, quick(t, "W2", func(c *Config) { c.Reps, c.Keys, c.Ordering = 2, 100, "key" }), "W2 tinybroker keys=100 ordering=key")
	positive(t, fs, "acked_msgs_per_s", "elapsed_ms")
	if fs["redelivered"] != 0 {
		t.Errorf("redelivered = %v, want 0", fs["redelivered"])
	}
}

// W2 with a ttl on every message (none expiring): every message is delivered once.
func TestW2TTL(t *testing.T) {
	fs := figures(t, quick(t, "W2", func(c *Config) { c.Reps, c.TTL = 2, time.Hour }), "W2 tinybroker ttl=1h0m0s")
	positive(t, fs, "acked_msgs_per_s", "elapsed_ms")
	if fs["redelivered"] != 0 {
		t.Errorf("redelivered = %v, want 0", fs["redelivered"])
	}
}

// W7's three phases each print their lines, and the summary the p99 ratios; no quiet
// message is lost or duplicated (the in-process broker refuses rather than drops, and
// refused quiet messages are sent again), and the flood is delivered in the phases it runs.
func TestW7(t *testing.T) {
	out := quick(t, "W7", func(c *Config) {
		c.Duration, c.W7Quiet, c.W7Rate, c.W7FloodRate, c.W7Work = time.Second, 5, 50, 5000, time.Millisecond
	})
	for _, ph := range []string{"phase=alone fair_by=key", "phase=fifo fair_by=none", "phase=fair fair_by=key"} {
		fs := figures(t, out, "W7 tinybroker "+ph)
		positive(t, fs, "quiet_p50_us", "quiet_p99_us")
		if fs["quiet_lost"] != 0 || fs["quiet_duplicated"] != 0 {
			t.Errorf("%s: quiet_lost %v, quiet_duplicated %v; want 0", ph, fs["quiet_lost"], fs["quiet_duplicated"])
		}
		if flood := fs["flood_delivered_per_s"]; (ph != "phase=alone fair_by=key") != (flood > 0) {
			t.Errorf("%s: flood_delivered_per_s %v", ph, flood)
		}
	}
	if !regexp.MustCompile(`(?m)^W7 tinybroker summary reps=1 median fifo_p99_ratio=\S+ fair_p99_ratio=\S+ target=2.00$`).MatchString(out) {
		t.Errorf("no summary line in:\n%s", out)
	}
}

func TestW2GroupFullRetries(t *testing.T) {
	// A consumer group that holds few messages refuses publishes; they are published again.
	defer func(o memory.Options) { inProcessOptions = o }(inProcessOptions)
	inProcessOptions.GroupMaxQueued = 100
	fs := figures(t, quick(t, "W2", func(c *Config) { c.N = 20_000 }), "W2 tinybroker")
	positive(t, fs, "acked_msgs_per_s", "publish_retries")
	if fs["redelivered"] != 0 {
		t.Errorf("redelivered = %v, want 0", fs["redelivered"])
	}
}

func TestW3(t *testing.T) {
	fs := figures(t, quick(t, "W3", nil), "W3 tinybroker")
	positive(t, fs, "p50_us", "p99_us", "p999_us", "sent_msgs_per_s")
	if fs["p50_us"] > fs["p99_us"] || fs["p99_us"] > fs["p999_us"] {
		t.Errorf("percentiles out of order: %v", fs)
	}
}

func TestW3PublishModes(t *testing.T) {
	for _, mode := range []string{"frame-ack", "unary", "sdk"} { // "frame" is the default, run by TestWorkloads
		t.Run(mode, func(t *testing.T) {
			fs := figures(t, quick(t, "W3", func(c *Config) { c.W3Publish = mode; c.N = 1000 }), "W3 tinybroker")
			positive(t, fs, "p50_us", "p99_us", "p999_us", "sent_msgs_per_s")
		})
	}
}

func TestW5(t *testing.T) {
	out := quick(t, "W5", func(c *Config) { c.SubCounts = []int{40, 100} })
	for _, k := range []string{"40", "100"} {
		fs := figures(t, out, "W5 tinybroker subs="+k)
		positive(t, fs, "msgs_per_s", "sub_setup_ms")
	}
}

func TestW6(t *testing.T) {
	// The broker runs in this process: its "server" figures are this process's.
	out := quick(t, "W6", func(c *Config) {
		c.Streams = 50
		c.Duration = 2 * time.Second
		c.W6Conns = 3
		c.ServerPID = os.Getpid()
	})
	fs := figures(t, out, "W6 tinybroker streams=50")
	positive(t, fs, "p50_us", "p99_us", "p999_us", "target_p99_us", "sent_msgs_per_s", "stream_setup_ms",
		"server_rss_kb", "server_cpu_pct", "client_cpu_pct")
	for _, f := range []string{"lost", "duplicated", "rss_per_stream_b"} {
		if _, ok := fs[f]; !ok {
			t.Errorf("no %s figure", f)
		}
	}
	if fs["lost"] != 0 || fs["duplicated"] != 0 {
		t.Errorf("lost = %v, duplicated = %v, want 0", fs["lost"], fs["duplicated"])
	}
	if fs["p50_us"] > fs["p99_us"] || fs["p99_us"] > fs["p999_us"] {
		t.Errorf("percentiles out of order: %v", fs)
	}
	if r := fs["sent_msgs_per_s"]; r < 25 || r > 75 { // 50 topics, a message a second each
		t.Errorf("sent_msgs_per_s = %v, want about 50", r)
	}
}

// w4Plugins builds the W4 plugins (Go guests) into dir/bin and copies bench/w4-go.hcl into
// dir, and returns the copy's path.
func w4Plugins(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: W4 builds two Go plugins for wasip1 and compiles them with wazero")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("W4 builds its plugins with the go command, which is not on PATH: %v", err)
	}
	dir := t.TempDir()
	for _, p := range []string{"w4-filter", "w4-transform"} {
		cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-trimpath", "-o", filepath.Join(dir, "bin", p+".wasm"), "./plugins/"+p)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", p, err, out)
		}
	}
	src, err := os.ReadFile("w4-go.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// A compilation cache that outlives the test (wazero keys it by module and version), out
	// of the user's home.
	src = fmt.Appendf(src, "\nplugin_cache_dir = %q\n", filepath.Join(os.TempDir(), "tinybroker-bench-test-wazero"))
	cfg := filepath.Join(dir, "w4-go.hcl")
	if err := os.WriteFile(cfg, src, 0o644); err != nil {
		t.Fatal(err)
	}
	// Compile both into the on-disk cache the in-process broker will use, at once rather than
	// one after the other: under the race detector wazero takes ~10 s per Go guest.
	c, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, spec := range c.Plugins {
		wg.Go(func() {
			h, err := pluginHost(c)
			if err != nil {
				return
			}
			defer h.Close(context.Background())
			if ch, err := h.Load(context.Background(), []plugins.Spec{spec}); err == nil {
				ch.Close(context.Background())
			}
		})
	}
	wg.Wait()
	return cfg
}

func TestW4(t *testing.T) {
	cfg := w4Plugins(t)
	out := quick(t, "W4", func(c *Config) { c.W4Config = cfg; c.N = 1000 })
	for _, w := range []string{"W1", "W2"} {
		fs := figures(t, out, "W4 tinybroker lang=go workload="+w)
		positive(t, fs, "plain", "plugins", "ratio", "target")
		if fs["plugin_calls_per_msg"] < 2 { // two plugins; W2's redeliveries would add calls
			t.Errorf("%s: plugin_calls_per_msg = %v, want at least 2 (a filter and a transform)", w, fs["plugin_calls_per_msg"])
		}
		if fs["plugin_failures"] != 0 {
			t.Errorf("%s: plugin_failures = %v, want 0", w, fs["plugin_failures"])
		}
		if r := fs["plugins"] / fs["plain"]; math.Abs(r-fs["ratio"]) > 0.011 {
			t.Errorf("%s: ratio %v, but plugins/plain = %v", w, fs["ratio"], r)
		}
	}
}

func TestW4NeedsPlugins(t *testing.T) {
	for _, cfg := range []Config{
		{Workloads: []string{"W4"}},                                            // no plugins anywhere
		{Workloads: []string{"W4"}, Addr: "127.0.0.1:1"},                       // no -w4-addr
		{Workloads: []string{"W4"}, W4Addr: "127.0.0.1:1"},                     // no plain broker
		{Workloads: []string{"W4"}, Addr: "127.0.0.1:1", W4Config: "x"},        // in-process plugins vs a remote broker
		{Workloads: []string{"W4"}, W4Config: "x.hcl", W4Base: []string{"W3"}}, // W4 runs W1 and W2
	} {
		err := Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "W4") {
			t.Errorf("Run(%+v) = %v, want an error about W4", cfg, err)
		}
	}
	// A broker without plugins at -w4-addr is refused before anything runs.
	addr := servertest.Start(t, servertest.Options{}).Addr
	err := Run(context.Background(), Config{Workloads: []string{"W4"}, Addr: addr, W4Addr: addr}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no plugins loaded") {
		t.Errorf("W4 against a plain broker as the plugin one: %v, want \"no plugins loaded\"", err)
	}
}

func TestW4Lang(t *testing.T) {
	for file, want := range map[string]string{"bench/w4-c.hcl": "c", "/x/w4-rust.hcl": "rust", "plugins.hcl": "go", "": "go"} {
		c := Config{W4Config: file}
		if err := c.setDefaults(); err != nil {
			t.Fatal(err)
		}
		if c.W4Lang != want {
			t.Errorf("W4Config %q: lang %q, want %q", file, c.W4Lang, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Workloads: []string{"W8"}},
		{Size: 4},
		{Keys: -1},
		{TTL: -time.Second},
		{Ordering: "keys"},
		{Workloads: []string{"W7"}, FairBy: "tenant"},
		{Workloads: []string{"W7"}, W7Members: -1},
		{SubCounts: []int{3}},
		{W3Publish: "carrier-pigeon"},
		{Workloads: []string{"W6"}, Size: 8},
		{Streams: -1},
		{Duration: time.Millisecond},
	} {
		if err := Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", cfg)
		}
	}
}

// BenchmarkWorkloads runs each workload against an in-process broker (fanout buffers raised
// so that W1 cannot lose a subscriber), for CPU profiles of broker, server and client at once:
//
//	go test ./bench -run '^$' -bench 'Workloads/W1' -benchtime 1x -cpuprofile cpu.out
//	go tool pprof -top -focus 'tinybroker/(server|broker)\.' cpu.out
//
// The figures it prints are not comparable with bench/run.sh: client and broker share one
// process and its scheduler.
func BenchmarkWorkloads(b *testing.B) {
	defer func(o memory.Options) { inProcessOptions = o }(inProcessOptions)
	inProcessOptions.FanoutBufferMessages = 1 << 20
	inProcessOptions.FanoutBufferBytes = 1 << 30
	for _, w := range []string{"W1", "W2", "W3", "W5"} {
		b.Run(w, func(b *testing.B) {
			cfg := Config{Workloads: []string{w}, N: 200_000, Reps: 1, SubCounts: []int{1000}, Progress: -1}
			if w == "W3" {
				cfg.N = 0 // 5 s at 20,000 msgs/s
			}
			for b.Loop() {
				var out bytes.Buffer
				if err := Run(context.Background(), cfg, &out, io.Discard); err != nil {
					b.Fatal(err)
				}
				b.Log(strings.TrimSpace(out.String()))
			}
		})
	}
}
