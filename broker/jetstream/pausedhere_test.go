package jetstream

import (
	"math"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// A group paused on this node (as the dead-letter breaker pauses it, at once, before
// JetStream's pause lands) hands out nothing that a pull request made before brings: it goes
// back to JetStream, counted as queued, and when the group resumes it comes as attempt 1,
// not dead past max_deliveries (1) for the deliveries no member saw.
func TestPausedHereHandsBackUnseen(t *testing.T) {
	e := newEngine(t, Options{})
	st := e.NewStream(func(*broker.Message) int { return 1 })
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{ID: "g", Group: "g", Mode: broker.Balanced, Patterns: []string{"j"}, MaxInFlight: 3, MaxDeliveries: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	g := e.groups["g"]
	e.mu.Unlock()
	eventually(t, "the member's pull request reaches JetStream", func() bool {
		ctx, cancel := e.ctx()
		defer cancel()
		c, err := e.js.Consumer(ctx, e.opts.Stream, g.consumer)
		return err == nil && c.CachedInfo().NumWaiting == 1
	})

	g.mu.Lock()
	g.paused = true // the breaker's trip here; JetStream's consumer is not paused
	g.mu.Unlock()
	if _, err := e.Publish("j", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the open request's delivery handed back", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.unseen) == 1
	})
	next := func() (broker.Delivery, bool) {
		for _, d := range st.Next(nil, 1, math.MaxInt) {
			if d.Msg != nil {
				return d, true
			}
		}
		return broker.Delivery{}, false
	}
	if d, ok := next(); ok {
		t.Fatalf("%q delivered while the group is paused here", d.Msg.Payload)
	}
	if gi, err := e.Group("g"); err != nil || gi.Queued != 1 || gi.InFlight != 0 || gi.DeadLettered != 0 {
		t.Fatalf("paused here: %+v, %v; want 1 queued, none in flight or dead", gi.GroupStats, err)
	}

	if err := e.PauseGroup("g", false); err != nil {
		t.Fatal(err)
	}
	var d broker.Delivery
	eventually(t, "the message delivered after the resume", func() (ok bool) { d, ok = next(); return ok })
	if d.Attempt != 1 {
		t.Fatalf("delivered as attempt %d after the resume, want 1", d.Attempt)
	}
	if gi, err := e.Group("g"); err != nil || gi.DeadLettered != 0 || gi.InFlight != 1 {
		t.Fatalf("after the resume: %+v, %v; want 1 in flight, none dead", gi.GroupStats, err)
	}
	if n := sub.Ack([]string{d.Msg.SystemID}); n != 0 {
		t.Fatalf("ack of the message: %d unknown", n)
	}
}
