package plugins

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newHost(t testing.TB) *Host {
	t.Helper()
	h, err := NewHost(HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func load(t testing.TB, h *Host, specs ...Spec) *Chain {
	t.Helper()
	c, err := h.Load(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// The .wasm fixtures are what their .wat sources compile to.
func TestFixturesUpToDate(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm (Debian package wabt) not installed")
	}
	wats, _ := filepath.Glob("testdata/*.wat")
	for _, wat := range wats {
		out := filepath.Join(t.TempDir(), "x.wasm")
		if b, err := exec.Command("wat2wasm", wat, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm %s: %v\n%s", wat, err, b)
		}
		want, _ := os.ReadFile(out)
		if got, _ := os.ReadFile(strings.TrimSuffix(wat, ".wat") + ".wasm"); !bytes.Equal(got, want) {
			t.Errorf("%s.wasm is stale: run make wasm-fixtures", strings.TrimSuffix(wat, ".wat"))
		}
	}
}

// A bad plugin is refused at load with the reason.
func TestLoadRefusesBadPlugins(t *testing.T) {
	h := newHost(t)
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"wrong ABI version", Spec{Name: "p", Wasm: fixture(t, "abiv2")}, "ABI v2; this broker speaks v1"},
		{"no marker", Spec{Name: "p", Wasm: fixture(t, "nomarker")}, "does not export tinybroker_abi_v1"},
		{"no hooks", Spec{Name: "p", Wasm: fixture(t, "nohooks")}, "exports no hook"},
		{"bad signature", Spec{Name: "p", Wasm: fixture(t, "badsig")}, "tb_on_publish has signature"},
		{"forbidden import", Spec{Name: "p", Wasm: fixture(t, "badimport")}, "env.open_socket"},
		{"the meter's import", Spec{Name: "p", Wasm: fixture(t, "importsmeter")}, "imports tinybroker_meter.yield; plugins may import only"},
		{"init refuses", Spec{Name: "p", Wasm: fixture(t, "initfail")}, "config key allow is missing"},
		{"not wasm", Spec{Name: "p", Wasm: []byte("hello")}, "not a valid WebAssembly module"},
		{"missing file", Spec{Name: "p", Path: "testdata/nope.wasm"}, "nope.wasm"},
		{"hook not exported", Spec{Name: "p", Wasm: fixture(t, "loop"), Hooks: []string{HookAck}}, "does not export tb_v1_on_ack"},
		{"bad name", Spec{Name: "a b", Wasm: fixture(t, "loop")}, "plugin name"},
		{"bad topic pattern", Spec{Name: "p", Wasm: fixture(t, "loop"), Topics: []string{"a.>.b"}}, "topics"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.Load(context.Background(), []Spec{c.spec})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want an error mentioning %q", err, c.want)
			}
		})
	}
	if _, err := h.Load(context.Background(), []Spec{{Name: "p", Wasm: fixture(t, "good")}, {Name: "p", Wasm: fixture(t, "good")}}); err == nil {
		t.Fatal("two plugins with one name accepted")
	}
}

// Every on_publish verdict: pass with changes and an emit, drop, reject, re-route.
func TestOnPublishVerdicts(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "good", Wasm: fixture(t, "good"), Config: map[string]string{"to": "rerouted.here"}})
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	all := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})

	res, err := b.Publish("orders.1", []byte("x"), map[string]string{"tenant": "acme"})
	if err != nil || res.Routed != 1 {
		t.Fatalf("pass: %+v %v", res, err)
	}
	d := all.Next(t)
	if d.Msg.Topic != "orders.1" || d.Msg.Headers.Map()["filtered"] != "yes" || d.Msg.Headers.Map()["tenant"] != "acme" {
		t.Fatalf("passed message %+v", d.Msg)
	}
	if e := all.Next(t); e.Msg.Topic != "audit.copy" || string(e.Msg.Payload) != "acme" {
		t.Fatalf("emitted message %+v", e.Msg)
	}

	res, err = b.Publish("orders.2", []byte("x"), map[string]string{"tenant": "other"})
	if err != nil || res.Routed != 0 {
		t.Fatalf("drop: %+v %v", res, err)
	}
	if st := b.Stats(); st.Dropped != 1 {
		t.Fatalf("dropped count %d", st.Dropped)
	}

	_, err = b.Publish("orders.3", []byte("x"), map[string]string{"tenant": "evil"})
	var rej *broker.RejectError
	if !errors.As(err, &rej) || rej.Code != 7 || rej.Reason != "evil tenant" || rej.Plugin != "good" {
		t.Fatalf("reject: %v", err)
	}

	if _, err := b.Publish("reroute.me", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if d := all.Next(t); d.Msg.Topic != "rerouted.here" {
		t.Fatalf("re-routed to %s", d.Msg.Topic)
	}
	all.None(t, 20*time.Millisecond)
}

// Plugins on one hook run in order, each seeing the previous one's output.
func TestChainOrder(t *testing.T) {
	h := newHost(t)
	tag := fixture(t, "tag")
	// "second" requires the header "chain": present only if "first" ran before it.
	second := Spec{Name: "second", Wasm: tag, Config: map[string]string{"tag": "second", "require": "chain"}}
	c := load(t, h, Spec{Name: "first", Wasm: tag, Config: map[string]string{"tag": "first"}}, second)
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	s := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	if _, err := b.Publish("a", nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := s.Next(t); d.Msg.Headers.Map()["chain"] != "second" {
		t.Fatalf("headers %v: the last plugin's change must win", d.Msg.Headers)
	}
	// Alone, "second" sees no "chain" header and drops the message.
	b.SetHooks(load(t, h, second))
	if res, _ := b.Publish("a", nil, nil); res.Routed != 0 {
		t.Fatal("second plugin alone should have dropped the message")
	}
	// A plugin only sees the topics it is configured for.
	c3 := load(t, h, Spec{Name: "only-b", Wasm: tag, Topics: []string{"b.>"}, Config: map[string]string{"tag": "b"}})
	b.SetHooks(c3)
	b.Publish("a", nil, nil)
	b.Publish("b.1", nil, nil)
	if d := s.Next(t); d.Msg.Headers.Map()["chain"] != "" {
		t.Fatalf("plugin ran on a topic outside its patterns: %v", d.Msg.Headers)
	}
	if d := s.Next(t); d.Msg.Headers.Map()["chain"] != "b" {
		t.Fatalf("plugin did not run on its topic: %v", d.Msg.Headers)
	}
}

// on_ack emits after the ack; on_redeliver delays, changes headers and dead-letters.
func TestAckAndRedeliverHooks(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "good", Wasm: fixture(t, "good"), Topics: []string{"nothing"}, Groups: []string{"workers"}})
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	watch := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"audit.>", "dlq.>"}, Mode: broker.Fanout})
	m := brokertest.Subscribe(t, b, broker.SubscribeOptions{ID: "jobs", Group: "workers", Patterns: []string{"jobs.*"}, Mode: broker.Balanced})
	res, _ := b.Publish("jobs.1", []byte("job"), nil)
	id := res.SystemID
	m.Next(t)
	if skipped := m.Ack([]string{id}); skipped != 0 {
		t.Fatal("ack skipped")
	}
	if d := watch.Next(t); d.Msg.Topic != "audit.acks" || string(d.Msg.Payload) != id {
		t.Fatalf("on_ack emitted %s %q, want audit.acks %q", d.Msg.Topic, d.Msg.Payload, id)
	}

	res, _ = b.Publish("jobs.2", []byte("job"), nil)
	id = res.SystemID
	m.Next(t)
	nacked := time.Now()
	m.Nack([]string{id}, 0, "")
	d := m.Next(t) // the plugin turned an immediate nack into a 50ms delay
	if time.Since(nacked) < 50*time.Millisecond || d.Attempt != 2 || d.Msg.Headers.Map()["retried"] != "yes" {
		t.Fatalf("redelivery after %v attempt %d headers %v", time.Since(nacked), d.Attempt, d.Msg.Headers)
	}
	m.Nack([]string{id}, 0, "")
	dl := watch.Next(t)
	if dl.Msg.Topic != "dlq.jobs" || dl.Msg.Headers.Map()[deadletter.HeaderReason] != "gave up" || dl.Msg.Headers.Map()["retried"] != "yes" ||
		dl.Msg.Headers.Map()[deadletter.HeaderCode] != deadletter.CodeRejected {
		t.Fatalf("dead letter %s %v", dl.Msg.Topic, dl.Msg.Headers)
	}
	// Groups outside the plugin's list are not hooked.
	if c.WantsAck("others") || c.WantsRedeliver("others") {
		t.Fatal("hooks apply to a group not in the plugin's groups")
	}
}

// Hostile plugins: each failure discards the instance, applies the policy, and loses nothing;
// the broker keeps serving.
func TestHostilePlugins(t *testing.T) {
	h := newHost(t)
	cases := []struct {
		fixture string
		policy  FailurePolicy
		limit   time.Duration
	}{
		{"loop", FailOpen, 50 * time.Millisecond},
		{"membomb", FailOpen, 0},
		{"trap", FailOpen, 0},
		{"oob", FailOpen, 0},
		{"badverdict", FailOpen, 0},
		{"loop", FailClosed, 50 * time.Millisecond},
		{"trap", FailClosed, 0},
		{"membomb", FailDeadLetter, 0},
		{"trap", FailDeadLetter, 0},
	}
	for _, c := range cases {
		t.Run(c.fixture+"/"+c.policy.String(), func(t *testing.T) {
			chain := load(t, h, Spec{Name: "bad", Wasm: fixture(t, c.fixture), FailurePolicy: c.policy,
				CallTimeout: c.limit, MemoryLimitBytes: 1 << 20, BreakerFailures: 1000})
			b := brokertest.Start(t, brokertest.Options{Hooks: chain})
			s := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
			for i := range 3 {
				start := time.Now()
				_, err := b.Publish("orders.x", []byte{byte(i)}, nil)
				if took := time.Since(start); took > 5*time.Second {
					t.Fatalf("publish took %v", took)
				}
				switch c.policy {
				case FailOpen:
					if err != nil {
						t.Fatal(err)
					}
					if d := s.Next(t); d.Msg.Topic != "orders.x" || d.Msg.Payload[0] != byte(i) {
						t.Fatalf("fail_open delivered %s %v", d.Msg.Topic, d.Msg.Payload)
					}
				case FailClosed:
					if !errors.Is(err, broker.ErrHookFailed) {
						t.Fatalf("fail_closed: %v", err)
					}
				case FailDeadLetter:
					if err != nil {
						t.Fatal(err)
					}
					d := s.Next(t)
					h := d.Msg.Headers.Map()
					if d.Msg.Topic != "dlq.plugin.bad" || h[deadletter.HeaderTopic] != "orders.x" || !strings.Contains(h[deadletter.HeaderReason], "plugin bad failed") ||
						h[deadletter.HeaderCode] != deadletter.CodePluginError {
						t.Fatalf("dead letter %s %v", d.Msg.Topic, d.Msg.Headers)
					}
				}
			}
			st := chain.Stats()[0]
			if st.Failures != 3 || st.Calls != 3 {
				t.Fatalf("stats %+v: want 3 calls, 3 failures", st)
			}
		})
	}
}

// Huge outputs are refused with the ABI's status codes, and the message passes.
func TestHugeOutputsRefused(t *testing.T) {
	chain := load(t, newHost(t), Spec{Name: "huge", Wasm: fixture(t, "huge"), MaxEmits: 16})
	b := brokertest.Start(t, brokertest.Options{Hooks: chain})
	s := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"orders.>"}, Mode: broker.Fanout})
	spam := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"spam"}, Mode: broker.Fanout})
	if _, err := b.Publish("orders.1", []byte("ok"), nil); err != nil {
		t.Fatal(err)
	}
	if d := s.Next(t); string(d.Msg.Payload) != "ok" {
		t.Fatalf("payload %q", d.Msg.Payload)
	}
	if st := chain.Stats()[0]; st.Failures != 0 {
		t.Fatalf("the plugin trapped: the host did not return ERR_TOO_LARGE / ERR_LIMIT")
	}
	for range 16 {
		spam.Next(t)
	}
	spam.None(t, 20*time.Millisecond)
}

// After BreakerFailures failures in a row the plugin is not called until the cool-down has
// passed; the policy applies meanwhile.
func TestCircuitBreaker(t *testing.T) {
	chain := load(t, newHost(t), Spec{Name: "trap", Wasm: fixture(t, "trap"), BreakerFailures: 3, BreakerCooldown: 2 * time.Second})
	b := brokertest.Start(t, brokertest.Options{Hooks: chain})
	for range 10 {
		if _, err := b.Publish("a", nil, nil); err != nil {
			t.Fatal(err) // fail_open
		}
	}
	st := chain.Stats()[0]
	if st.Calls != 3 || st.Skipped != 7 || !st.BreakerOpen {
		t.Fatalf("stats %+v: want 3 calls, then the breaker open", st)
	}
	brokertest.Eventually(t, "the breaker to let a call through after the cool-down", func() bool {
		if chain.Stats()[0].Calls != 3 {
			return true
		}
		b.Publish("a", nil, nil)
		return false
	})
	if st := chain.Stats()[0]; st.Calls != 4 || !st.BreakerOpen {
		t.Fatalf("stats %+v: one trial call, failing, reopens the breaker", st)
	}
}

// nackOnce starts a broker with chain, a watcher of dead letters and member m of group g,
// publishes to m and nacks its first delivery.
func nackOnce(t *testing.T, chain *Chain) (b broker.Engine, watch, m *brokertest.Sub) {
	t.Helper()
	b = brokertest.Start(t, brokertest.Options{Hooks: chain})
	watch = brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"dlq.>"}, Mode: broker.Fanout})
	m = brokertest.Subscribe(t, b, broker.SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"j"}, Mode: broker.Balanced})
	res, _ := b.Publish("j", nil, nil)
	m.Next(t)
	m.Nack([]string{res.SystemID}, 0, "")
	return b, watch, m
}

// A trapping on_redeliver plugin: fail_open redelivers as usual, dead_letter dead-letters.
func TestRedeliverFailurePolicies(t *testing.T) {
	h := newHost(t)
	for _, policy := range []FailurePolicy{FailOpen, FailClosed, FailDeadLetter} {
		t.Run(policy.String(), func(t *testing.T) {
			_, watch, m := nackOnce(t, load(t, h, Spec{Name: "trap", Wasm: fixture(t, "trap"), Topics: []string{"none"}, FailurePolicy: policy}))
			if policy != FailDeadLetter { // fail_closed: treated as a nack, i.e. redelivered
				if d := m.Next(t); d.Attempt != 2 {
					t.Fatalf("attempt %d", d.Attempt)
				}
				return
			}
			if d := watch.Next(t); d.Msg.Topic != "dlq.g" || d.Msg.Headers.Map()[deadletter.HeaderCode] != deadletter.CodePluginError ||
				!strings.Contains(d.Msg.Headers.Map()[deadletter.HeaderReason], "plugin trap failed") {
				t.Fatalf("dead letter on %s with headers %v", d.Msg.Topic, d.Msg.Headers)
			}
		})
	}
}

// Swapping chains while publishing: every message passes exactly one chain, none is lost.
func TestSwapChainsUnderLoad(t *testing.T) {
	h := newHost(t)
	tag := fixture(t, "tag")
	chains := []*Chain{
		load(t, h, Spec{Name: "t", Wasm: tag, Config: map[string]string{"tag": "a"}}),
		load(t, h, Spec{Name: "t", Wasm: tag, Config: map[string]string{"tag": "b"}}),
	}
	b := brokertest.Start(t, brokertest.Options{Hooks: chains[0]})
	s := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"load"}, Mode: broker.Fanout})
	const n = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if _, err := b.Publish("load", nil, nil); err != nil {
				t.Error(err)
				return
			}
			if i%100 == 0 {
				b.SetHooks(chains[(i/100)%2])
			}
		}
	}()
	got := map[string]int{}
	for range n {
		got[s.Next(t).Msg.Headers.Map()["chain"]]++
	}
	wg.Wait()
	if got["a"]+got["b"] != n || got["a"] == 0 || got["b"] == 0 {
		t.Fatalf("tags %v: want %d messages, each through one chain", got, n)
	}
	if calls := chains[0].Stats()[0].Calls + chains[1].Stats()[0].Calls; calls != n {
		t.Fatalf("%d plugin calls for %d messages", calls, n)
	}
}

// The DROP verdict of on_redeliver forgets the message: no redelivery, no dead letter.
func TestRedeliverDrop(t *testing.T) {
	b, watch, m := nackOnce(t, load(t, newHost(t), Spec{Name: "forget", Wasm: fixture(t, "forget")}))
	m.None(t, 50*time.Millisecond)
	watch.None(t, 0)
	if g := b.Stats().Groups[0]; g.Dropped != 1 || g.InFlight != 0 || g.Queued != 0 {
		t.Fatalf("group stats %+v", g)
	}
}

// emit_topics bounds where a plugin writes: an emit or a re-route to another topic fails
// (ERR_NOT_ALLOWED) and the message goes on unchanged; within it, both work.
func TestEmitTopics(t *testing.T) {
	h := newHost(t)
	c := load(t, h, Spec{Name: "good", Wasm: fixture(t, "good"), Config: map[string]string{"to": "rerouted.here"},
		EmitTopics: []string{"orders.>"}})
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	all := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	if _, err := b.Publish("orders.1", []byte("x"), map[string]string{"tenant": "acme"}); err != nil {
		t.Fatal(err)
	}
	if d := all.Next(t); d.Msg.Topic != "orders.1" {
		t.Fatalf("got %s, want orders.1", d.Msg.Topic)
	}
	if _, err := b.Publish("reroute.me", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if d := all.Next(t); d.Msg.Topic != "reroute.me" {
		t.Fatalf("re-routed to %s outside emit_topics", d.Msg.Topic)
	}
	all.None(t, 20*time.Millisecond) // no audit.copy
	b.SetHooks(load(t, h, Spec{Name: "good", Wasm: fixture(t, "good"), Config: map[string]string{"to": "rerouted.here"},
		EmitTopics: []string{"audit.*", "rerouted.>"}}))
	b.Publish("orders.2", []byte("x"), map[string]string{"tenant": "acme"})
	b.Publish("reroute.me", []byte("x"), nil)
	for _, want := range []string{"orders.2", "audit.copy", "rerouted.here"} {
		if d := all.Next(t); d.Msg.Topic != want {
			t.Fatalf("got %s, want %s", d.Msg.Topic, want)
		}
	}
	if _, err := h.Load(context.Background(), []Spec{{Name: "p", Wasm: fixture(t, "good"), EmitTopics: []string{"a.>.b"}}}); err == nil || !strings.Contains(err.Error(), "emit_topics") {
		t.Fatalf("a bad emit_topics pattern: %v", err)
	}
}
