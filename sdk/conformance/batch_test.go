package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

// batchLanguages are the languages whose SDK exports tb_v1_on_publish_batch (docs/ABI.md,
// "Batches"): their inbox builds.
var batchLanguages = map[string]bool{"c": true, "rust": true, "go": true, "assemblyscript": true, "zig": true}

// frameMessages are SPEC.md's tb_v1_on_publish rows as one publish frame, in order, with the
// headers each row is published with.
func frameMessages() []broker.Draft {
	big := make([]byte, 40000)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	return []broker.Draft{
		{Topic: "c.pass", Payload: []byte("payload"), Headers: broker.MakeHeaders(map[string]string{"h": "1"})},
		{Topic: "c.drop", Payload: []byte("p")},
		{Topic: "c.reject", Payload: []byte("p"), Headers: broker.MakeHeaders(map[string]string{"why": "nope"})},
		{Topic: "c.retopic", Payload: []byte("payload"), Headers: broker.MakeHeaders(map[string]string{"h": "1"})},
		{Topic: "c.headers", Payload: []byte("payload"), Headers: broker.MakeHeaders(map[string]string{"changed": "old", "removed": "x", "kept": "k"})},
		{Topic: "c.enum", Payload: []byte("payload"), Headers: broker.MakeHeaders(map[string]string{"b": "2", "a": "1", "c-long": "three", "empty": ""})},
		{Topic: "c.enum", Payload: []byte("payload")},
		{Topic: "c.payload", Payload: big},
		{Topic: "c.empty", Payload: []byte("x"), Headers: broker.MakeHeaders(map[string]string{"h": "1"})},
		{Topic: "c.emit", Payload: []byte("orig"), Headers: broker.MakeHeaders(map[string]string{"h": "1"})},
		{Topic: "c.config", Payload: []byte("payload")},
		{Topic: "c.log", Payload: []byte("logged in a frame")},
		{Topic: "c.tenant", Payload: []byte("p"), Headers: broker.MakeHeaders(map[string]string{"tenant": "acme"})},
		{Topic: "c.tenant", Payload: []byte("p"), Headers: broker.MakeHeaders(map[string]string{"tenant": "globex"})},
		{Topic: "c.tenant", Payload: []byte("p")},
		{Topic: "c.pass.x", Payload: []byte("payload")},
	}
}

// A publish frame of the rows' messages is decided as each message alone is, message by
// message, in every language; the languages with batches take the frame in one call (every
// message of it batched), and a trap in the frame fails its message alone.
func TestConformanceFrame(t *testing.T) {
	for _, lang := range languages {
		t.Run(lang, func(t *testing.T) {
			wasm := build(t, lang)
			alone, frame := load(t, wasm), load(t, wasm)
			for _, withTrap := range []bool{false, true} {
				want := frameMessages()
				if withTrap {
					want = append(want[:3:3], append([]broker.Draft{{Topic: "c.trap", Payload: []byte("p")}}, want[3:]...)...)
				}
				ds := make([]broker.Draft, len(want))
				copy(ds, want)
				wantV, wantE := make([]broker.PublishVerdict, len(want)), make([]string, len(want))
				for i := range want {
					v, err := alone.chain.OnPublish(&want[i])
					wantV[i], wantE[i] = v, fmt.Sprint(err)
				}
				before := frame.chain.Stats()[0]
				vs, errs := make([]broker.PublishVerdict, len(ds)), make([]error, len(ds))
				frame.chain.OnPublishBatch(ds, vs, errs)
				for i := range ds {
					if !reflect.DeepEqual(ds[i], want[i]) || !reflect.DeepEqual(vs[i], wantV[i]) || fmt.Sprint(errs[i]) != wantE[i] {
						t.Errorf("trap %v, message %d (%s):\nframe %s %+v %v\nalone %s %+v %v", withTrap, i, want[i].Topic,
							brief(ds[i]), vs[i], errs[i], brief(want[i]), wantV[i], wantE[i])
					}
				}
				st := frame.chain.Stats()[0]
				batched := st.Batched - before.Batched
				switch {
				case !batchLanguages[lang] && batched != 0:
					t.Errorf("%d calls batched; %s has no batches", batched, lang)
				case batchLanguages[lang] && !withTrap && batched != uint64(len(ds)):
					t.Errorf("%d of %d calls batched, want all (the SDK exports %s)", batched, len(ds), "tb_v1_on_publish_batch")
				}
			}
			// The log row's line, written in a frame.
			if !strings.Contains(frame.log.String(), "conformance log: logged in a frame") {
				t.Errorf("the log row's line is missing from the log:\n%s", frame.log)
			}
		})
	}
}

// brief shows a draft with a long payload cut.
func brief(d broker.Draft) string {
	return fmt.Sprintf("{%s %s %v}", d.Topic, show(d.Payload), d.Headers)
}

// TestBatchMemoryStaysFlat runs, in each language with batches but Go (whose runtime alone
// needs more), many batches that write (headers, payloads, reasons) under a 2 MiB memory
// limit, on one instance: an SDK whose batches kept anything of the last (write lists, their
// bytes, inboxes outgrown) would outgrow the limit and fail.
func TestBatchMemoryStaysFlat(t *testing.T) {
	frames := 2000
	if testing.Short() {
		frames = 200
	}
	for _, lang := range []string{"c", "rust", "assemblyscript", "zig"} {
		t.Run(lang, func(t *testing.T) {
			h, err := plugins.NewHost(plugins.HostOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			s := spec(build(t, lang), pluginConfig)
			s.MemoryLimitBytes, s.PoolSize = 2<<20, 1
			c, err := h.Load(context.Background(), []plugins.Spec{s})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			topics := []string{"c.headers", "c.enum", "c.payload", "c.drop", "c.config", "c.reject"}
			ds, vs, errs := make([]broker.Draft, 48), make([]broker.PublishVerdict, 48), make([]error, 48)
			for f := range frames {
				n := 8 + f%41 // frames of 8 to 48 messages: inboxes of several sizes
				for i := range n {
					ds[i] = broker.Draft{Topic: topics[i%len(topics)], Payload: []byte(strings.Repeat("p", 100+f%300)),
						Headers: broker.MakeHeaders(map[string]string{"changed": "old", "removed": "x", "b": strings.Repeat("x", 300)})}
					vs[i], errs[i] = broker.PublishVerdict{}, nil
				}
				c.OnPublishBatch(ds[:n], vs[:n], errs[:n])
				if st := c.Stats()[0]; st.Failures != 0 {
					t.Fatalf("frame %d: %+v: %v", f, st, errors.Join(errs[:n]...))
				}
				if ds[0].Headers.Map()["added"] != "1" || len(ds[2].Payload) != 2*(100+f%300) || !vs[3].Drop || errs[5] == nil {
					t.Fatalf("frame %d: %+v %+v %v", f, ds[:3], vs[3], errs[5])
				}
			}
			if st := c.Stats()[0]; st.Batched == 0 || st.Batched != st.Calls {
				t.Errorf("%d of %d calls batched", st.Batched, st.Calls)
			}
		})
	}
}

// benchmarkFrames measures wasm, a tenant filter configured with tenant=acme, on publish
// frames of 128 messages (256-byte payload, header tenant=acme) through Chain.OnPublishBatch,
// and reports ns/msg; it fails unless every message passed and, as batched says, every call
// was or none was made in a batch.
func benchmarkFrames(b *testing.B, wasm []byte, batched bool) {
	h, err := plugins.NewHost(plugins.HostOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	c, err := h.Load(context.Background(), []plugins.Spec{{Name: "filter", Wasm: wasm, Config: map[string]string{"tenant": "acme"}, PoolSize: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	const n = 128
	headers := broker.Headers{{Key: "tenant", Value: "acme"}}
	payload := make([]byte, 256)
	ds, vs, errs := make([]broker.Draft, n), make([]broker.PublishVerdict, n), make([]error, n)
	b.ReportAllocs()
	for b.Loop() {
		for i := range ds {
			ds[i] = broker.Draft{Topic: "orders.1", Payload: payload, Headers: headers}
		}
		c.OnPublishBatch(ds, vs, errs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
	st := c.Stats()[0]
	if st.Failures != 0 || (st.Batched == st.Calls) != batched {
		b.Fatalf("stats %+v: every call batched, want %v", st, batched)
	}
	for i := range vs {
		if vs[i].Drop || errs[i] != nil {
			b.Fatal(fmt.Sprint("message ", i, vs[i], errs[i]))
		}
	}
}
