package jetstream_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
)

// Every node of a cluster ticks the plugins it loaded (docs/ABI.md, "tb_v1_on_tick"): each
// node's chain emits, through its own engine, to a topic of its own, and a subscriber on
// one node receives both nodes' ticks.
func TestTicksRunOnEveryNode(t *testing.T) {
	nodes := startCluster(t, 2, 1)
	wasm, err := os.ReadFile("../../plugins/testdata/tick.wasm")
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range nodes {
		h, err := plugins.NewHost(plugins.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		c, err := h.Load(context.Background(), []plugins.Spec{{Name: "ticker", Wasm: wasm, TickInterval: 20 * time.Millisecond,
			Config: map[string]string{"mode": "emit", "topic": "ticked.n" + string(rune('1'+i))}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) }) // before the engines stop: cleanups run last first
		e.SetHooks(c)
	}
	fan := nodes[0].NewStream(nil)
	defer fan.Close()
	if _, err := fan.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"ticked.>"}}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	brokertest.Eventually(t, "ticks of both nodes", func() bool {
		for _, d := range fan.Next(nil, 100, 1<<20) {
			if d.Msg != nil {
				seen[d.Msg.Topic]++
			}
		}
		return seen["ticked.n1"] >= 3 && seen["ticked.n2"] >= 3
	})
}
