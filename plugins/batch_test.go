package plugins

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// OnPublishBatch gives every message what OnPublish gives it alone: a chain of plugins that
// tag, drop, reject, emit, re-route, trap (fail_open, fail_closed and dead_letter) and read
// the inbox, over frames of mixed messages, some of which stop early.
func TestOnPublishBatchMatchesOnPublish(t *testing.T) {
	h := newHost(t)
	specs := func() []Spec {
		return []Spec{
			{Name: "tag", Wasm: fixture(t, "tag"), Config: map[string]string{"tag": "t1"}},
			{Name: "inbox", Wasm: fixture(t, "inboxpass"), PoolSize: 1},
			{Name: "trap-open", Wasm: fixture(t, "trap"), Topics: []string{"trap.open"}, BreakerFailures: 1 << 20},
			{Name: "trap-closed", Wasm: fixture(t, "trap"), Topics: []string{"trap.closed"}, FailurePolicy: FailClosed, BreakerFailures: 1 << 20},
			{Name: "trap-dlq", Wasm: fixture(t, "trap"), Topics: []string{"trap.dlq"}, FailurePolicy: FailDeadLetter, BreakerFailures: 1 << 20},
			{Name: "good", Wasm: fixture(t, "good"), Topics: []string{"orders.>", "reroute.me"}, Config: map[string]string{"to": "rerouted.x"}},
			{Name: "tagged", Wasm: fixture(t, "inboxtag")},
			{Name: "batchpass", Wasm: fixture(t, "batchpass")},
			{Name: "batch", Wasm: fixture(t, "batch"), Topics: []string{"d.>", "t.>", "e.>", "r.>", "b.>", "p.>"}},
		}
	}
	one, batch := load(t, h, specs()...), load(t, h, specs()...)
	tenants := []string{"acme", "evil", "blocked", "other", ""}
	topics := []string{"a.b", "orders.1", "reroute.me", "trap.open", "trap.closed", "trap.dlq", "x", "d.1", "t.1", "e.1", "r.1", "b.1", "p.1"}
	for _, n := range []int{1, 2, 5, 16, 17, 40} {
		var ds []broker.Draft
		for i := range n {
			h := map[string]string{"i": fmt.Sprint(i)}
			if tn := tenants[(i*7+n)%len(tenants)]; tn != "" {
				h["tenant"] = tn
			}
			ds = append(ds, broker.Draft{Topic: topics[(i*3+n)%len(topics)], Payload: []byte(fmt.Sprint("p", i)), Headers: broker.MakeHeaders(h)})
		}
		want := make([]broker.Draft, n)
		wantV := make([]broker.PublishVerdict, n)
		wantE := make([]string, n)
		for i := range ds {
			want[i] = ds[i]
			v, err := one.OnPublish(&want[i])
			wantV[i], wantE[i] = v, fmt.Sprint(err)
		}
		vs, errs := make([]broker.PublishVerdict, n), make([]error, n)
		batch.OnPublishBatch(ds, vs, errs)
		for i := range ds {
			if !reflect.DeepEqual(ds[i], want[i]) || !reflect.DeepEqual(vs[i], wantV[i]) || fmt.Sprint(errs[i]) != wantE[i] {
				t.Fatalf("frame of %d, message %d:\nbatch  %+v %+v %v\nalone  %+v %+v %v", n, i, ds[i], vs[i], errs[i], want[i], wantV[i], wantE[i])
			}
		}
	}
	// A batch counts its calls when it ends, and its failures as they happen: the same counts.
	// Batched apart, which says that the plugins with batches were given them.
	got, want := batch.Stats(), one.Stats()
	for i := range got {
		if batches := got[i].Name == "batch" || got[i].Name == "batchpass"; batches != (got[i].Batched > 0) {
			t.Errorf("%s: %d calls batched", got[i].Name, got[i].Batched)
		}
		got[i].Batched = 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats after the batches:\n%+v\nwant (one by one)\n%+v", got, want)
	}
	for i, m := range batch.Metrics() {
		for j, hm := range m.Hooks {
			if w := one.Metrics()[i].Hooks[j]; hm.Calls != w.Calls || hm.Failures != w.Failures {
				t.Errorf("%s %s: metrics count %d calls %v failures, want %d %v", m.Name, hm.Hook, hm.Calls, hm.Failures, w.Calls, w.Failures)
			}
		}
	}
}

// A chain of two WAT plugins, a filter that reads a header (pass.wat) and a transform that
// sets one (tag.wat), over frames of 16 messages: the cost per message (ns/msg) with one
// instance per plugin per frame. Compare BenchmarkOnPublishChain, one message at a time.
func BenchmarkOnPublishBatch(b *testing.B) {
	c := load(b, newHost(b), chainSpecs(b)...)
	headers := broker.Headers{{Key: "tenant", Value: "acme"}}
	payload := make([]byte, 256)
	ds := make([]broker.Draft, 16)
	vs, errs := make([]broker.PublishVerdict, 16), make([]error, 16)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		for i := range ds {
			ds[i] = broker.Draft{Topic: "orders.1", Payload: payload, Headers: headers}
		}
		c.OnPublishBatch(ds, vs, errs)
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ds)), "ns/msg")
}

// The chain of BenchmarkOnPublishBatch, one message at a time.
func BenchmarkOnPublishChain(b *testing.B) { benchmarkOnPublish(b, chainSpecs(b)...) }

func chainSpecs(b *testing.B) []Spec {
	return []Spec{{Name: "filter", Wasm: fixture(b, "pass")}, {Name: "transform", Wasm: fixture(b, "tag"), Config: map[string]string{"tag": "1"}}}
}

// The filter of BenchmarkOnPublishWATPass (reads the header tenant of a 256-byte message)
// on the inbox, over frames: batchpass.wat takes each frame in one call (docs/ABI.md,
// "Batches"); ns/msg is the cost per message, to compare with that benchmark's ns/op.
// pass/128 is the same filter without batches (pass.wat, a host call per message), each
// message a call of its own on the frame's instance.
func BenchmarkOnPublishWATBatch(b *testing.B) {
	for _, bc := range []struct {
		name, wasm string
		n          int
	}{{"16", "batchpass", 16}, {"128", "batchpass", 128}, {"pass/128", "pass", 128}} {
		n := bc.n
		b.Run(bc.name, func(b *testing.B) {
			c := load(b, newHost(b), Spec{Name: "filter", Wasm: fixture(b, bc.wasm)})
			benchmarkFrames(b, c, n, "orders.1")
		})
	}
}

// benchmarkFrames runs c's on_publish over frames of n messages on topic, each with a
// 256-byte payload and headers of its own (as the server decodes a frame): tenant=acme. It
// reports the process's CPU time and the wall-clock time per message (cpu-ns/msg, ns/msg).
func benchmarkFrames(b *testing.B, c *Chain, n int, topic string) {
	headers := make([]broker.Headers, n)
	for i := range headers {
		headers[i] = broker.Headers{{Key: "tenant", Value: "acme"}}
	}
	payload := make([]byte, 256)
	ds := make([]broker.Draft, n)
	vs, errs := make([]broker.PublishVerdict, n), make([]error, n)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		for i := range ds {
			ds[i] = broker.Draft{Topic: topic, Payload: payload, Headers: headers[i]}
		}
		clear(vs)
		c.OnPublishBatch(ds, vs, errs)
	}
	if used := cpuTime() - cpu; cpu > 0 {
		b.ReportMetric(float64(used)/float64(b.N*n), "cpu-ns/msg")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
}
