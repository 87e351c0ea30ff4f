package memory

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// publishDelayed publishes payload to "j.x" as d (its topic and payload set here) and
// returns its result and error.
func (gt *groupTest) publishDelayed(payload string, d broker.Draft) (broker.PublishResult, error) {
	gt.t.Helper()
	d.Topic, d.Payload = "j.x", []byte(payload)
	res, errs := make([]broker.PublishResult, 1), make([]error, 1)
	gt.b.PublishBatch([]broker.Draft{d}, res, errs)
	return res[0], errs[0]
}

func (gt *groupTest) mustDelay(payload string, after time.Duration) broker.PublishResult {
	gt.t.Helper()
	res, err := gt.publishDelayed(payload, broker.Draft{DeliverAfter: after})
	if err != nil {
		gt.t.Fatal(err)
	}
	return res
}

// A delayed message is published at its time: nothing gets it before, and then every
// fanout subscription and group subscribed at that moment does, under the system_id its
// publish answered with; a subscription that came or went meanwhile counts as it is then.
func TestDelayedPublishAtItsTime(t *testing.T) {
	gt := newGroupTest(t, Options{})
	early := gt.fanout("j.>")
	gone := gt.fanout("j.>")
	a := gt.member("g", 10)
	res := gt.mustDelay("later", 5*time.Second)
	if res.SystemID == "" || res.Routed != 0 {
		t.Fatalf("publish answered %+v, want a system_id and routed 0", res)
	}
	if st := gt.b.Stats(); st.Delayed != 1 || st.DelayedBytes == 0 || st.DelayedBytes != gt.b.MemoryUsed() {
		t.Fatalf("stats: %d delayed of %d bytes, memory used %d; want 1, charged to the budget", st.Delayed, st.DelayedBytes, gt.b.MemoryUsed())
	}
	gt.clock.Advance(5*time.Second - time.Nanosecond)
	want(t, "group before its time", got(a))
	want(t, "fanout before its time", got(early))
	late := gt.fanout("j.>")
	gone.Close()
	gt.clock.Advance(time.Nanosecond)
	for name, s := range map[string]*Subscription{"group": a, "fanout subscribed before": early, "fanout subscribed meanwhile": late} {
		ds := next(s)
		if len(ds) != 1 || string(ds[0].Msg.Payload) != "later" || ds[0].Msg.SystemID != res.SystemID {
			t.Fatalf("%s got %d deliveries, want the delayed message as %s", name, len(ds), res.SystemID)
		}
	}
	a.Ack([]string{res.SystemID})
	gt.settled("g")
	if st := gt.b.Stats(); st.Delayed != 0 || st.DelayedBytes != 0 {
		t.Fatalf("stats once delivered: %d delayed of %d bytes, want none", st.Delayed, st.DelayedBytes)
	}
	if used := gt.b.MemoryUsed(); used != 0 {
		t.Fatalf("memory budget used %d once delivered, want 0", used)
	}
}

// Delayed messages come out in due order, those due at once in publish order; deliver_at
// in the past publishes at once, in the future at its time; a ttl counts from the delayed
// message's publish, at its time.
func TestDelayedOrderAndDeliverAt(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 10)
	gt.mustDelay("3s", 3*time.Second)
	gt.mustDelay("1s-a", time.Second)
	gt.mustDelay("1s-b", time.Second)
	if _, err := gt.publishDelayed("ttl", broker.Draft{DeliverAfter: 2 * time.Second, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	res, err := gt.publishDelayed("past", broker.Draft{DeliverAt: time.Now().Add(-time.Hour).UnixNano()})
	if err != nil || res.Routed != 1 {
		t.Fatalf("deliver_at in the past: %+v, %v; want routed to the group at once", res, err)
	}
	if _, err := gt.publishDelayed("at", broker.Draft{DeliverAt: time.Now().Add(10 * time.Second).UnixNano()}); err != nil {
		t.Fatal(err)
	}
	want(t, "at once", got(a), "past/1")
	gt.clock.Advance(time.Second)
	want(t, "after 1s", got(a), "1s-a/1", "1s-b/1")
	gt.clock.Advance(time.Second)
	want(t, "after 2s", got(a), "ttl/1")
	gt.clock.Advance(time.Second)
	want(t, "after 3s", got(a), "3s/1")
	gt.clock.Advance(6 * time.Second)
	want(t, "after 9s", got(a))
	gt.clock.Advance(time.Second)
	want(t, "after 10s", got(a), "at/1")
}

// The bounds refuse with their status and a message naming the setting: a delay past
// max_delay or an invalid one (ErrInvalidMessage), more than max_delayed messages or
// max_delayed_bytes held (ErrLimit), until some fall due.
func TestDelayedBounds(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{MaxDelay: time.Hour, MaxDelayed: 2}})
	for _, c := range []struct {
		name string
		d    broker.Draft
		err  error
		says string
	}{
		{"past max_delay", broker.Draft{DeliverAfter: time.Hour + time.Second}, broker.ErrInvalidMessage, "limits { max_delay }"},
		{"deliver_at past max_delay", broker.Draft{DeliverAt: time.Now().Add(2 * time.Hour).UnixNano()}, broker.ErrInvalidMessage, "deliver_at is 2h0m0s away"},
		{"negative", broker.Draft{DeliverAfter: -1}, broker.ErrInvalidMessage, "deliver_after must be a valid duration"},
		{"both", broker.Draft{DeliverAfter: time.Second, DeliverAt: -2}, broker.ErrInvalidMessage, "both set"},
		{"bad deliver_at", broker.Draft{DeliverAt: -1}, broker.ErrInvalidMessage, "not a valid timestamp"},
	} {
		if _, err := gt.publishDelayed("x", c.d); !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.err, c.says)
		}
	}
	gt.mustDelay("1", time.Second)
	gt.mustDelay("2", time.Hour)
	if _, err := gt.publishDelayed("3", broker.Draft{DeliverAfter: time.Second}); !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), "limits { max_delayed }") {
		t.Fatalf("a third delayed message: %v; want ErrLimit naming max_delayed", err)
	}
	gt.clock.Advance(time.Second) // the first falls due: room for one more
	gt.mustDelay("3", time.Second)

	// A group full when it falls due refuses it for itself: counted.
	gt = newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: 1}})
	gt.member("g", 1).Close()
	gt.publish("fills it")
	gt.mustDelay("refused", time.Second)
	gt.clock.Advance(time.Second)
	if st := gt.b.Stats(); st.DelayedRefused != 1 || st.Delayed != 0 {
		t.Fatalf("stats: %d delayed, %d refused when due; want 0 and 1", st.Delayed, st.DelayedRefused)
	}

	gt = newGroupTest(t, Options{Limits: broker.Limits{MaxDelayedBytes: 2000}})
	gt.mustDelay(strings.Repeat("x", 1000), time.Second)
	if _, err := gt.publishDelayed(strings.Repeat("x", 1000), broker.Draft{DeliverAfter: time.Second}); !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), "max_delayed_bytes") {
		t.Fatalf("past max_delayed_bytes: %v; want ErrLimit naming it", err)
	}
}

// Plugins run when a delayed message is published, so their verdict is the publisher's
// answer at once; and a shutdown lets go of what is held.
func TestDelayedPluginsAtPublish(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 10)
	seen := 0
	gt.b.SetHooks(&publishHooks{publish: func(d *broker.Draft) (broker.PublishVerdict, error) {
		seen++
		if string(d.Payload) == "refuse" {
			return broker.PublishVerdict{}, &broker.RejectError{Code: 7, Plugin: "p", Reason: "no"}
		}
		d.Payload = []byte("changed")
		return broker.PublishVerdict{}, nil
	}})
	var rej *broker.RejectError
	if _, err := gt.publishDelayed("refuse", broker.Draft{DeliverAfter: time.Second}); !errors.As(err, &rej) {
		t.Fatalf("a plugin's refusal: %v; want it at publish", err)
	}
	gt.mustDelay("kept", time.Second)
	if seen != 2 {
		t.Fatalf("OnPublish ran %d times at publish, want 2", seen)
	}
	gt.clock.Advance(time.Second)
	d := next(a)
	want(t, "when due", []string{string(d[0].Msg.Payload)}, "changed")
	a.Ack(ids(d))
	if seen != 2 {
		t.Fatalf("OnPublish ran again when due (%d calls)", seen)
	}
	gt.mustDelay("lost", time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := gt.b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if used := gt.b.MemoryUsed(); used != 0 {
		t.Fatalf("memory budget used %d after shutdown, want 0", used)
	}
}

// publishHooks is a broker.Hooks whose OnPublish is publish.
type publishHooks struct {
	testHooks
	publish func(*broker.Draft) (broker.PublishVerdict, error)
}

func (h *publishHooks) OnPublish(d *broker.Draft) (broker.PublishVerdict, error) { return h.publish(d) }
func (h *publishHooks) OnPublishBatch(ds []broker.Draft, vs []broker.PublishVerdict, errs []error) {
	for i := range ds {
		vs[i], errs[i] = h.publish(&ds[i])
	}
}

// What 100,000 delayed messages cost: the live heap they take, per message, against what the
// budget is charged (BENCHMARKS.md, "Delayed messages (issue 28)"):
//
//	go test -run TestDelayedCost -v ./broker/memory/
func TestDelayedCost(t *testing.T) {
	const n = 100_000
	for _, size := range []int{0, 100, 1024} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			gt := newGroupTest(t, Options{MaxMemoryBytes: 4 << 30})
			frame := make([]broker.Draft, 1)
			res, errs := make([]broker.PublishResult, 1), make([]error, 1)
			before := liveHeap()
			payloads := make([][]byte, n) // as the server's decoder copies them
			for i := range payloads {
				payloads[i] = make([]byte, size)
			}
			start := time.Now()
			for i := range n {
				frame[0] = broker.Draft{Topic: "j.x", Payload: payloads[i], DeliverAfter: time.Duration(n-i) * time.Millisecond}
				gt.b.PublishBatch(frame, res, errs)
				if errs[0] != nil {
					t.Fatal(errs[0])
				}
			}
			took := time.Since(start) / n
			payloads = nil
			real := int64(liveHeap() - before)
			counted := gt.b.MemoryUsed()
			t.Logf("%d delayed messages of %d bytes: %d bytes of heap each, charged %d (%.2f); %v a publish", n, size, real/n, counted/n, float64(counted)/float64(real), took)
			if counted < real*9/10 {
				t.Fatalf("charged %d bytes for delayed messages that take %d: under-counted", counted, real)
			}
			if counted > real*3 {
				t.Fatalf("charged %d bytes for delayed messages that take %d: over-counted more than 3x", counted, real)
			}
			runtime.KeepAlive(payloads)
		})
	}
}
