package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/tinybroker/tinybroker/broker"
)

// BenchmarkPluginFile measures each filter plugin named in $TB_BENCH_WASM (paths separated by
// ':'; a path may end in "#key=value,key=value" for its configuration), for BENCHMARKS.md's
// per-language table:
//
//	TB_BENCH_WASM=bench/bin/w4-filter-c.wasm:plugins/testdata/pass.wasm \
//	  go test -run '^$' -bench PluginFile -count 6 ./plugins
//
// Relative paths are taken from the repository's root. Sub-benchmarks, per file:
//
//	compile-cold     compile the module with an empty compilation cache (module-bytes: its size)
//	compile-cached   compile it again in a new runtime, from a warm on-disk cache (a restart)
//	instantiate      create one more instance: _initialize and tb_v1_init
//	on_publish       one Chain.OnPublish of a 256-byte message on topic bench.w1 with the
//	                 header tenant=acme: what the broker pays per message for a filter that
//	                 reads one header (hostcalls/op: host functions it called)
//
// Without $TB_BENCH_WASM it measures testdata/pass.wasm, the WAT filter.
func BenchmarkPluginFile(b *testing.B) {
	list := os.Getenv("TB_BENCH_WASM")
	if list == "" {
		list = "plugins/testdata/pass.wasm"
	}
	for _, arg := range strings.Split(list, ":") {
		path, cfgText, _ := strings.Cut(arg, "#")
		cfg := map[string]string{}
		for _, kv := range strings.Split(cfgText, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				cfg[k] = v
			}
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join("..", path)
		}
		bin, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(path), ".wasm")
		spec := Spec{Name: "bench", Wasm: bin, Config: cfg, Topics: []string{">"}}
		b.Run(name+"/compile-cold", func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				cache := wazero.NewCompilationCache()
				rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
				if _, err := rt.CompileModule(ctx, bin); err != nil {
					b.Fatal(err)
				}
				rt.Close(ctx)
				cache.Close(ctx)
			}
			b.ReportMetric(float64(len(bin)), "module-bytes")
		})
		b.Run(name+"/compile-cached", func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			compile := func() {
				cache, err := wazero.NewCompilationCacheWithDir(dir)
				if err != nil {
					b.Fatal(err)
				}
				rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
				if _, err := rt.CompileModule(ctx, bin); err != nil {
					b.Fatal(err)
				}
				rt.Close(ctx)
				cache.Close(ctx)
			}
			compile() // fill the cache
			for b.Loop() {
				compile()
			}
		})
		b.Run(name+"/instantiate", func(b *testing.B) { benchInstantiate(b, spec) })
		b.Run(name+"/on_publish", func(b *testing.B) {
			headers := broker.Headers{{Key: "tenant", Value: "acme"}}
			payload := make([]byte, 256)
			publish := func(c *Chain) {
				d := broker.Draft{Topic: "bench.w1", Payload: payload, Headers: headers}
				if _, err := c.OnPublish(&d); err != nil {
					b.Fatal(err)
				}
			}
			var hostCalls float64
			for _, count := range []bool{true, false} { // host calls counted first, then timed as the broker runs
				h, _ := NewHost(HostOptions{CountHostCalls: count})
				defer h.Close(context.Background())
				c, err := h.Load(context.Background(), []Spec{spec})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close(context.Background())
				if count {
					for range 100 {
						publish(c)
					}
					st := c.Stats()[0]
					hostCalls = float64(st.HostCalls) / float64(st.Calls)
					continue
				}
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					publish(c)
				}
				reportCPU(b, cpu)
				if st := c.Stats()[0]; st.Failures != 0 {
					b.Fatalf("failures: %+v", st)
				}
			}
			b.ReportMetric(hostCalls, "hostcalls/op")
		})
		// The same message in PublishStream frames of 128, each with headers of its own (as
		// the server decodes them), per message: in batches if the plugin has them.
		b.Run(name+"/frame", func(b *testing.B) {
			const n = 128
			h, _ := NewHost(HostOptions{})
			defer h.Close(context.Background())
			c, err := h.Load(context.Background(), []Spec{spec})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(context.Background())
			benchmarkFrames(b, c, n, "bench.w1")
			st := c.Stats()[0]
			if st.Failures != 0 {
				b.Fatalf("failures: %+v", st)
			}
			b.ReportMetric(float64(st.Batched)/float64(st.Calls), "batched")
		})
	}
}
