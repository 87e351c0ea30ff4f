package plugins

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// emitted collects what a chain's ticks publish, as an engine's emit would.
type emitted struct {
	mu sync.Mutex
	ds []broker.Draft
}

func (e *emitted) emit(ds []broker.Draft) {
	e.mu.Lock()
	e.ds = append(e.ds, ds...)
	e.mu.Unlock()
}

func (e *emitted) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ds)
}

// waitUntil polls cond until it holds, failing after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func tickSpec(mode string, every time.Duration) Spec {
	return Spec{Name: "ticker", Config: map[string]string{"mode": mode, "topic": "ticked"}, TickInterval: every}
}

func statsOf(c *Chain) PluginStats { return c.Stats()[0] }

// Ticks run at the interval once the chain is started, publish what they emit, and stop when
// the chain is closed: no tick after Close returns, and no goroutine left (goleak, TestMain).
func TestTicksRunAndStopOnClose(t *testing.T) {
	h := newHost(t)
	s := tickSpec("emit", 20*time.Millisecond)
	s.Wasm = fixture(t, "tick")
	c, err := h.Load(context.Background(), []Spec{s})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if n := statsOf(c).Calls; n != 0 {
		t.Fatalf("%d ticks before the chain was started; want none", n)
	}
	var e emitted
	start := time.Now()
	c.Start(e.emit)
	waitUntil(t, "3 ticks", func() bool { return e.count() >= 3 })
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("3 ticks of 20 ms in %v", took)
	}
	for _, d := range e.ds[:3] {
		if d.Topic != "ticked" || len(d.Payload) != 0 {
			t.Errorf("emitted %s %q, want ticked and an empty payload", d.Topic, d.Payload)
		}
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := e.count()
	time.Sleep(100 * time.Millisecond)
	if m := e.count(); m != n {
		t.Errorf("%d ticks emitted after Close", m-n)
	}
	c.Start(e.emit) // after Close: nothing starts again
	time.Sleep(60 * time.Millisecond)
	if m := e.count(); m != n {
		t.Errorf("%d ticks emitted after Start on a closed chain", m-n)
	}
}

// A tick that runs past the next one's time makes that one skipped and counted, not run late:
// a 35 ms tick every 10 ms runs about every 40 ms.
func TestTickSlowIsSkipped(t *testing.T) {
	h := newHost(t)
	s := tickSpec("slow", 10*time.Millisecond)
	s.Wasm = fixture(t, "tick")
	c := load(t, h, s)
	start := time.Now()
	c.Start(func([]broker.Draft) {})
	waitUntil(t, "4 slow ticks", func() bool { return statsOf(c).Calls >= 4 })
	st, took := statsOf(c), time.Since(start)
	if st.TicksSkipped < 2*st.Calls-2 {
		t.Errorf("%d ticks of 35 ms every 10 ms skipped %d; want at least 3 a tick, but the last", st.Calls, st.TicksSkipped)
	}
	if maxCalls := uint64(took/(35*time.Millisecond)) + 1; st.Calls > maxCalls {
		t.Errorf("%d ticks of 35 ms in %v: queued ticks ran late", st.Calls, took)
	}
	if st.Failures != 0 {
		t.Errorf("%d failures", st.Failures)
	}
}

// A trapping tick is counted as a failure, and enough of them open the breaker, which then
// skips the ticks.
func TestTickTrapOpensBreaker(t *testing.T) {
	h := newHost(t)
	s := tickSpec("trap", 10*time.Millisecond)
	s.Wasm = fixture(t, "tick")
	s.BreakerFailures = 3
	c := load(t, h, s)
	c.Start(func([]broker.Draft) {})
	waitUntil(t, "the breaker to open and skip a tick", func() bool {
		st := statsOf(c)
		return st.BreakerOpen && st.Skipped > 0
	})
	if st := statsOf(c); st.Failures != 3 {
		t.Errorf("%d failures, want 3: the breaker opens on the third", st.Failures)
	}
}

// Without tick_interval a module's on_tick is left alone: loaded, never called.
func TestTickOffByDefault(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "p", Wasm: fixture(t, "tick"), Config: map[string]string{"mode": "emit"}})
	var e emitted
	c.Start(e.emit)
	time.Sleep(50 * time.Millisecond)
	if n := e.count(); n != 0 {
		t.Errorf("%d ticks without tick_interval", n)
	}
	for _, hm := range c.Metrics()[0].Hooks {
		if hm.Hook == HookTick {
			t.Errorf("on_tick is among the plugin's hooks without tick_interval")
		}
	}
}

// Through the memory engine: installing the chain starts its ticks, whose emits are routed to
// subscribers.
func TestTickEmitsThroughEngine(t *testing.T) {
	h := newHost(t)
	s := tickSpec("emit", 10*time.Millisecond)
	s.Wasm = fixture(t, "tick")
	c := load(t, h, s)
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	sub := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"ticked"}, Mode: broker.Fanout})
	for range 3 {
		if d := sub.Next(t); d.Msg.Topic != "ticked" {
			t.Fatalf("delivered %s, want ticked", d.Msg.Topic)
		}
	}
}

// tick_interval and the hooks list agree with the module, or the load says why.
func TestTickSpecRefused(t *testing.T) {
	h := newHost(t)
	wasm := fixture(t, "tick")
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"under the minimum", Spec{Name: "p", Wasm: wasm, TickInterval: 5 * time.Millisecond}, "tick_interval 5ms is under its minimum of 10ms"},
		{"listed without an interval", Spec{Name: "p", Wasm: wasm, Hooks: []string{HookTick}}, "hooks lists on_tick but tick_interval is not set"},
		{"interval, hook left out", Spec{Name: "p", Wasm: wasm, Hooks: []string{HookPublish}, TickInterval: time.Second}, "tick_interval is set but hooks leaves out on_tick"},
		{"interval, no export", Spec{Name: "p", Wasm: fixture(t, "kvcount"), TickInterval: time.Second}, "tick_interval is set but the module does not export tb_v1_on_tick"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := h.Load(context.Background(), []Spec{tc.spec})
			if err == nil {
				c.Close(context.Background())
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q", err, tc.want)
			}
		})
	}
}
