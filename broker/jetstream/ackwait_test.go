package jetstream

import (
	"math"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// Members joining one after another, each with an ack deadline a second longer, raise the
// group's consumer's AckWait in doublings: 4 distinct values for 60 members (it was updated
// for each, a JetStream call under Engine.mu; unbounded deadlines made that a way to stall
// the node). It always covers the member's deadline and the pad.
func TestAckWaitRaisedInDoublings(t *testing.T) {
	for need, want := range map[time.Duration]time.Duration{
		time.Second: 5 * time.Second, 5 * time.Second: 5 * time.Second, 6 * time.Second: 10 * time.Second,
		41 * time.Second: 80 * time.Second, 12*time.Hour + ackWaitPad: 81920 * time.Second,
		math.MaxInt64: math.MaxInt64, // past the last doubling that fits: need itself
	} {
		if got := ackWaitFor(need); got != want {
			t.Errorf("ackWaitFor(%v) = %v, want %v", need, got, want)
		}
	}

	e := newEngine(t, Options{})
	seen := map[time.Duration]bool{}
	for i := range 60 {
		d := 31*time.Second + time.Duration(i)*time.Second
		st := e.NewStream(nil)
		if _, err := st.Subscribe(broker.SubscribeOptions{ID: "g", Mode: broker.Balanced, Group: "g", Patterns: []string{"a"}, MaxInFlight: 1, AckDeadline: d}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := e.ctx()
		c, err := e.js.Consumer(ctx, e.opts.Stream, encodeName("g"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		aw := c.CachedInfo().Config.AckWait
		if aw < d+ackWaitPad {
			t.Fatalf("a member with ack deadline %v: the consumer's AckWait is %v, want at least %v", d, aw, d+ackWaitPad)
		}
		seen[aw] = true
		st.Close()
	}
	if len(seen) > 4 {
		t.Fatalf("the consumer's AckWait took %d values for 60 members, want 4 (36s, 40s, 80s, 160s)", len(seen))
	}
}
