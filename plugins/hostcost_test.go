package plugins

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// A plugin that reads a header and passes costs the host no allocation of its own; one that
// adds a header costs the new header map only (see callState). Each call into the guest also
// costs wazero's watcher of the call (a goroutine, its closure and a channel: wazeroPerCall),
// which close-on-context-done, always on since plugins are bounded by default (bounds.go),
// makes for every call.
func TestOnPublishAllocs(t *testing.T) {
	const wazeroPerCall = 4 // the channel, the closures of the watcher and of its cancel, a goroutine when none is free to reuse
	h := newHost(t)
	pass := load(t, h, Spec{Name: "pass", Wasm: fixture(t, "pass")})
	chain := load(t, h, Spec{Name: "pass", Wasm: fixture(t, "pass")},
		Spec{Name: "tag", Wasm: fixture(t, "tag"), Config: map[string]string{"tag": "x"}})
	headers := broker.MakeHeaders(map[string]string{"tenant": "acme"})
	payload := make([]byte, 256)
	for _, tc := range []struct {
		name string
		c    *Chain
		max  float64
	}{
		{"filter", pass, wazeroPerCall},
		{"filter+transform", chain, 2*wazeroPerCall + 1}, // the message's new headers
	} {
		allocs := testing.AllocsPerRun(200, func() {
			d := broker.Draft{Topic: "orders.1", Payload: payload, Headers: headers}
			if v, err := tc.c.OnPublish(&d); err != nil || v.Drop {
				t.Fatalf("verdict %+v %v", v, err)
			}
		})
		t.Logf("%s: %.2f allocations per message", tc.name, allocs)
		if allocs > tc.max {
			t.Errorf("%s: %.1f allocations per message, want at most %.0f", tc.name, allocs, tc.max)
		}
	}
}

// Plugins never change the caller's header map (it may be shared): the first change of a
// publish copies it, and later plugins of the chain change that copy.
func TestOnPublishCopiesHeadersOnce(t *testing.T) {
	h := newHost(t)
	tag := fixture(t, "tag")
	c := load(t, h, Spec{Name: "first", Wasm: tag, Config: map[string]string{"tag": "first"}},
		Spec{Name: "second", Wasm: tag, Config: map[string]string{"tag": "second", "require": "chain"}})
	in := map[string]string{"tenant": "acme"}
	want := maps.Clone(in)
	for range 3 {
		d := broker.Draft{Topic: "a", Headers: broker.MakeHeaders(in)}
		if v, err := c.OnPublish(&d); err != nil || v.Drop {
			t.Fatalf("verdict %+v %v", v, err)
		}
		if d.Headers.Map()["chain"] != "second" || d.Headers.Map()["tenant"] != "acme" || len(d.Headers) != 2 {
			t.Fatalf("headers after the chain: %v", d.Headers)
		}
		if !maps.Equal(in, want) {
			t.Fatalf("the caller's headers were changed: %v", in)
		}
	}
}

// A pooled call state carries nothing from one call to the next: after calls that set
// headers, re-route and emit, a plugin that only reads leaves the message as it was.
func TestCallStateReuse(t *testing.T) {
	h := newHost(t)
	good := load(t, h, Spec{Name: "good", Wasm: fixture(t, "good"), Config: map[string]string{"to": "rerouted.here"}})
	pass := load(t, h, Spec{Name: "pass", Wasm: fixture(t, "pass")})
	for i := range 50 {
		d := broker.Draft{Topic: "reroute.me"}
		v, err := good.OnPublish(&d)
		if err != nil || v.Drop || d.Topic != "rerouted.here" {
			t.Fatalf("call %d of good: %+v %v %+v", i, v, err, d)
		}
		d = broker.Draft{Topic: "orders.1", Headers: broker.MakeHeaders(map[string]string{"tenant": "acme"})}
		v, err = good.OnPublish(&d)
		if err != nil || v.Drop || len(v.Emit) != 1 || d.Headers.Map()["filtered"] != "yes" {
			t.Fatalf("call %d of good: %+v %v %+v", i, v, err, d)
		}
		if _, err := good.OnPublish(&broker.Draft{Topic: "orders.1", Headers: broker.MakeHeaders(map[string]string{"tenant": "other"})}); err != nil {
			t.Fatal(err) // dropped, with a reason
		}
		d = broker.Draft{Topic: "orders.1"}
		v, err = pass.OnPublish(&d)
		if err != nil || v.Drop || v.Reason != "" || len(v.Emit) != 0 || d.Headers != nil || d.Topic != "orders.1" || d.Payload != nil {
			t.Fatalf("call %d of pass after good: %+v %v %+v", i, v, err, d)
		}
	}
}

// One on_publish call of a WAT guest that reads a header and passes: the host's own cost.
func BenchmarkOnPublishWATPass(b *testing.B) {
	benchmarkOnPublish(b, Spec{Name: "pass", Wasm: fixture(b, "pass")})
}

// Compiled topic patterns match exactly what broker.MatchPattern matches.
func TestCompiledPatterns(t *testing.T) {
	patterns := []string{">", "a", "a.b", "a.>", "a.b.>", "*", "*.b", "a.*", "a.*.>", "*.>", "ab.>", "a.b.c"}
	topics := []string{"a", "b", "ab", "a.b", "a.c", "ab.c", "a.b.c", "a.b.c.d", "b.b", "abc.d", "a.bc", "x.y.z"}
	for _, pat := range patterns {
		if err := broker.Pattern(pat).Validate(); err != nil {
			t.Fatalf("%s: %v", pat, err)
		}
		p := &plugin{topics: compilePatterns([]string{pat})}
		for _, topic := range topics {
			if got, want := p.matchesTopic(topic), broker.Pattern(pat).Match(topic); got != want {
				t.Errorf("pattern %q, topic %q: matched %v, want %v", pat, topic, got, want)
			}
		}
	}
}

// A call's header changes, kept in a slice (and an index past maxLinear names), end as the
// last change of each name, applied on a copy of the message's headers.
func TestHeaderChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		st := &callState{callInput: callInput{hook: abi.HookPublish}}
		in := map[string]string{"0": "x", "a": "0", "b": "0"} // "0" is also a name the changes use
		want := maps.Clone(in)
		names := 1 + rng.IntN(3*maxLinear)
		changes := rng.IntN(60)
		if round < 20 {
			changes = 1 // applyHeaders' own path for one change
		}
		for range changes {
			k := strconv.Itoa(rng.IntN(names))
			if rng.IntN(3) == 0 {
				st.changeHeader(headerChange{key: k, deleted: true})
				delete(want, k)
			} else {
				v := strconv.Itoa(rng.IntN(1000))
				st.changeHeader(headerChange{key: k, value: v})
				want[k] = v
			}
		}
		seen := map[string]bool{}
		for _, c := range st.changes {
			if seen[c.key] {
				t.Fatalf("round %d: %q changed twice in %v", round, c.key, st.changes)
			}
			seen[c.key] = true
		}
		shared := broker.MakeHeaders(in)
		kept := slices.Clone(shared)
		got := applyHeaders(shared, st.changes)
		if !slices.Equal(shared, kept) {
			t.Fatalf("round %d: the message's headers changed in place: %v, were %v", round, shared, kept)
		}
		if !maps.Equal(got.Map(), want) && (len(got) > 0 || len(want) > 0) {
			t.Fatalf("round %d: headers %v, want %v", round, got, want)
		}
		if !slices.IsSortedFunc(got, func(a, b broker.Header) int { return strings.Compare(a.Key, b.Key) }) {
			t.Fatalf("round %d: headers %v are not sorted by name", round, got)
		}
		if in["0"] != "x" || in["a"] != "0" || in["b"] != "0" || len(in) != 3 {
			t.Fatalf("round %d: the message's headers changed: %v", round, in)
		}
		st.reset()
		if len(st.changes) != 0 || len(st.changeIdx) != 0 {
			t.Fatalf("round %d: reset kept %v %v", round, st.changes, st.changeIdx)
		}
	}
}

// A batch's messages that come with the same headers and get the same change share one
// copy of the result, which no later plugin changes in place: each message still ends with
// its own headers, and the published ones are never touched.
func TestBatchSharesHeaderChange(t *testing.T) {
	p := &plugin{host: &Host{opts: HostOptions{MaxHeaders: broker.Limits{}.WithDefaults().MaxHeaders, MaxHeaderBytes: broker.Limits{}.WithDefaults().MaxHeaderBytes}}}
	var memo headerMemo
	a1 := broker.MakeHeaders(map[string]string{"a": "1"})
	a1too := broker.MakeHeaders(map[string]string{"a": "1"})
	a2 := broker.MakeHeaders(map[string]string{"a": "2"})
	ds := []broker.Draft{{Topic: "t", Headers: a1}, {Topic: "t", Headers: a1too}, {Topic: "t", Headers: a2}, {Topic: "t", Headers: a1}}
	owned := make([]bool, len(ds))
	set := func(st *callState, k, v string) {
		st.hook = abi.HookPublish
		st.changeHeader(headerChange{key: k, value: v})
	}
	for i := range ds {
		st := &callState{}
		v := "1"
		if i == 3 {
			v = "other" // the same headers as the first, another change
		}
		set(st, "x", v)
		var out broker.PublishVerdict
		if stop, err := p.settle(st, 0, &ds[i], &out, &owned[i], &memo); stop || err != nil {
			t.Fatalf("message %d: %v %v", i, stop, err)
		}
	}
	want := []map[string]string{{"a": "1", "x": "1"}, {"a": "1", "x": "1"}, {"a": "2", "x": "1"}, {"a": "1", "x": "other"}}
	for i := range ds {
		if !maps.Equal(ds[i].Headers.Map(), want[i]) || owned[i] {
			t.Errorf("message %d: headers %v owned %v, want %v and not owned (maybe shared)", i, ds[i].Headers, owned[i], want[i])
		}
	}
	if &ds[0].Headers[0] != &ds[1].Headers[0] {
		t.Error("the first two messages' equal results are not shared")
	}
	// A later plugin (outside a batch) that changes a header of the first message.
	st := &callState{}
	set(st, "x", "2")
	var out broker.PublishVerdict
	p.settle(st, 0, &ds[0], &out, &owned[0], nil)
	if ds[0].Headers.Map()["x"] != "2" || ds[1].Headers.Map()["x"] != "1" {
		t.Errorf("after a later change of the first message: %v and %v; the second must keep x=1", ds[0].Headers, ds[1].Headers)
	}
	for _, h := range []broker.Headers{a1, a1too, a2} {
		if len(h) != 1 || h[0].Key != "a" {
			t.Errorf("published headers changed: %v", h)
		}
	}
}
