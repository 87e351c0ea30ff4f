package jetstream_test

import (
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/broker/msgid"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// Issue 25: a publisher whose confirmation was lost retries on another node. Each node's
// table of message ids knows only its own publishes, so the retry reaches JetStream, whose
// deduplication (the id, hashed, as Nats-Msg-Id) answers with the first's sequence: the
// retry is answered with the first publish's system_id and duplicate set, and neither the
// consumer group nor a fanout subscriber gets it twice.
func TestMessageIDRetriedOnAnotherNode(t *testing.T) {
	nodes := startCluster(t, 3, 1)
	a, b := nodes[0], nodes[1]
	if err := a.Declare(broker.GroupConfig{Name: "orders", Patterns: []string{"orders.*"}}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "node b to know the group", func() bool {
		_, err := b.Group("orders")
		return err == nil
	})
	group := a.NewStream(nil)
	defer group.Close()
	if _, err := group.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "orders", Patterns: []string{"orders.*"}, MaxInFlight: 10}); err != nil {
		t.Fatal(err)
	}
	fan := b.NewStream(nil)
	defer fan.Close()
	if _, err := fan.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"orders.*", "warm"}}); err != nil {
		t.Fatal(err)
	}
	key := msgid.Key("alice", "order-7")
	publish := func(e *jetstream.Engine, d broker.Draft) broker.PublishResult {
		t.Helper()
		res, errs := make([]broker.PublishResult, 1), make([]error, 1)
		e.PublishBatch([]broker.Draft{d}, res, errs)
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		return res[0]
	}
	brokertest.Eventually(t, "node a to see node b's fanout subscription", func() bool {
		publish(a, broker.Draft{Topic: "warm"})
		for _, d := range fan.Next(nil, 100, 1<<20) {
			if d.Msg != nil { // not the subscription's opened event
				return true
			}
		}
		return false
	})
	first := publish(a, broker.Draft{Topic: "orders.new", Payload: []byte("once"), ID: key})
	retry := publish(b, broker.Draft{Topic: "orders.new", Payload: []byte("once"), ID: key})
	if first.Duplicate || !retry.Duplicate || retry.SystemID != first.SystemID {
		t.Fatalf("first %+v, retry on the other node %+v; want the retry a duplicate with the first's system_id", first, retry)
	}
	other := publish(b, broker.Draft{Topic: "orders.new", Payload: []byte("other"), ID: msgid.Key("bob", "order-7")})
	if other.Duplicate {
		t.Fatalf("bob's order-7 taken for alice's: %+v", other)
	}
	publish(a, broker.Draft{Topic: "orders.new", Payload: []byte("marker-a")})
	publish(b, broker.Draft{Topic: "orders.new", Payload: []byte("marker-b")})
	// The group gets them as stored, in publish order.
	for _, want := range []string{"once", "other", "marker-a", "marker-b"} {
		if d := receive(t, group); string(d.Msg.Payload) != want {
			t.Fatalf("group: got %q, want %q: the retry was delivered again", d.Msg.Payload, want)
		}
	}
	// Fanout keeps order per node only (README, "Ordering in a cluster"): once both nodes'
	// markers are in, all that each node sent before them is; each message came once.
	got := map[string]int{}
	for got["marker-a"] == 0 || got["marker-b"] == 0 {
		if d := receive(t, fan); d.Msg.Topic != "warm" {
			got[string(d.Msg.Payload)]++
		}
	}
	if len(got) != 4 || got["once"] != 1 || got["other"] != 1 || got["marker-a"] != 1 || got["marker-b"] != 1 {
		t.Fatalf("fanout got %v, want once, other and the two markers, each once: the retry was delivered again", got)
	}
}
