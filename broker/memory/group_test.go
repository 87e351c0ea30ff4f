package memory

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// Consumer-group unit tests on a fake clock: no goroutine, no sleep, no gRPC. Time moves only
// when a test calls clock.Advance, which fires what fell due before it returns; hooks run in
// the test's goroutine too.

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
	if opts.GroupRedeliveryDelayMin == 0 { // these tests count redeliveries at a standstill; the back-off has its own
		opts.GroupRedeliveryDelayMin = -1
	}
	return &groupTest{t: t, b: newTestBroker(t, opts), clock: clock}
}

// member opens a member of group id (subscription_id and consumer_group both id) on "j.>".
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

func maxDeliveries(n int) func(*broker.SubscribeOptions) {
	return func(o *broker.SubscribeOptions) { o.MaxDeliveries = n }
}

func deadLetterTo(topic string) func(*broker.SubscribeOptions) {
	return func(o *broker.SubscribeOptions) { o.DeadLetterTopic = topic }
}

// oneMember opens group "g" with one member of max_in_flight 1, publishes payloads and checks
// that the member got the first.
func (gt *groupTest) oneMember(payloads ...string) (*Subscription, []string) {
	gt.t.Helper()
	a := gt.member("g", 1)
	ids := gt.publish(payloads...)
	want(gt.t, "a", got(a), payloads[0]+"/1")
	return a, ids
}

// fanout opens a fanout subscription, to watch dead letters and messages hooks emit.
func (gt *groupTest) fanout(patterns ...string) *Subscription {
	gt.t.Helper()
	s, err := gt.b.Subscribe(broker.SubscribeOptions{Patterns: patterns, Mode: broker.Fanout})
	if err != nil {
		gt.t.Fatal(err)
	}
	return s
}

// publish publishes each payload to "j.x" and returns their system_ids.
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

// group returns the engine's group of subscription id, for tests that look inside.
func (gt *groupTest) group(id string) *group {
	gt.t.Helper()
	g, err := gt.b.groupByID(id)
	if err != nil {
		gt.t.Fatal(err)
	}
	return g
}

// next returns every message s has been handed since the last call (events skipped).
func next(s *Subscription) []broker.Delivery {
	var out []broker.Delivery
	for {
		ds := s.Next(nil, 1000, 1<<30)
		if len(ds) == 0 {
			return out
		}
		for _, d := range ds {
			if d.Msg != nil {
				out = append(out, d)
			}
		}
	}
}

// got returns what s has been handed since the last call, as "payload/attempt".
func got(s *Subscription) []string {
	var out []string
	for _, d := range next(s) {
		out = append(out, string(d.Msg.Payload)+"/"+strconv.Itoa(int(d.Attempt)))
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
	gt.t.Helper()
	st, err := gt.b.Group(id)
	if err != nil {
		gt.t.Fatal(err)
	}
	return st.GroupStats
}

// settled checks that group id holds nothing and that the broker's budget is back to zero
// but for the dead letters the group keeps (drain the fanout subscriptions first: their
// buffers count).
func (gt *groupTest) settled(id string) {
	gt.t.Helper()
	st := gt.stats(id)
	if st.Queued != 0 || st.InFlight != 0 || st.Delayed != 0 || st.Bytes != 0 {
		gt.t.Fatalf("group holds messages: %+v", st)
	}
	if used := gt.b.MemoryUsed(); used != st.DeadLetterBytes {
		gt.t.Fatalf("memory budget used %d, want 0 but for %d bytes of dead letters kept", used, st.DeadLetterBytes)
	}
}

// msgCost is what the group charges for a message of payload p published to "j.x" that
// only the group takes.
func msgCost(p string) int64 {
	return grouping.MessageCost("j.x", "", strings.Repeat("x", idLen), []byte(p), 0, 0, 1) + groupEntryOverhead
}

// Messages go round-robin to the members, skipping those without room: max_in_flight bounds
// what each member holds; the rest waits queued.
func TestGroupRoundRobin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		room   []int      // max_in_flight of each member
		got    [][]string // what each member gets of "1".."7"
		queued int
	}{
		{"equal room", []int{3, 3, 3}, [][]string{{"1", "4", "7"}, {"2", "5"}, {"3", "6"}}, 0},
		{"full members skipped", []int{1, 3, 2}, [][]string{{"1"}, {"2", "4", "6"}, {"3", "5"}}, 1},
		{"one member", []int{4}, [][]string{{"1", "2", "3", "4"}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gt := newGroupTest(t, Options{})
			var members []*Subscription
			for _, n := range tc.room {
				members = append(members, gt.member("g", n))
			}
			gt.publish("1", "2", "3", "4", "5", "6", "7")
			inFlight := 0
			for i, m := range members {
				var w []string
				for _, p := range tc.got[i] {
					w = append(w, p+"/1")
				}
				want(t, "member "+strconv.Itoa(i), got(m), w...)
				inFlight += len(w)
			}
			if st := gt.stats("g"); st.Queued != tc.queued || st.InFlight != inFlight || st.Delivered != uint64(inFlight) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// An ack makes room for the next queued message; a duplicate ack is skipped and counted.
func TestGroupAckMakesRoom(t *testing.T) {
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
	if skipped := b.Ack(ids[1:2]); skipped != 1 {
		t.Fatalf("duplicate ack: %d skipped, want 1", skipped)
	}
	if st := gt.stats("g"); st.Acked != 2 || st.Queued != 0 || st.InFlight != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// An unacked message comes back when its member's ack deadline has passed — at the
// deadline, not a nanosecond before — with its attempt counted each time.
func TestGroupAckDeadlineRedelivers(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1, func(o *broker.SubscribeOptions) { o.AckDeadline = 5 * time.Second })
	gt.publish("1")
	want(t, "a", got(a), "1/1")
	for attempt := 2; attempt <= 4; attempt++ {
		gt.clock.Advance(5*time.Second - time.Nanosecond)
		want(t, "before the deadline", got(a))
		gt.clock.Advance(time.Nanosecond)
		want(t, "at the deadline", got(a), "1/"+strconv.Itoa(attempt))
	}
	if st := gt.stats("g"); st.Delivered != 4 || st.Redelivered != 3 || st.InFlight != 1 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// touch pushes the deadline a full ack_deadline from now; only the member holding the
// message can touch it.
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
	if b.Touch(ids) != 1 {
		t.Fatal("b touched a message it does not hold")
	}
	gt.clock.Advance(29 * time.Second) // 49s: 29s after the touch
	want(t, "before the touched deadline", append(got(a), got(b)...))
	if st := gt.stats("g"); st.Redelivered != 0 {
		t.Fatalf("redelivered before the touched deadline: %+v", st)
	}
	gt.clock.Advance(2 * time.Second) // 51s: past it
	want(t, "after the deadline (round-robin: a again)", append(got(a), got(b)...), "1/2")
	if st := gt.stats("g"); st.Redelivered != 1 || st.InFlight != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A nack gives the message back for another attempt: at once, ahead of what is queued, or
// once its delay is over. A member's nack applies only to its own deliveries.
func TestGroupNack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		atOnce  []string // what a gets right after its nack
		later   []string // what a gets once the delay is over
		queued  int      // right after the nack
		delayed int
	}{
		{"without delay", 0, []string{"1/2"}, nil, 1, 0},
		{"with a delay", 10 * time.Second, []string{"3/1"}, []string{"1/2"}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gt := newGroupTest(t, Options{})
			a := gt.member("g", 1)
			b := gt.member("g", 1)
			ids := gt.publish("1", "2", "3")
			want(t, "a", got(a), "1/1")
			want(t, "b", got(b), "2/1")
			if b.Nack(ids[:1], 0, "") != 1 {
				t.Fatal("b nacked a's message")
			}
			a.Nack(ids[:1], tc.delay, "busy")
			want(t, "a at once", got(a), tc.atOnce...)
			if st := gt.stats("g"); st.Queued != tc.queued || st.Delayed != tc.delayed {
				t.Fatalf("stats after the nack %+v", st)
			}
			if tc.delay > 0 {
				a.Ack(ids[2:])
				gt.clock.Advance(tc.delay - time.Nanosecond)
				want(t, "a before the delay is over", got(a))
				gt.clock.Advance(time.Nanosecond)
			}
			want(t, "a later", got(a), tc.later...)
		})
	}
}

// After max_deliveries attempts a message goes to the dead-letter topic, whatever ended its
// last attempt, with its payload and headers and tb-dead-letter-* headers that say where it
// came from, how often it was tried and why.
func TestGroupDeadLetter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dlq    string // dead_letter_topic; "" for the default
		fail   func(gt *groupTest, a *Subscription, id string)
		topic  string // where the dead letter goes
		reason string
	}{
		{"nack", "dead.g", func(_ *groupTest, a *Subscription, id string) { a.Nack([]string{id}, 0, "bad input") },
			"dead.g", "bad input"},
		{"unary nack", "", func(gt *groupTest, _ *Subscription, id string) { _ = gt.b.Nack("g", id, 0, "") },
			"dlq.g", deadletter.ReasonNack},
		{"ack deadline", "dead.g", func(gt *groupTest, _ *Subscription, _ string) { gt.clock.Advance(30 * time.Second) },
			"dead.g", deadletter.ReasonAckDeadline},
		{"member left", "dead.g", func(_ *groupTest, a *Subscription, _ string) { a.Close() },
			"dead.g", deadletter.ReasonMemberLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gt := newGroupTest(t, Options{})
			dead := gt.fanout("dead.>", "dlq.>")
			a := gt.member("g", 1, maxDeliveries(2), deadLetterTo(tc.dlq))
			r, err := gt.b.Publish("j.x", []byte("1"), map[string]string{"k": "v"})
			if err != nil {
				t.Fatal(err)
			}
			want(t, "a", got(a), "1/1")
			a.Nack([]string{r.SystemID}, 0, "first")
			want(t, "a", got(a), "1/2")
			tc.fail(gt, a, r.SystemID)
			want(t, "a after the last attempt", got(a))
			d := next(dead)
			if len(d) != 1 {
				t.Fatalf("%d dead letters, want 1", len(d))
			}
			m := d[0].Msg
			wantHeaders := map[string]string{"k": "v",
				deadletter.HeaderCode: deadletter.CodeMaxDeliveries, deadletter.HeaderReason: tc.reason, deadletter.HeaderTopic: "j.x",
				deadletter.HeaderSystemID: r.SystemID, deadletter.HeaderSubscription: "g",
				deadletter.HeaderGroup: "g", deadletter.HeaderAttempts: "2"}
			if m.Topic != tc.topic || string(m.Payload) != "1" || fmt.Sprint(m.Headers.Map()) != fmt.Sprint(wantHeaders) {
				t.Fatalf("dead letter to %q, payload %q, headers %v; want to %q, payload \"1\", headers %v",
					m.Topic, m.Payload, m.Headers, tc.topic, wantHeaders)
			}
			if st := gt.stats("g"); st.DeadLettered != 1 || st.Redelivered != 1 {
				t.Fatalf("stats %+v", st)
			}
			gt.settled("g")
		})
	}
}

// A member that leaves gives its unacked messages at once to the others; what was still in
// its buffer, never sent, does not count as an attempt. With nobody left they wait.
func TestGroupMemberLeaves(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 2)
	gt.publish("1", "2")
	want(t, "a", got(a), "1/1", "2/1")
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
// back to the queue — settles the waiting message; a second ack is unknown.
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
	if st := gt.stats("g"); st.Delayed != 0 || st.Acked != 3 {
		t.Fatalf("stats %+v", st)
	}
	b.Close()
	gt.settled("g")
}

// Late and duplicate acks are skipped and counted, or settle the message if it still waits;
// they never fail the stream, never settle a message twice and never unbalance the counts.
func TestGroupLateAndDuplicateAcks(t *testing.T) {
	t.Run("after the deadline, redelivered to another member", func(t *testing.T) {
		gt := newGroupTest(t, Options{})
		a := gt.member("g", 1)
		b := gt.member("g", 1)
		ids := gt.publish("1")
		want(t, "a", got(a), "1/1")
		gt.clock.Advance(30 * time.Second)
		want(t, "b", got(b), "1/2")
		if skipped := a.Ack(ids); skipped != 0 { // a did the work: its ack settles b's attempt
			t.Fatalf("late ack: %d skipped", skipped)
		}
		if skipped := b.Ack(ids); skipped != 1 {
			t.Fatalf("ack after the late ack: %d skipped, want 1", skipped)
		}
		gt.clock.Advance(time.Minute)
		want(t, "nothing comes back", append(got(a), got(b)...))
		if st := gt.stats("g"); st.Acked != 1 || st.Redelivered != 1 {
			t.Fatalf("stats %+v", st)
		}
		gt.settled("g")
	})
	t.Run("after the deadline, redelivered to the same member", func(t *testing.T) {
		gt := newGroupTest(t, Options{})
		a, ids := gt.oneMember("1", "2")
		gt.clock.Advance(30 * time.Second)
		want(t, "a", got(a), "1/2")
		if skipped := a.Ack([]string{ids[0], ids[0]}); skipped != 1 { // the first attempt's ack, twice
			t.Fatalf("late ack and its duplicate: %d skipped, want 1", skipped)
		}
		want(t, "a after the ack", got(a), "2/1")
		if st := gt.stats("g"); st.Acked != 1 || st.InFlight != 1 || st.Queued != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("after dead-lettering", func(t *testing.T) {
		gt := newGroupTest(t, Options{})
		dead := gt.fanout("dlq.>")
		a := gt.member("g", 1, maxDeliveries(1))
		ids := gt.publish("1")
		want(t, "a", got(a), "1/1")
		gt.clock.Advance(30 * time.Second)
		if skipped := a.Ack(ids); skipped != 1 {
			t.Fatalf("ack of a dead letter: %d skipped, want 1", skipped)
		}
		if err := gt.b.Ack("g", ids[0]); !errors.Is(err, broker.ErrUnknownMessage) {
			t.Fatalf("unary ack of a dead letter: %v", err)
		}
		if st := gt.stats("g"); st.Acked != 0 || st.DeadLettered != 1 {
			t.Fatalf("stats %+v", st)
		}
		next(dead)
		gt.settled("g")
	})
	t.Run("after a purge", func(t *testing.T) {
		gt := newGroupTest(t, Options{})
		a, ids := gt.oneMember("1")
		a.Close()
		if n, err := gt.b.PurgeGroup("g"); n != 1 || err != nil {
			t.Fatalf("purge: %d, %v", n, err)
		}
		if err := gt.b.Ack("g", ids[0]); !errors.Is(err, broker.ErrUnknownMessage) {
			t.Fatalf("ack of a purged message: %v", err)
		}
		gt.settled("g")
	})
	// A delivery its member never read (still buffered when it left) was never handed over:
	// acking it, or acking it after it was dropped, must not settle anything.
	t.Run("of a delivery taken back unsent", func(t *testing.T) {
		gt := newGroupTest(t, Options{})
		a := gt.member("g", 1)
		ids := gt.publish("1")
		a.Close() // "1" goes back with attempt 0
		if err := gt.b.Ack("g", ids[0]); !errors.Is(err, broker.ErrUnknownMessage) {
			t.Fatalf("ack of a message never handed over: %v", err)
		}
		if n, _ := gt.b.PurgeGroup("g"); n != 1 {
			t.Fatalf("purged %d, want 1", n)
		}
		if err := gt.b.Ack("g", ids[0]); !errors.Is(err, broker.ErrUnknownMessage) {
			t.Fatalf("ack of a purged message: %v", err)
		}
		if st := gt.stats("g"); st.Acked != 0 {
			t.Fatalf("stats %+v", st)
		}
		gt.settled("g")
	})
	t.Run("malformed, unknown and never delivered", func(t *testing.T) {
		gt := newGroupTest(t, Options{})
		a, ids := gt.oneMember("1", "2")
		other := gt.b.FormatID(1 << 40)
		if skipped := a.Ack([]string{"", "nonsense", ids[0] + "x", other, ids[1], ids[0], ids[0]}); skipped != 6 {
			t.Fatalf("%d skipped, want 6", skipped)
		}
		want(t, "a gets the message it could not ack", got(a), "2/1")
		if st := gt.stats("g"); st.Acked != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A late ack finds its message in the group's waiting map: it reads no entry of the queue,
// however long, and leaves the settled entry where it stands, without its message, for the
// queue to skip when it comes up.
func TestGroupLateAckDoesNotScan(t *testing.T) {
	const n = 3000
	gt := newGroupTest(t, Options{})
	a := gt.member("g", n)
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = strconv.Itoa(i)
	}
	ids := gt.publish(payloads...)
	if l := len(got(a)); l != n {
		t.Fatalf("a got %d", l)
	}
	a.Close() // all n wait in the queue again, each delivered once
	g := gt.group("g")
	g.mu.Lock()
	before := g.queue.base
	g.mu.Unlock()
	for _, id := range ids[:n-1] {
		if err := gt.b.Ack("g", id); err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	after := g.queue.base
	for i := range n - 1 {
		if e := g.queue.base.at(i); !e.settled || e.msg != nil {
			t.Errorf("entry %d of the queue: settled %v, message %v", i, e.settled, e.msg != nil)
		}
	}
	g.mu.Unlock()
	if after.reads != before.reads || after.head != before.head || after.size != before.size {
		t.Fatalf("%d late acks read %d entries of the queue and moved it from %d+%d to %d+%d; want none",
			n-1, after.reads-before.reads, before.head, before.size, after.head, after.size)
	}
	last := payloads[n-1]
	if st := gt.stats("g"); st.Acked != n-1 || st.Queued != 1 || st.Bytes != msgCost(last) {
		t.Fatalf("stats %+v, want 1 queued of %d bytes", st, msgCost(last))
	}
	b := gt.member("g", n)
	want(t, "b", got(b), last+"/2")
	b.Ack(ids[n-1:])
	if l := g.queue.len(); l != 0 {
		t.Fatalf("%d entries left in the queue", l)
	}
	gt.settled("g")
}

// The overflow policies, for both bounds: reject refuses for the group only, naming the
// bound; drop_oldest accepts and drops the oldest queued messages, counted.
func TestGroupOverflow(t *testing.T) {
	cost := msgCost("0") // every payload is one byte
	for _, tc := range []struct {
		name     string
		opts     Options
		bound    string // what a refusal names
		accepted int
		member   []string // what a member joining then gets
	}{
		{"reject, max_queued", Options{Limits: broker.Limits{GroupMaxQueued: 3, GroupOverflow: broker.OverflowReject}},
			"max_queued }", 3, []string{"0/1", "1/1", "2/1"}},
		{"reject, max_queued_bytes", Options{Limits: broker.Limits{GroupMaxQueuedBytes: 3 * cost, GroupOverflow: broker.OverflowReject}},
			"max_queued_bytes }", 3, []string{"0/1", "1/1", "2/1"}},
		{"drop_oldest, max_queued", Options{Limits: broker.Limits{GroupMaxQueued: 3, GroupOverflow: broker.OverflowDropOldest}},
			"", 5, []string{"2/1", "3/1", "4/1"}},
		{"drop_oldest, max_queued_bytes", Options{Limits: broker.Limits{GroupMaxQueuedBytes: 3 * cost, GroupOverflow: broker.OverflowDropOldest}},
			"", 5, []string{"2/1", "3/1", "4/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gt := newGroupTest(t, tc.opts)
			gt.member("g", 1).Close()
			accepted := 0
			for i := range 5 {
				_, err := gt.b.Publish("j.x", []byte(strconv.Itoa(i)), nil)
				switch {
				case err == nil:
					accepted++
				case !errors.Is(err, broker.ErrGroupFull) || tc.bound == "" || !strings.Contains(err.Error(), tc.bound):
					t.Fatalf("publish %d: %v; want accepted, or ErrGroupFull naming %q", i, err, tc.bound)
				}
			}
			st := gt.stats("g")
			refused := uint64(5 - accepted)
			if accepted != tc.accepted || st.Rejected != refused || st.Dropped != uint64(accepted-3) || st.Queued != 3 || st.Bytes != 3*cost {
				t.Fatalf("%d accepted, stats %+v; want %d accepted, %d rejected, %d dropped, 3 queued of %d bytes",
					accepted, st, tc.accepted, refused, accepted-3, 3*cost)
			}
			want(t, "member", got(gt.member("g", 5)), tc.member...)
		})
	}
}

// A full group's refusal names the bound the message met, whichever it is, though the
// refusals of an episode are made once per bound (refusalLocked): two bounds in one episode
// are named each, and after the group drains a new episode describes its bound afresh.
func TestGroupRefusalNamesItsBound(t *testing.T) {
	cost := msgCost("0")
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: 4, GroupMaxQueuedBytes: 4*cost + 100, GroupOverflow: broker.OverflowReject}})
	gt.member("g", 1).Close()
	refusal := func(payload string, bound string) {
		t.Helper()
		_, err := gt.b.Publish("j.x", []byte(payload), nil)
		if !errors.Is(err, broker.ErrGroupFull) || !strings.Contains(err.Error(), bound) {
			t.Fatalf("publish of %d bytes: %v; want ErrGroupFull naming %q", len(payload), err, bound)
		}
	}
	gt.publish("0", "1", "2")
	refusal(strings.Repeat("x", 200), "max_queued_bytes }") // the bytes first
	gt.publish("3")
	refusal("4", "max_queued }") // then the count, in the same episode
	refusal(strings.Repeat("x", 200), "max_queued }")
	m := gt.member("g", 4)
	ds := next(m)
	if len(ds) != 4 {
		t.Fatalf("member got %d messages, want the 4 queued", len(ds))
	}
	m.Ack(ids(ds)) // drained: the episode ends
	gt.publish("5", "6", "7")
	refusal(strings.Repeat("x", 200), "max_queued_bytes }")
}

// testHooks is a broker.Hooks that records the events of acks and redeliveries and answers
// with what redeliver and ack return; with either nil, that hook is not wanted.
type testHooks struct {
	redeliver func(*broker.RedeliverEvent) broker.RedeliverVerdict
	ack       func(*broker.AckEvent) []broker.Draft
	events    []string
}

func (*testHooks) OnPublish(*broker.Draft) (broker.PublishVerdict, error) {
	return broker.PublishVerdict{}, nil
}
func (*testHooks) OnPublishBatch([]broker.Draft, []broker.PublishVerdict, []error) {}
func (h *testHooks) WantsAck(string) bool                                          { return h.ack != nil }
func (h *testHooks) WantsRedeliver(string) bool                                    { return h.redeliver != nil }

func (h *testHooks) OnAck(e *broker.AckEvent) []broker.Draft {
	h.events = append(h.events, fmt.Sprintf("ack %s/%d %t %s/%s after %v", e.Msg.Payload, e.Attempt, e.SystemID == e.Msg.SystemID, e.SubscriptionID, e.Group, e.InFlight))
	return h.ack(e)
}

func (h *testHooks) OnRedeliver(e *broker.RedeliverEvent) broker.RedeliverVerdict {
	h.events = append(h.events, fmt.Sprintf("redeliver %s/%d %s/%s: %s", e.Msg.Payload, e.Attempt, e.SubscriptionID, e.Group, e.Reason))
	return h.redeliver(e)
}

// OnRedeliver decides what becomes of a message taken back from a member: the default, a
// delay, the dead-letter topic or nothing; its header changes stay on the message and what
// it emits is published.
func TestGroupRedeliverHook(t *testing.T) {
	for _, tc := range []struct {
		name    string
		verdict broker.RedeliverVerdict
		atOnce  []string // what the member gets right after its nack
		later   []string // ... and 5s later
		dead    string   // the dead letter's reason, if any
		code    string   // ... and its code
		dropped uint64
	}{
		{"default", broker.RedeliverVerdict{}, []string{"1/2"}, nil, "", "", 0},
		{"delay", broker.RedeliverVerdict{Action: broker.RedeliverDelay, Delay: 5 * time.Second}, nil, []string{"1/2"}, "", "", 0},
		{"dead-letter", broker.RedeliverVerdict{Action: broker.RedeliverDeadLetter, Reason: "poison"}, nil, nil, "poison", deadletter.CodeRejected, 0},
		{"dead-letter, the nack's reason", broker.RedeliverVerdict{Action: broker.RedeliverDeadLetter}, nil, nil, "flaky", deadletter.CodeRejected, 0},
		{"dead-letter, a plugin failed", broker.RedeliverVerdict{Action: broker.RedeliverDeadLetter, Code: deadletter.CodePluginError, Reason: "plugin p failed: trap"},
			nil, nil, "plugin p failed: trap", deadletter.CodePluginError, 0},
		{"drop", broker.RedeliverVerdict{Action: broker.RedeliverDrop}, nil, nil, "", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gt := newGroupTest(t, Options{})
			watch := gt.fanout("dlq.>", "audit.>")
			v := tc.verdict
			v.SetHeaders, v.DelHeaders = map[string]string{"tried": "yes"}, []string{"k"}
			v.Emit = []broker.Draft{{Topic: "audit.redeliver", Payload: []byte("seen")}}
			h := &testHooks{redeliver: func(*broker.RedeliverEvent) broker.RedeliverVerdict { return v }}
			gt.b.SetHooks(h)
			a := gt.member("g", 1)
			r, err := gt.b.Publish("j.x", []byte("1"), map[string]string{"k": "v"})
			if err != nil {
				t.Fatal(err)
			}
			want(t, "a", got(a), "1/1")
			a.Nack([]string{r.SystemID}, 0, "flaky")
			want(t, "hook calls", h.events, "redeliver 1/1 g/g: flaky")
			redelivered := func() []string { // what a gets, checking the hook's header changes; acked
				var out []string
				for _, d := range next(a) {
					out = append(out, string(d.Msg.Payload)+"/"+strconv.Itoa(int(d.Attempt)))
					if fmt.Sprint(d.Msg.Headers.Map()) != "map[tried:yes]" {
						t.Errorf("redelivered with headers %v, want the hook's changes", d.Msg.Headers)
					}
					a.Ack([]string{d.Msg.SystemID})
				}
				return out
			}
			want(t, "redelivered at once", redelivered(), tc.atOnce...)
			gt.clock.Advance(5*time.Second - time.Nanosecond)
			want(t, "redelivered before 5s", redelivered())
			gt.clock.Advance(time.Nanosecond)
			want(t, "redelivered at 5s", redelivered(), tc.later...)
			var watched []string
			for _, d := range next(watch) {
				w := d.Msg.Topic
				if h := d.Msg.Headers.Map(); h[deadletter.HeaderReason] != "" {
					w += " " + h[deadletter.HeaderCode] + " " + h[deadletter.HeaderReason] + " " + h["tried"]
				}
				watched = append(watched, w)
			}
			var wantWatched []string // dead letters first, then what hooks emitted
			if tc.dead != "" {
				wantWatched = append(wantWatched, "dlq.g "+tc.code+" "+tc.dead+" yes")
			}
			wantWatched = append(wantWatched, "audit.redeliver")
			want(t, "emitted and dead letters", watched, wantWatched...)
			if st := gt.stats("g"); st.Dropped != tc.dropped || st.DeadLettered != uint64(len(wantWatched)-1) {
				t.Fatalf("stats %+v", st)
			}
			gt.settled("g")
		})
	}
}

// OnAck sees every applied ack, late ones included, with how long the message was in
// flight; what it emits is published. Skipped acks are not reported.
func TestGroupAckHook(t *testing.T) {
	gt := newGroupTest(t, Options{})
	watch := gt.fanout("acked.>")
	h := &testHooks{ack: func(e *broker.AckEvent) []broker.Draft {
		return []broker.Draft{{Topic: "acked.x", Payload: e.Msg.Payload}}
	}}
	gt.b.SetHooks(h)
	a := gt.member("g", 2)
	ids := gt.publish("1", "2")
	want(t, "a", got(a), "1/1", "2/1")
	gt.clock.Advance(3 * time.Second)
	a.Ack(ids[:1])
	a.Ack(ids[:1]) // duplicate: skipped, not reported
	a.Nack(ids[1:], time.Minute, "")
	if err := gt.b.Ack("g", ids[1]); err != nil { // late: the message is delayed
		t.Fatal(err)
	}
	want(t, "hook calls", h.events, "ack 1/1 true g/g after 3s", "ack 2/1 true g/g after 0s")
	want(t, "emitted", got(watch), "1/1", "2/1")
	gt.settled("g")
}

// What a member leaves behind, and what passes its ack deadline, goes on in publish order:
// dead-lettered (max_deliveries 1) to the dead-letter topic and the group's store in the
// order it was published, not in a map's.
func TestLeftBehindInPublishOrder(t *testing.T) {
	gt := newGroupTest(t, Options{})
	dlq := gt.fanout("dlq.g")
	payloads := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"}
	payloadsOf := func(ds []broker.Delivery) (out []string) {
		for _, d := range ds {
			out = append(out, string(d.Msg.Payload))
		}
		return out
	}

	a := gt.member("g", 16, maxDeliveries(1))
	gt.publish(payloads...)
	if n := len(got(a)); n != len(payloads) {
		t.Fatalf("the member got %d, want all %d", n, len(payloads))
	}
	a.Close()
	want(t, "dead letters of a member that left", payloadsOf(next(dlq)), payloads...)
	dls, _, err := gt.b.DeadLetters("g", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, dl := range dls {
		kept = append(kept, string(dl.Payload))
	}
	want(t, "dead letters kept", kept, payloads...)

	b := gt.member("g", 16, maxDeliveries(1), func(o *broker.SubscribeOptions) { o.AckDeadline = 5 * time.Second })
	gt.publish(payloads...)
	if n := len(got(b)); n != len(payloads) {
		t.Fatalf("the member got %d, want all %d", n, len(payloads))
	}
	gt.clock.Advance(5 * time.Second)
	want(t, "dead letters of the ack deadline", payloadsOf(next(dlq)), payloads...)
}
