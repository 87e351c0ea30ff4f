package bench

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
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

func TestW2(t *testing.T) {
	// Two repetitions: the second reuses the consumer group the first leaves behind.
	fs := figures(t, quick(t, "W2", func(c *Config) { c.Reps = 2 }), "W2 tinybroker")
	positive(t, fs, "acked_msgs_per_s", "elapsed_ms")
	if fs["redelivered"] != 0 {
		t.Errorf("redelivered = %v, want 0", fs["redelivered"])
	}
}

func TestW2GroupFullRetries(t *testing.T) {
	// A consumer group that holds few messages refuses publishes; they are published again.
	defer func(o broker.Options) { inProcessOptions = o }(inProcessOptions)
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
	for _, mode := range []string{"unary", "sdk"} {
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

func TestSkipped(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), Config{Workloads: []string{"W4", "W6"}}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"W4 skipped: needs plugins", "W6 skipped: "} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("no %q in:\n%s", w, out.String())
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Workloads: []string{"W7"}},
		{Size: 4},
		{SubCounts: []int{3}},
		{W3Publish: "carrier-pigeon"},
	} {
		if err := Run(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", cfg)
		}
	}
}

// BenchmarkWorkloads runs each workload against an in-process broker (fanout buffers raised
// so that W1 cannot lose a subscriber), for CPU profiles of broker, server and client at once:
//
//	go test ./internal/bench -run '^$' -bench 'Workloads/W1' -benchtime 1x -cpuprofile cpu.out
//	go tool pprof -top -focus 'tinybroker/(server|broker)\.' cpu.out
//
// The figures it prints are not comparable with bench/run.sh: client and broker share one
// process and its scheduler.
func BenchmarkWorkloads(b *testing.B) {
	defer func(o broker.Options) { inProcessOptions = o }(inProcessOptions)
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
