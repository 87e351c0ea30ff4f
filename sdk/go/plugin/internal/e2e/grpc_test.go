package e2e_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/wasmbuild"
)

// received collects the messages a subscription's handler got, with when it got them.
type received struct {
	mu   sync.Mutex
	msgs []*client.Message
	at   []time.Time
}

func (r *received) add(m *client.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	r.at = append(r.at, time.Now())
}

// waitFor waits for a message match accepts, and returns it with when it
// arrived.
func (r *received) waitFor(t *testing.T, what string, match func(*client.Message) bool) (*client.Message, time.Time) {
	t.Helper()
	var m *client.Message
	var at time.Time
	brokertest.Eventually(t, what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		i := slices.IndexFunc(r.msgs, match)
		if i >= 0 {
			m, at = r.msgs[i], r.at[i]
		}
		return i >= 0
	})
	return m, at
}

// The five example plugins, configured by examples/config/plugins.hcl, in a broker served
// over gRPC, seen through the Go client.
func TestGRPCWithExamplePlugins(t *testing.T) {
	root, err := wasmbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(root, "examples", "config", "plugins.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	specs := cfg.Plugins
	for i := range specs {
		// The modules built from source, not the committed examples/plugins/bin/.
		if specs[i].Wasm = wasm(t, specs[i].Name); specs[i].Wasm == nil {
			t.Fatalf("plugins.hcl declares %q, which is not among the plugins built (pluginPkgs)", specs[i].Name)
		}
		// No call time limit (tenant-filter has 100ms). Under the race detector, on a loaded
		// machine, a call can be descheduled that long and fail the publish; and wazero
		// compiles a module differently for a runtime that enforces limits, so the module
		// would miss the cache precompile filled, and take seconds to compile again.
		specs[i].CallTimeout = 0
	}
	chain, logs, err := load(t, specs...)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { // after the broker stops: cleanups run last registered first
		if t.Failed() {
			t.Logf("plugin log:\n%s", logs)
		}
	})
	// Stops before the chain is closed.
	sb := servertest.Start(t, servertest.Options{Options: brokertest.Options{Hooks: chain}})
	c, err := client.Dial(sb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // with its subscriptions
	ctx := context.Background()

	var fan, group received
	if _, err := c.Subscribe(ctx, client.SubscribeOptions{Patterns: []string{"orders.>", "audit.acks", "payments.>"}},
		func(_ context.Context, m *client.Message) error { fan.add(m); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, client.SubscribeOptions{ID: "priority", Group: "fulfilment", Mode: client.Balanced,
		Patterns: []string{"orders.priority.*"}}, func(_ context.Context, m *client.Message) error {
		group.add(m)
		if string(m.Payload) == "nack me" && m.Attempt == 1 {
			return errors.New("not yet") // a nack, with no delay of its own
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	publish := func(topic, payload string, headers map[string]string) client.PublishResult {
		t.Helper()
		res, err := c.Publish(ctx, topic, []byte(payload), headers)
		if err != nil {
			t.Fatalf("publish to %s: %v", topic, err)
		}
		return res
	}
	audited := func(id, attempt string) {
		t.Helper()
		rec, _ := fan.waitFor(t, "audit record of "+id+" attempt "+attempt, func(m *client.Message) bool {
			return m.Topic == "audit.acks" && m.Headers.Get("audit-id") == id && m.Headers.Get("audit-attempt") == attempt
		})
		if h := rec.Headers.Map(); h["audit-group"] != "fulfilment" || h["audit-subscription"] != "priority" || h["audit-topic"] == "" {
			t.Errorf("audit record headers %v", h)
		}
	}

	// tenant-filter drops tenant evil; content-router sends acme's urgent order to
	// orders.priority.7, where the group member gets it and acks it, and audit records the ack.
	if res := publish("orders.7", "order 7 from evil", map[string]string{"tenant": "evil", "priority": "high"}); res.Routed != 0 {
		t.Errorf("tenant evil: routed to %d, want 0 (dropped)", res.Routed)
	}
	order := publish("orders.7", "order 7", map[string]string{"tenant": "acme", "priority": "high"})
	if order.Routed != 2 {
		t.Errorf("tenant acme: routed to %d, want 2 (the fanout subscriber and the group)", order.Routed)
	}
	first, _ := fan.waitFor(t, "order 7 at the fanout subscriber", func(m *client.Message) bool { return m.Topic != "audit.acks" })
	if first.Topic != "orders.priority.7" || string(first.Payload) != "order 7" || first.SystemID != order.SystemID {
		// The fanout subscription gets messages in order: evil's would have come first.
		t.Errorf("fanout subscriber's first message: %s %q, want order 7 on orders.priority.7", first.Topic, first.Payload)
	}
	m, _ := group.waitFor(t, "order 7 at the group member", func(m *client.Message) bool { return m.SystemID == order.SystemID })
	if m.Topic != "orders.priority.7" || m.Attempt != 1 || m.Headers.Get("tenant") != "acme" {
		t.Errorf("group member got %s attempt %d headers %v", m.Topic, m.Attempt, m.Headers)
	}
	audited(order.SystemID, "1")
	if st := sb.Engine.Stats(); st.Dropped != 1 {
		t.Errorf("broker dropped %d messages, want 1", st.Dropped)
	}

	// redact blanks the card number.
	pay := publish("payments.card", `{"card_number":"4111","amount":3}`, nil)
	m, _ = fan.waitFor(t, "the payment", func(m *client.Message) bool { return m.SystemID == pay.SystemID })
	if want := `{"card_number":"[REDACTED]","amount":3}`; string(m.Payload) != want {
		t.Errorf("payment delivered as %s, want %s", m.Payload, want)
	}

	// retry-backoff redelivers a nacked message after base (100ms), as attempt 2.
	retry := publish("orders.8", "nack me", map[string]string{"tenant": "globex", "priority": "high"})
	_, nacked := group.waitFor(t, "attempt 1 of the nacked order", func(m *client.Message) bool {
		return m.SystemID == retry.SystemID && m.Attempt == 1
	})
	m, again := group.waitFor(t, "attempt 2 of the nacked order", func(m *client.Message) bool {
		return m.SystemID == retry.SystemID && m.Attempt == 2
	})
	if d := again.Sub(nacked); d < 100*time.Millisecond || !m.Redelivered {
		t.Errorf("redelivered %v after attempt 1 (redelivered flag %v), want at least retry-backoff's base, 100ms", d, m.Redelivered)
	}
	audited(retry.SystemID, "2")
}
