package conformance

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
)

// tickRow is SPEC.md's row tick: the plugin loaded again with tick_topic in its config and
// tick_interval 20ms emits tick to that topic on every tick, and nothing once its chain is
// closed.
func tickRow(t *testing.T, e *env) {
	cfg := maps.Clone(pluginConfig)
	cfg["tick_topic"] = "c.ticked"
	s := spec(e.wasm, cfg)
	s.TickInterval = 20 * time.Millisecond
	c, err := e.host.Load(context.Background(), []plugins.Spec{s})
	if err != nil {
		t.Fatalf("load with tick_interval: %v\n%s", err, e.log)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close(context.Background())
		}
	})
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	sub := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	for range 3 {
		expect(t, sub.Next(t), "c.ticked", "tick", nil)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed = true
	for { // what was emitted before Close returned
		if _, ok := sub.Poll(); !ok {
			break
		}
	}
	time.Sleep(100 * time.Millisecond) // five tick intervals
	nothing(t, sub, "after the chain was closed")
	if st := c.Stats()[0]; st.Failures != 0 {
		t.Errorf("%d failed calls", st.Failures)
	}
}
