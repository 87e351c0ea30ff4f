package memory

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// Consumer-group unit tests on a fake clock: no goroutine, no sleep, no gRPC. Time moves only
// when a test calls clock.Advance, which fires what fell due before it returns.

type groupTest struct {
	t     *testing.T
	b     *Engine
	clock *fakeClock
}

func newGroupTest(t *testing.T, opts Options) *groupTest {
	t.Helper()
	clock := &fakeClock{}
	opts.clock = clock
	if opts.AckDeadline == 0 {
		opts.AckDeadline = 30 * time.Second
	}
	return &groupTest{t: t, b: newTestBroker(t, opts), clock: clock}
}

func (gt *groupTest) member(id string, maxInFlight int, o ...func(*broker.SubscribeOptions)) *Subscription {
	gt.t.Helper()
	so := broker.SubscribeOptions{ID: id, Group: id, Patterns: []string{"j.>"}, Mode: broker.Balanced, MaxInFlight: maxInFlight}
	for _, f := range o {
		f(&so)
	}
	s, err := gt.b.Subscribe(so)
	if err != nil {
		gt.t.Fatal(err)
	}
	return s
}

func (gt *groupTest) publish(payloads ...string) []string {
	gt.t.Helper()
	var ids []string
	for _, p := range payloads {
		r, err := gt.b.Publish("j.x", []byte(p), nil)
		if err != nil {
			gt.t.Fatal(err)
		}
		ids = append(ids, r.SystemID)
	}
	return ids
}

// got returns what s has been handed since the last call, as "payload/attempt".
func got(s *Subscription) []string {
	var out []string
	for _, d := range s.Next(nil, 1000, 1<<30) {
		if d.Msg != nil {
			out = append(out, string(d.Msg.Payload)+"/"+strconv.Itoa(int(d.Attempt)))
		}
	}
	return out
}

func want(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func (gt *groupTest) stats(id string) broker.GroupStats {
	for _, g := range gt.b.Stats().Groups {
		if g.ID == id {
			return g
		}
	}
	gt.t.Fatalf("no group %q", id)
	return broker.GroupStats{}
}

// Messages go round-robin to the members that have room; max_in_flight bounds each member;
// an ack makes room for the next.
func TestGroupRoundRobinAndMaxInFlight(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1)
	b := gt.member("g", 2)
	ids := gt.publish("1", "2", "3", "4", "5")
	want(t, "a", got(a), "1/1")
	want(t, "b", got(b), "2/1", "3/1")
	if st := gt.stats("g"); st.Queued != 2 || st.InFlight != 3 {
		t.Fatalf("stats %+v", st)
	}
	a.Ack(ids[:1])
	want(t, "a after its ack", got(a), "4/1")
	b.Ack(ids[1:2])
	want(t, "b after its ack", got(b), "5/1")
	if unknown := b.Ack(ids[1:2]); unknown != 1 {
		t.Fatalf("duplicate ack: %d unknown, want 1", unknown)
	}
	if st := gt.stats("g"); st.Acked != 2 || st.Queued != 0 || st.InFlight != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// An unacked message comes back after its ack deadline, to the next member with room, with
// its attempt counted; touch pushes the deadline a full ack_deadline from now.
func TestGroupAckDeadlineAndTouch(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{AckDeadline: 30 * time.Second}})
	a := gt.member("g", 1)
	ids := gt.publish("1")
	want(t, "a", got(a), "1/1")
	b := gt.member("g", 1)
	gt.clock.Advance(20 * time.Second)
	if a.Touch(ids) != 0 {
		t.Fatal("touch of a held message skipped")
	}
	gt.clock.Advance(29 * time.Second) // 49s: 29s after the touch
	want(t, "b before the touched deadline", got(b))
	gt.clock.Advance(2 * time.Second) // 51s: past it
	want(t, "after the deadline (round-robin: a again)", append(got(a), got(b)...), "1/2")
	if b.Touch(ids) != 1 {
		t.Fatal("b touched a message it does not hold")
	}
	if st := gt.stats("g"); st.Redelivered != 1 || st.InFlight != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A nack with a delay brings the message back only once the delay is over; with no delay at
// once. A member's nack applies only to its own deliveries.
func TestGroupNackDelay(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1)
	b := gt.member("g", 1)
	ids := gt.publish("1", "2")
	want(t, "a", got(a), "1/1")
	want(t, "b", got(b), "2/1")
	if b.Nack(ids[:1], 0, "") != 1 {
		t.Fatal("b nacked a's message")
	}
	a.Nack(ids[:1], 10*time.Second, "busy")
	if st := gt.stats("g"); st.Delayed != 1 {
		t.Fatalf("stats %+v", st)
	}
	gt.clock.Advance(9 * time.Second)
	want(t, "a before the delay", got(a))
	gt.clock.Advance(time.Second)
	want(t, "a after the delay", got(a), "1/2")
	a.Nack(ids[:1], 0, "")
	want(t, "a after a nack without delay", got(a), "1/3")
}

// After max_deliveries attempts a message goes to the dead-letter topic, with headers that
// say where it came from, how often it was tried and why.
func TestGroupDeadLetter(t *testing.T) {
	gt := newGroupTest(t, Options{})
	dlq, err := gt.b.Subscribe(broker.SubscribeOptions{Patterns: []string{"dead.>"}, Mode: broker.Fanout})
	if err != nil {
		t.Fatal(err)
	}
	a := gt.member("g", 1, func(o *broker.SubscribeOptions) { o.MaxDeliveries = 2; o.DeadLetterTopic = "dead.g" })
	ids := gt.publish("1")
	want(t, "a", got(a), "1/1")
	a.Nack(ids, 0, "bad input")
	want(t, "a", got(a), "1/2")
	gt.clock.Advance(30 * time.Second)
	d := dlq.Next(nil, 10, 1<<20)
	if len(d) != 1 {
		t.Fatalf("dead letters: %d", len(d))
	}
	h := d[0].Msg.Headers
	if h[broker.HeaderDeadLetterReason] != broker.ReasonAckDeadline || h[broker.HeaderDeadLetterAttempts] != "2" || h[broker.HeaderDeadLetterSystemID] != ids[0] ||
		h[broker.HeaderDeadLetterTopic] != "j.x" || h[broker.HeaderDeadLetterGroup] != "g" || string(d[0].Msg.Payload) != "1" {
		t.Fatalf("dead letter %+v", d[0].Msg)
	}
	if st := gt.stats("g"); st.DeadLettered != 1 || st.InFlight != 0 || st.Queued != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A member that leaves gives its unacked messages at once to the others; what was still in
// its buffer, never sent, does not count as an attempt. With nobody left they wait.
func TestGroupMemberLeaves(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 2)
	gt.publish("1", "2")
	want(t, "a", got(a)[:1], "1/1") // took both, read both (Next takes everything waiting)
	b := gt.member("g", 5)
	a.Close()
	want(t, "b", got(b), "1/2", "2/2")
	b.Close()
	gt.publish("3")
	if st := gt.stats("g"); st.Members != 0 || st.Queued != 3 {
		t.Fatalf("stats %+v", st)
	}
	c := gt.member("g", 5)
	want(t, "c", got(c), "1/3", "2/3", "3/1")

	// Deliveries still buffered when their member leaves were never handed over.
	d := gt.member("h", 1, func(o *broker.SubscribeOptions) { o.Patterns = []string{"k"} })
	if _, err := gt.b.Publish("k", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	d.Close()
	e := gt.member("h", 1, func(o *broker.SubscribeOptions) { o.Patterns = []string{"k"} })
	want(t, "e", got(e), "x/1")
}

// A late ack — from a member that left, arriving by the unary Ack after its message went
// back to the queue — settles the waiting message without a scan; a second ack is unknown.
func TestGroupLateAck(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1)
	ids := gt.publish("1", "2")
	want(t, "a", got(a), "1/1")
	a.Close() // both wait again, nobody to take them
	if err := gt.b.Ack("g", ids[0]); err != nil {
		t.Fatalf("late ack: %v", err)
	}
	if err := gt.b.Ack("g", ids[0]); !errors.Is(err, broker.ErrUnknownMessage) {
		t.Fatalf("duplicate late ack: %v", err)
	}
	if err := gt.b.Ack("g", ids[1]); !errors.Is(err, broker.ErrUnknownMessage) {
		t.Fatalf("ack of a message never delivered: %v", err)
	}
	b := gt.member("g", 5)
	want(t, "b", got(b), "2/1")
	b.Ack(ids[1:])
	if st := gt.stats("g"); st.Acked != 2 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A late ack of a delayed message settles it too: it is not redelivered.
	ids = gt.publish("3")
	want(t, "b", got(b), "3/1")
	b.Nack(ids, time.Minute, "")
	if err := gt.b.Ack("g", ids[0]); err != nil {
		t.Fatalf("ack of a delayed message: %v", err)
	}
	gt.clock.Advance(2 * time.Minute)
	want(t, "b after the delay", got(b))
	if st := gt.stats("g"); st.Delayed != 0 || st.Bytes != 0 || st.Acked != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// The overflow policies, by count: reject refuses for the group only, drop_oldest keeps the
// newest.
func TestGroupOverflowPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   broker.Overflow
		accepted int
		queued   []string
	}{{broker.OverflowReject, 3, []string{"0/1", "1/1", "2/1"}}, {broker.OverflowDropOldest, 5, []string{"2/1", "3/1", "4/1"}}} {
		gt := newGroupTest(t, Options{GroupMaxQueued: 3, GroupOverflow: tc.policy})
		gt.member("g", 1).Close()
		accepted := 0
		for i := range 5 {
			if _, err := gt.b.Publish("j.x", []byte(strconv.Itoa(i)), nil); err == nil {
				accepted++
			} else if !errors.Is(err, broker.ErrGroupFull) {
				t.Fatal(err)
			}
		}
		if accepted != tc.accepted {
			t.Fatalf("policy %d: %d accepted, want %d", tc.policy, accepted, tc.accepted)
		}
		st := gt.stats("g")
		if st.Rejected+st.Dropped != 2 || st.Queued != 3 {
			t.Fatalf("policy %d: stats %+v", tc.policy, st)
		}
		want(t, "member", got(gt.member("g", 5)), tc.queued...)
	}
}
