package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/wasmbuild"
)

type w4Lang struct {
	lang, suffix string
	memoryLimit  int
}

// w4Langs are the languages of W4's plugins (bench/plugins/w4-{filter,transform}<suffix>), each
// with the memory limit its plugins run within here: what a batch takes (arena, write lists,
// the SDK's own memory) must be given back, so memory must not grow from batch to batch. 0 is
// the host's default (Go's runtime reserves more than the others need).
var w4Langs = []w4Lang{
	{"c", "-c", 1 << 20},
	{"go", "", 0},
	{"rust", "-rust", 2 << 20},
	{"as", "-as", 2 << 20},
	{"zig", "-zig", 2 << 20}, // Zig's stack alone takes 1 MiB
	{"wat", "-wat", 1 << 20},
}

// W4's plugins (bench/plugins), built by bench/plugins/build.sh in each language with its
// SDK's inbox (and the WAT plugins by hand on it), take a publish frame in one batch call per
// plugin (docs/ABI.md, "Batches"): each message is decided as alone, and neither plugin makes a
// host call, in a batch or alone.
func TestW4PluginsBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds W4's plugins (Go and Rust plugins take several seconds); skipped under -short")
	}
	root, err := wasmbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range w4Langs {
		t.Run(l.lang, func(t *testing.T) { runW4Batch(t, w4Specs(t, root, l.lang)) })
	}
}

// w4Specs builds W4's filter and transform in lang (one of w4Langs) with bench/plugins/build.sh,
// and returns them as the chain filter, transform on bench.>. A language whose toolchain is
// missing (build.sh skips it) is skipped, except under CI, which installs every toolchain.
func w4Specs(t testing.TB, root, lang string) []plugins.Spec {
	i := slices.IndexFunc(w4Langs, func(l w4Lang) bool { return l.lang == lang })
	if i < 0 {
		t.Fatalf("no W4 plugins in %q", lang)
	}
	l := w4Langs[i]
	dir := t.TempDir()
	filter, transform := "w4-filter"+l.suffix, "w4-transform"+l.suffix
	cmd := exec.Command("bash", filepath.Join(root, "bench/plugins/build.sh"), filter, transform)
	cmd.Env = append(os.Environ(), "TB_BENCH_BIN="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench/plugins/build.sh: %v\n%s", err, out)
	}
	var specs []plugins.Spec
	for _, name := range []string{filter, transform} {
		bin, err := os.ReadFile(filepath.Join(dir, name+".wasm"))
		if errors.Is(err, fs.ErrNotExist) && bytes.Contains(out, []byte(name+": skipped")) {
			// build.sh skips a plugin whose toolchain is missing, and says which.
			if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
				t.Fatalf("under CI every toolchain is installed, but bench/plugins/build.sh skipped %s:\n%s", name, out)
			}
			t.Skipf("bench/plugins/build.sh skipped %s:\n%s", name, out)
		}
		if err != nil {
			t.Fatalf("%v\nbench/plugins/build.sh:\n%s", err, out)
		}
		spec := plugins.Spec{Name: name, Wasm: bin, Topics: []string{"bench.>"}, PoolSize: 1}
		if l.memoryLimit != 0 {
			spec.MemoryLimitBytes = l.memoryLimit
		}
		specs = append(specs, spec)
	}
	return specs
}

// BenchmarkW4Frame measures W4's filter alone per message (ns/msg) on a frame of 64 messages
// with the header tenant=acme, in each language: in one batch call (batch), and one call per
// message (alone).
func BenchmarkW4Frame(b *testing.B) {
	root, err := wasmbuild.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range w4Langs {
		b.Run(l.lang, func(b *testing.B) { benchW4Frame(b, w4Specs(b, root, l.lang)[:1]) })
	}
}

func benchW4Frame(b *testing.B, specs []plugins.Spec) {
	h, err := plugins.NewHost(plugins.HostOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	c, err := h.Load(context.Background(), specs)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	const n = 64
	ds, vs, errs := make([]broker.Draft, n), make([]broker.PublishVerdict, n), make([]error, n)
	hs := broker.Headers{{Key: "tenant", Value: "acme"}}
	payload := make([]byte, 256)
	frame := func() {
		for i := range ds {
			ds[i] = broker.Draft{Topic: "bench.w1", Payload: payload, Headers: hs}
		}
	}
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			frame()
			c.OnPublishBatch(ds, vs, errs)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
	})
	b.Run("alone", func(b *testing.B) {
		for b.Loop() {
			frame()
			for i := range ds {
				vs[i], errs[i] = c.OnPublish(&ds[i])
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
	})
	if st := c.Stats()[0]; st.Failures != 0 {
		b.Errorf("%d failures", st.Failures)
	}
}

func runW4Batch(t *testing.T, specs []plugins.Spec) {
	h, err := plugins.NewHost(plugins.HostOptions{CountHostCalls: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	c, err := h.Load(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	// A frame: tenants acme, blocked and none in turn, and one message on a topic the
	// plugins do not see.
	const n = 30
	ds := make([]broker.Draft, n)
	for i := range ds {
		ds[i] = broker.Draft{Topic: "bench.w1", Payload: fmt.Appendf(nil, "p%d", i)}
		switch i % 3 {
		case 0:
			ds[i].Headers = broker.MakeHeaders(map[string]string{"tenant": "acme", "n": fmt.Sprint(i)})
		case 1:
			ds[i].Headers = broker.MakeHeaders(map[string]string{"tenant": "blocked"})
		}
	}
	ds[n-1].Topic = "other.w1"
	vs, errs := make([]broker.PublishVerdict, n), make([]error, n)
	c.OnPublishBatch(ds, vs, errs)

	passed := 0
	for i, d := range ds {
		if errs[i] != nil {
			t.Errorf("message %d: %v", i, errs[i])
			continue
		}
		if string(d.Payload) != fmt.Sprintf("p%d", i) {
			t.Errorf("message %d: payload %q", i, d.Payload)
		}
		v := vs[i]
		switch {
		case i == n-1:
			if v.Drop || d.Headers.Map()["x-w4"] != "" {
				t.Errorf("message %d, on a topic the plugins do not see: %+v, headers %v", i, v, d.Headers)
			}
		case i%3 == 1:
			if !v.Drop || v.Reason != "blocked tenant" || v.Plugin != specs[0].Name || d.Headers.Map()["x-w4"] != "" {
				t.Errorf("message %d, tenant blocked: %+v, headers %v; want dropped by %s, not transformed", i, v, d.Headers, specs[0].Name)
			}
		default:
			passed++
			want := map[string]string{"x-w4": "1"}
			if i%3 == 0 {
				want["tenant"], want["n"] = "acme", fmt.Sprint(i)
			}
			if v.Drop || fmt.Sprint(d.Headers.Map()) != fmt.Sprint(want) {
				t.Errorf("message %d: %+v, headers %v; want passed, headers %v", i, v, d.Headers, want)
			}
		}
	}
	st := c.Stats()
	seen := []int{n - 1, passed} // the filter sees the frame's messages on bench.>, the transform those it passed
	for k, s := range st {
		if s.Calls != uint64(seen[k]) || s.Batched != s.Calls || s.HostCalls != 0 || s.Failures != 0 {
			t.Errorf("%s: %d calls, %d batched, %d host calls, %d failures; want %d calls, all batched, no host call",
				s.Name, s.Calls, s.Batched, s.HostCalls, s.Failures, seen[k])
		}
	}

	// Many frames on the same instance: what a batch takes (arena, write lists) is given back.
	const frames = 2000
	for range frames {
		for i := range ds {
			ds[i] = broker.Draft{Topic: "bench.w1", Payload: []byte("p"), Headers: broker.MakeHeaders(map[string]string{"tenant": "acme"})}
		}
		c.OnPublishBatch(ds, vs, errs)
	}
	for k, s := range c.Stats() {
		if s.Failures != 0 || s.Batched != st[k].Batched+frames*n {
			t.Errorf("%s, after %d frames: %d failures, %d more batched; want none, %d", s.Name, frames, s.Failures, s.Batched-st[k].Batched, frames*n)
		}
	}
	st = c.Stats()

	// A message alone is a tb_v1_on_publish call, still without a host call.
	d := broker.Draft{Topic: "bench.w2", Payload: []byte("p"), Headers: broker.MakeHeaders(map[string]string{"tenant": "acme"})}
	if v, err := c.OnPublish(&d); err != nil || v.Drop || d.Headers.Map()["x-w4"] != "1" {
		t.Errorf("a message alone: %+v, %v, headers %v", v, err, d.Headers)
	}
	for k, s := range c.Stats() {
		if s.Calls != st[k].Calls+1 || s.Batched != st[k].Batched || s.HostCalls != 0 {
			t.Errorf("%s, a message alone: %d calls (%d batched), %d host calls; want one more call, not batched, no host call",
				s.Name, s.Calls, s.Batched, s.HostCalls)
		}
	}
}
