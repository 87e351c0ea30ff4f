package memory

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

// publishTTL publishes payload to "j.x" with ttl (and key, if not "").
func (gt *groupTest) publishTTL(payload string, ttl time.Duration, key string) {
	gt.t.Helper()
	d := []broker.Draft{{Topic: "j.x", Payload: []byte(payload), TTL: ttl, Key: key}}
	res, errs := make([]broker.PublishResult, 1), make([]error, 1)
	gt.b.PublishBatch(d, res, errs)
	if errs[0] != nil {
		gt.t.Fatal(errs[0])
	}
}

// deadReasons returns the reasons and codes of the dead letters s got, each as
// "payload:reason/code".
func deadReasons(s *Subscription) []string {
	var out []string
	for _, d := range next(s) {
		h := d.Msg.Headers.Map()
		out = append(out, string(d.Msg.Payload)+":"+h[deadletter.HeaderReason]+"/"+h[deadletter.HeaderCode])
	}
	return out
}

// A message past its ttl is never delivered: queued, it goes to the dead-letter topic with
// reason "expired" when its time comes, members or not; held by a member, it may still be
// acked, but a nack or a passed deadline dead-letters it instead of redelivering it; delayed,
// it goes at its time.
func TestTTLExpires(t *testing.T) {
	gt := newGroupTest(t, Options{})
	dlq := gt.fanout("dlq.g")
	a := gt.member("g", 1)
	a.Close() // the group exists, without members
	gt.publishTTL("queued", time.Second, "")
	gt.publishTTL("forever", 0, "")
	gt.clock.Advance(1500 * time.Millisecond)
	want(t, "dead letters", deadReasons(dlq), "queued:expired/expired")
	a = gt.member("g", 1)
	want(t, "delivered", got(a), "forever/1")
	if st := gt.stats("g"); st.Expired != 1 || st.DeadLettered != 1 {
		t.Fatalf("stats: expired %d dead-lettered %d, want 1 and 1", st.Expired, st.DeadLettered)
	}
	a.Ack([]string{gt.group("g").heldID(t, a)})

	// In flight past its ttl: acked, it is acked; nacked, it is dead-lettered.
	gt.publishTTL("acked", time.Second, "")
	d := next(a)
	gt.clock.Advance(2 * time.Second)
	a.Ack(ids(d))
	gt.publishTTL("nacked", time.Second, "")
	d = next(a)
	gt.clock.Advance(2 * time.Second)
	a.Nack(ids(d), 0, "")
	want(t, "after the nack", deadReasons(dlq), "nacked:expired/expired")
	want(t, "redelivered", got(a))

	// Delayed past its ttl: it goes at its time, not when the delay ends.
	gt.publishTTL("delayed", time.Second, "")
	a.Nack(ids(next(a)), time.Minute, "")
	gt.clock.Advance(1500 * time.Millisecond)
	want(t, "the delayed one", deadReasons(dlq), "delayed:expired/expired")
	gt.settled("g")
}

// heldID returns the system_id of the one message s was handed and has not settled.
func (g *group) heldID(t *testing.T, s *Subscription) string {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range s.m.owned {
		return e.msg.SystemID
	}
	t.Fatal("the member holds nothing")
	return ""
}

// A message found expired by a dispatch before its wake-up came is not delivered: it is let
// go of at the wake-up.
func TestTTLExpiredBeforeItsWakeUp(t *testing.T) {
	gt := newGroupTest(t, Options{})
	dlq := gt.fanout("dlq.g")
	a := gt.member("g", 1)
	a.Close()
	gt.publishTTL("late", time.Second, "")
	gt.clock.t.Add(int64(2 * time.Second)) // time passes, no wake-up runs yet
	a = gt.member("g", 1)
	want(t, "delivered", got(a))
	gt.clock.Advance(0)
	want(t, "dead letters", deadReasons(dlq), "late:expired/expired")
	gt.settled("g")
}

// A group's max_age expires what it holds as a ttl would, the shorter of the two winning,
// and on_expire "drop" drops (counted) instead of dead-lettering.
func TestMaxAgeAndDrop(t *testing.T) {
	gt := newGroupTest(t, Options{})
	if err := gt.b.Declare(broker.GroupConfig{Name: "g", Patterns: []string{"j.>"}, Limits: broker.GroupLimits{MaxAge: 10 * time.Second, OnExpire: "drop"}}); err != nil {
		t.Fatal(err)
	}
	dlq := gt.fanout("dlq.g")
	gt.publishTTL("short", time.Second, "")
	gt.publishTTL("aged", 0, "")
	gt.publishTTL("long", time.Hour, "")
	gt.clock.Advance(2 * time.Second)
	if st := gt.stats("g"); st.Queued != 2 || st.Expired != 1 || st.Dropped != 1 {
		t.Fatalf("after 2s: queued %d expired %d dropped %d, want 2, 1, 1", st.Queued, st.Expired, st.Dropped)
	}
	gt.clock.Advance(9 * time.Second)
	if st := gt.stats("g"); st.Queued != 0 || st.Expired != 3 || st.Dropped != 3 || st.DeadLettered != 0 {
		t.Fatalf("after 11s: queued %d expired %d dropped %d dead-lettered %d, want 0, 3, 3, 0", st.Queued, st.Expired, st.Dropped, st.DeadLettered)
	}
	want(t, "dead letters", deadReasons(dlq))
	gt.settled("g")
	if err := (broker.GroupConfig{Name: "x", Patterns: []string{"x"}, Limits: broker.GroupLimits{OnExpire: "keep"}}).Check(); err == nil {
		t.Fatal(`on_expire "keep" accepted`)
	}
}

// In an ordered group, a key's message that expires frees the key: the next goes.
func TestTTLFreesItsKey(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 5, ordering(broker.OrderingKey))
	gt.publishTTL("first", 0, "k")
	gt.publishTTL("second", time.Second, "k")
	gt.publishTTL("third", 0, "k")
	d := next(a)
	want(t, "first", payloads(d), "first")
	gt.clock.Advance(2 * time.Second) // second expires behind first
	a.Ack(ids(d))
	want(t, "after the ack", got(a), "third/1")
}

// The expiry queue and heap against a list: random pushes, mostly in order of time (one ttl
// for all) and some out of it (a shorter ttl), removals at random places (acks), and takes of
// what is due as the clock moves; what comes out is always the soonest, and every entry knows
// its place. Enough removals that the queue compacts.
func TestExpiry(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x expiry
	var in []*entry
	now, last := int64(0), int64(0)
	for step := range 50_000 {
		switch r := rng.IntN(10); {
		case r < 5 || len(in) == 0:
			at := last + int64(rng.IntN(3))
			if rng.IntN(8) == 0 {
				at = now + int64(rng.IntN(20)) // out of order
			}
			last = max(last, at)
			e := &entry{expires: at}
			x.push(e)
			in = append(in, e)
		case r < 9:
			i := rng.IntN(len(in))
			e := in[i]
			x.drop(e)
			if e.expIdx != 0 || e.expPos != 0 {
				t.Fatalf("step %d: dropped entry still placed (expIdx %d, expPos %d)", step, e.expIdx, e.expPos)
			}
			in = slices.Delete(in, i, i+1)
		default:
			now += int64(rng.IntN(5))
			for e := x.due(now); e != nil; e = x.due(now) {
				i := slices.Index(in, e)
				if i < 0 || e.expires > now {
					t.Fatalf("step %d: due(%d) gave an entry of %d, in the list: %v", step, now, e.expires, i >= 0)
				}
				for _, o := range in {
					if o.expires < e.expires {
						t.Fatalf("step %d: due gave %d before %d", step, e.expires, o.expires)
					}
				}
				in = slices.Delete(in, i, i+1)
			}
		}
		if x.live+len(x.heap) != len(in) {
			t.Fatalf("step %d: %d in the queue and %d in the heap, want %d", step, x.live, len(x.heap), len(in))
		}
		if len(x.fifo) > 0 && x.fifo[0].e == nil {
			t.Fatalf("step %d: the queue's front is a cleared slot", step)
		}
		if cleared := len(x.fifo) - x.live; cleared > compactAbove && cleared > x.live {
			t.Fatalf("step %d: %d cleared slots beside %d live ones", step, cleared, x.live)
		}
		for i, s := range x.fifo {
			if s.e != nil && (s.e.expPos != x.base+int64(i)+1 || s.at != s.e.expires) {
				t.Fatalf("step %d: queue slot %d: time %d, entry's expPos %d (base %d) and expires %d", step, i, s.at, s.e.expPos, x.base, s.e.expires)
			}
			if i > 0 && x.fifo[i-1].at > s.at {
				t.Fatalf("step %d: queue out of order at %d", step, i)
			}
		}
		for i, s := range x.heap {
			if s.e.expIdx != i+1 || s.at != s.e.expires {
				t.Fatalf("step %d: heap slot %d: time %d, entry's expIdx %d and expires %d", step, i, s.at, s.e.expIdx, s.e.expires)
			}
			if i > 0 && x.heap[(i-1)/2].at > s.at {
				t.Fatalf("step %d: heap order broken at %d", step, i)
			}
		}
	}
	if x.compactions == 0 {
		t.Fatal("the queue never compacted: the test does not reach its bound")
	}
	t.Logf("%d compactions", x.compactions)
}
