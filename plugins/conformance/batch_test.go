package conformance

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// batchLanguages are the languages whose SDK exports tb_v1_on_publish_batch (docs/ABI.md,
// "Batches"): their inbox builds.
var batchLanguages = map[string]bool{"c": true, "rust": true, "go": true, "assemblyscript": true, "zig": true}

// frameMessages are SPEC.md's tb_on_publish rows as one publish frame, in order, with the
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
