package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// TestTouchKeepsTheMessage: a handler working three ack deadlines, touching its message every
// third of one, keeps it: delivered once, acked once, never redelivered; after the ack a touch
// answers ErrAlreadySettled. Without the touches the broker would redeliver it at the first
// deadline.
func TestTouchKeepsTheMessage(t *testing.T) {
	const deadline = 300 * time.Millisecond
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var got recorder[int]
	var kept recorder[*client.Message]
	subscribe(t, c, client.SubscribeOptions{Group: "long", Mode: client.Balanced, Patterns: []string{"long.*"}, AckDeadline: deadline},
		func(ctx context.Context, m *client.Message) error {
			got.add(m.Attempt)
			kept.add(m)
			end := time.Now().Add(3 * deadline)
			for time.Now().Before(end) {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(deadline / 3):
				}
				if err := m.Touch(); err != nil {
					return err
				}
			}
			return nil
		})
	if _, err := c.Publish(context.Background(), "long.1", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the message to be acked", func() bool { return ts.Group("long").Acked == 1 })
	if g := ts.Group("long"); g.Redelivered != 0 || g.InFlight != 0 {
		t.Errorf("group stats %+v, want no redelivery and nothing in flight", g)
	}
	if a := got.all(); len(a) != 1 || a[0] != 1 {
		t.Errorf("attempts %v, want one delivery, attempt 1", a)
	}
	brokertest.Eventually(t, "the auto-ack to settle the message", func() bool {
		return errors.Is(kept.all()[0].Touch(), client.ErrAlreadySettled)
	})
}
