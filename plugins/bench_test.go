package plugins

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

var (
	goGuestOnce sync.Once
	goGuestDir  string
	goGuestErr  error
)

// goGuest builds the example plugin name (a Go guest) once per test binary.
func goGuest(b *testing.B, name string) []byte {
	b.Helper()
	return goGuestAt(b, "../examples/plugins/"+name)
}

// goGuestAt builds the Go guest in dir once per test binary.
func goGuestAt(b *testing.B, dir string) []byte {
	b.Helper()
	name := filepath.Base(dir)
	goGuestOnce.Do(func() {
		goGuestDir, goGuestErr = os.MkdirTemp("", "tb-go-guests-")
	})
	if goGuestErr != nil {
		b.Fatal(goGuestErr)
	}
	out := filepath.Join(goGuestDir, name+".wasm")
	if _, err := os.Stat(out); err != nil {
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, dir)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Skipf("cannot build the Go guest %s: %v\n%s", name, err, msg)
		}
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return bin
}

// benchmarkOnPublish measures Chain.OnPublish of a chain of specs on a 256-byte message with
// the header tenant=acme, which every plugin must pass.
func benchmarkOnPublish(b *testing.B, specs ...Spec) {
	h, err := NewHost(HostOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	c, err := h.Load(context.Background(), specs)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	headers := broker.Headers{{Key: "tenant", Value: "acme"}}
	payload := make([]byte, 256)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		d := broker.Draft{Topic: "orders.1", Payload: payload, Headers: headers}
		v, err := c.OnPublish(&d)
		if err != nil || v.Drop {
			b.Fatalf("verdict %+v %v", v, err)
		}
	}
	reportCPU(b, cpu)
	for _, st := range c.Stats() {
		if st.Failures != 0 {
			b.Fatalf("failures: %+v", st)
		}
	}
}

// One on_publish call of a WAT guest that reads a header, sets a header and emits: the
// host's own overhead.
func BenchmarkOnPublishWAT(b *testing.B) {
	benchmarkOnPublish(b, Spec{Name: "good", Wasm: fixture(b, "good")})
}

// One on_publish call of the Go tenant filter (reads one header, passes).
func BenchmarkOnPublishGoFilter(b *testing.B) {
	benchmarkOnPublish(b, Spec{Name: "tenant-filter", Wasm: goGuest(b, "tenant-filter"), Config: map[string]string{"allow": "acme"}})
}

// The same with a time limit: a context per call, cancellation checks in compiled code, and a
// goroutine wazero starts per call to watch the context.
func BenchmarkOnPublishGoFilterTimeout(b *testing.B) {
	benchmarkOnPublish(b, Spec{Name: "tenant-filter", Wasm: goGuest(b, "tenant-filter"), Config: map[string]string{"allow": "acme"}, CallTimeout: 100 * time.Millisecond})
}

// Compiling a Go guest from scratch (no cache), and again with a warm on-disk cache (what a
// restart pays).
func BenchmarkCompileGoGuest(b *testing.B) {
	bin := goGuest(b, "tenant-filter")
	spec := Spec{Name: "tenant-filter", Wasm: bin, Config: map[string]string{"allow": "acme"}}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			h, _ := NewHost(HostOptions{})
			c, err := h.Load(context.Background(), []Spec{spec})
			if err != nil {
				b.Fatal(err)
			}
			c.Close(context.Background())
			h.Close(context.Background())
		}
	})
	b.Run("disk-cache", func(b *testing.B) {
		dir := b.TempDir()
		h, _ := NewHost(HostOptions{CacheDir: dir})
		c, _ := h.Load(context.Background(), []Spec{spec}) // fill the cache
		c.Close(context.Background())
		h.Close(context.Background())
		for b.Loop() {
			h, _ := NewHost(HostOptions{CacheDir: dir})
			c, err := h.Load(context.Background(), []Spec{spec})
			if err != nil {
				b.Fatal(err)
			}
			c.Close(context.Background())
			h.Close(context.Background())
		}
	})
}

// Creating one more instance of a compiled Go guest (_initialize and tb_v1_init included).
func BenchmarkInstantiateGoGuest(b *testing.B) {
	benchInstantiate(b, Spec{Name: "tenant-filter", Wasm: goGuest(b, "tenant-filter"), Config: map[string]string{"allow": "acme"}})
}

// benchInstantiate measures creating one more instance of spec's plugin.
func benchInstantiate(b *testing.B, spec Spec) {
	h, _ := NewHost(HostOptions{})
	defer h.Close(context.Background())
	c, err := h.Load(context.Background(), []Spec{spec})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	p := c.all[0]
	for b.Loop() {
		inst, err := p.newInstance(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		inst.mod.Close(context.Background())
	}
}

// W4's chain: the Go filter (reads a header, passes) and the Go transform (adds a header).
// Compare BenchmarkOnPublishC, the same plugins in C.
func BenchmarkOnPublishW4Chain(b *testing.B) {
	h, _ := NewHost(HostOptions{})
	defer h.Close(context.Background())
	c, err := h.Load(context.Background(), []Spec{
		{Name: "w4-filter", Wasm: goGuestAt(b, "../bench/plugins/w4-filter")},
		{Name: "w4-transform", Wasm: goGuestAt(b, "../bench/plugins/w4-transform")},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	benchmarkW4Chain(b, c)
}

// benchmarkW4Chain publishes W4's messages (256 bytes, no header) through c, which must add
// the header x-w4.
func benchmarkW4Chain(b *testing.B, c *Chain) {
	payload := make([]byte, 256)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		d := broker.Draft{Topic: "bench.w1", Payload: payload}
		if _, err := c.OnPublish(&d); err != nil || d.Headers.Map()["x-w4"] != "1" {
			b.Fatalf("%v %v", d.Headers, err)
		}
	}
	reportCPU(b, cpu)
}

// reportCPU reports the process's CPU time per operation since cpu (cpuTime), GC included.
func reportCPU(b *testing.B, cpu time.Duration) {
	if cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	}
}
