package jetstream

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
)

// publishAll publishes drafts in one frame.
func publishAll(t *testing.T, e *Engine, drafts []broker.Draft) {
	t.Helper()
	res, errs := make([]broker.PublishResult, len(drafts)), make([]error, len(drafts))
	e.PublishBatch(drafts, res, errs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %s: %v", drafts[i].Payload, err)
		}
	}
}

// nextOn waits for the next message delivered on st (up to 40 s: a takeover waits out a pin).
func nextOn(t *testing.T, st broker.Stream) broker.Delivery {
	t.Helper()
	deadline := time.After(40 * time.Second)
	for {
		for _, d := range st.Next(nil, 1, math.MaxInt) {
			if d.Msg != nil {
				return d
			}
		}
		select {
		case <-st.Ready():
		case <-deadline:
			t.Fatal("no delivery")
		}
	}
}

// joinGroup joins o's group on a stream of its own.
func joinGroup(t *testing.T, e *Engine, o broker.SubscribeOptions) (broker.Stream, broker.Subscription) {
	t.Helper()
	st := e.NewStream(nil)
	t.Cleanup(st.Close)
	o.Mode = broker.Balanced
	sub, err := st.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	return st, sub
}

// groupOf returns the engine's group id.
func groupOf(e *Engine, id string) *group {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.groups[id]
}

// parkedIn says how many messages this node holds for g, waiting (keyq).
func parkedIn(g *group) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.kq == nil {
		return -1
	}
	return g.kq.parked
}

// holdFirst makes the group's one member (max_in_flight 1) full: it publishes a message and
// waits for the member to hold it. Messages published then wait for the member's ack.
func holdFirst(t *testing.T, e *Engine, st broker.Stream, topic string) broker.Delivery {
	t.Helper()
	publishAll(t, e, []broker.Draft{{Topic: topic, Key: "first", Payload: []byte("first")}})
	d := nextOn(t, st)
	if string(d.Msg.Payload) != "first" {
		t.Fatalf("first delivery %s", d.Msg.Payload)
	}
	return d
}

// drainInOrder acks held (if any), then each next delivery, and returns the n payloads
// after it in the order they came; each delivery's Priority must be the one its payload
// names ("name/priority").
func drainInOrder(t *testing.T, st broker.Stream, sub broker.Subscription, held broker.Delivery, n int) string {
	t.Helper()
	var got []string
	for range n {
		if held.Msg != nil && sub.Ack([]string{held.Msg.SystemID}) != 0 {
			t.Fatalf("ack of %s skipped", held.Msg.Payload)
		}
		held = nextOn(t, st)
		_, p, _ := strings.Cut(string(held.Msg.Payload), "/")
		if strconv.Itoa(int(held.Msg.Priority)) != p {
			t.Fatalf("%s delivered with priority %d", held.Msg.Payload, held.Msg.Priority)
		}
		got = append(got, string(held.Msg.Payload))
	}
	return strings.Join(got, " ")
}

// Messages of mixed priorities queued while the member is full, or before it joins, go
// highest level first, FIFO within a level, a priority above max_priority counting as
// max_priority; in a group with max_priority 0, in publish order.
func TestPrioritiesServedStrictly(t *testing.T) {
	prios := []uint8{1, 7, 0, 5, 9, 2, 5, 0, 7, 1, 3}
	for _, c := range []struct {
		maxPrio uint8
		before  bool // published before the member joins, else while it is full
	}{{9, false}, {5, false}, {0, false}, {9, true}, {0, true}} {
		name := "max_priority_" + strconv.Itoa(int(c.maxPrio))
		if c.before {
			name += "_before_member"
		}
		t.Run(name, func(t *testing.T) {
			maxPrio := c.maxPrio
			e := newEngine(t, Options{})
			d := broker.Dispatch{MaxPriority: maxPrio}
			o := broker.SubscribeOptions{ID: "p", Group: "p", Patterns: []string{"p"}, MaxInFlight: 1, Dispatch: d}
			var st broker.Stream
			var sub broker.Subscription
			var held broker.Delivery
			if c.before {
				if err := e.Declare(broker.GroupConfig{ID: "p", Name: "p", Patterns: o.Patterns, Dispatch: d}); err != nil {
					t.Fatal(err)
				}
			} else {
				st, sub = joinGroup(t, e, o)
				held = holdFirst(t, e, st, "p")
			}
			var drafts []broker.Draft
			type queued struct {
				name  string
				level uint8
			}
			var want []queued
			for i, p := range prios {
				name := string(rune('a'+i)) + "/" + strconv.Itoa(int(p))
				drafts = append(drafts, broker.Draft{Topic: "p", Payload: []byte(name), Priority: p})
				want = append(want, queued{name, d.Level(p)})
			}
			publishAll(t, e, drafts)
			switch {
			case c.before:
				st, sub = joinGroup(t, e, o)
			case maxPrio > 0:
				eventually(t, "the node to hold every message", func() bool { return parkedIn(groupOf(e, "p")) == len(drafts) })
			}
			slices.SortStableFunc(want, func(a, b queued) int { return int(b.level) - int(a.level) })
			var names []string
			for _, q := range want {
				names = append(names, q.name)
			}
			if got := drainInOrder(t, st, sub, held, len(drafts)); got != strings.Join(names, " ") {
				t.Fatalf("order: %s, want %s", got, strings.Join(names, " "))
			}
			if gi, err := e.Group("p"); err != nil || gi.Dispatch.MaxPriority != maxPrio {
				t.Fatalf("group: %+v %v, want max_priority %d", gi.Dispatch, err, maxPrio)
			}
		})
	}
}

// With ordering "key", a key's high-priority message waits behind its earlier low-priority
// one while other keys' higher ones go first; with fair_by "key", tenants take turns whatever
// their priorities, and priority orders each tenant's own messages.
func TestPriorityPrecedence(t *testing.T) {
	cases := []struct {
		name   string
		d      broker.Dispatch
		drafts []broker.Draft
		want   string
	}{
		{"ordering", broker.Dispatch{Ordering: broker.OrderingKey, MaxPriority: 9}, []broker.Draft{
			{Key: "a", Payload: []byte("a0/0")}, {Key: "a", Payload: []byte("a1/9"), Priority: 9},
			{Key: "b", Payload: []byte("b0/5"), Priority: 5}, {Payload: []byte("u/3"), Priority: 3},
			{Key: "c", Payload: []byte("c0/1"), Priority: 1},
		}, "b0/5 u/3 c0/1 a0/0 a1/9"},
		{"fair_by", broker.Dispatch{FairBy: "key", MaxPriority: 9}, []broker.Draft{
			{Key: "a", Payload: []byte("a0/0")}, {Key: "a", Payload: []byte("a1/9"), Priority: 9},
			{Key: "a", Payload: []byte("a2/0")}, {Key: "a", Payload: []byte("a3/9"), Priority: 9},
			{Key: "b", Payload: []byte("b0/0")}, {Key: "b", Payload: []byte("b1/5"), Priority: 5},
			{Key: "c", Payload: []byte("c0/0")}, {Key: "c", Payload: []byte("c1/0")},
		}, "a1/9 b1/5 c0/0 a3/9 b0/0 c1/0 a0/0 a2/0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, Options{})
			st, sub := joinGroup(t, e, broker.SubscribeOptions{ID: "p", Group: "p", Patterns: []string{"p"}, MaxInFlight: 1, Dispatch: c.d})
			held := holdFirst(t, e, st, "p")
			for i := range c.drafts {
				c.drafts[i].Topic = "p"
			}
			publishAll(t, e, c.drafts)
			eventually(t, "the node to hold every message", func() bool { return parkedIn(groupOf(e, "p")) == len(c.drafts) })
			if got := drainInOrder(t, st, sub, held, len(c.drafts)); got != c.want {
				t.Fatalf("order: %s, want %s", got, c.want)
			}
		})
	}
}

// A member of priority 0 gets nothing while the member of priority 5 has room, the overflow
// once it is full, and everything once it leaves: where JetStream dispatches (prioritized
// pull requests; also of a consumer made before the policy, which the member of priority 5
// updates) and where the node does (max_priority, ordering).
func TestMemberPriority(t *testing.T) {
	for _, c := range []struct {
		name string
		d    broker.Dispatch
		old  bool
	}{{"jetstream", broker.Dispatch{}, false}, {"jetstream_old_consumer", broker.Dispatch{}, true},
		{"max_priority", broker.Dispatch{MaxPriority: 9}, false}, {"ordering", broker.Dispatch{Ordering: broker.OrderingKey}, false}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, Options{})
			o := broker.SubscribeOptions{ID: "p", Group: "p", Patterns: []string{"p"}, MaxInFlight: 10, Dispatch: c.d}
			lowSt, _ := joinGroup(t, e, o) // first: ahead of the other in arrival order
			g := groupOf(e, "p")
			policy := func() jetstream.PriorityPolicy {
				ctx, cancel := e.ctx()
				defer cancel()
				ci, err := e.js.Consumer(ctx, g.stream, g.consumer)
				if err != nil {
					t.Fatal(err)
				}
				return ci.CachedInfo().Config.PriorityPolicy
			}
			if c.old { // as made before member priorities: no priority policy
				e.mu.Lock()
				cc := e.consumerConfig(g)
				cc.PriorityPolicy, cc.PriorityGroups = jetstream.PriorityPolicyNone, nil
				ctx, cancel := e.ctx()
				_, err := e.js.UpdateConsumer(ctx, g.stream, cc)
				cancel()
				g.policy = jetstream.PriorityPolicyNone
				e.mu.Unlock()
				if err != nil || policy() != jetstream.PriorityPolicyNone {
					t.Fatalf("consumer not made old: %v", err)
				}
			}
			o.MaxInFlight, o.Priority = 2, 5
			highSt, high := joinGroup(t, e, o)
			if gi, err := e.Group("p"); err != nil || len(gi.MemberList) != 2 || gi.MemberList[1].Priority != 5 || high.Settings().Priority != 5 {
				t.Fatalf("group: %+v %v", gi.MemberList, err)
			}
			if want := jetstream.PriorityPolicyPrioritized; c.d.Ordering == broker.OrderingNone && policy() != want {
				t.Fatalf("consumer's priority policy %v, want %v", policy(), want)
			}
			// Where members pull for themselves, both pull requests must be waiting in
			// JetStream, or a message coming first would rightly go to the one that is.
			requestsIn := func(n int) func() bool {
				return func() bool {
					if c.d != (broker.Dispatch{}) {
						return true
					}
					ctx, cancel := e.ctx()
					defer cancel()
					ci, err := e.js.Consumer(ctx, g.stream, g.consumer)
					return err == nil && ci.CachedInfo().NumWaiting == n
				}
			}
			eventually(t, "both members' pull requests in JetStream", requestsIn(2))
			publish := func(names ...string) {
				for _, n := range names {
					publishAll(t, e, []broker.Draft{{Topic: "p", Payload: []byte(n)}})
				}
			}
			// expect waits for want on st (the member who), and fails at once if other (the
			// other member) gets anything meanwhile.
			expect := func(who string, st, other broker.Stream, want ...string) map[string]broker.Delivery {
				got := map[string]broker.Delivery{}
				deadline := time.After(20 * time.Second)
				for {
					for _, d := range other.Next(nil, 100, math.MaxInt) {
						if d.Msg != nil {
							t.Fatalf("%s got nothing yet of %v, and the other member got %s", who, want, d.Msg.Payload)
						}
					}
					for _, d := range st.Next(nil, 100, math.MaxInt) {
						if d.Msg != nil {
							got[string(d.Msg.Payload)] = d
						}
					}
					if len(got) >= len(want) {
						break
					}
					select {
					case <-st.Ready():
					case <-other.Ready():
					case <-deadline:
						t.Fatalf("%s got %v, want %v", who, slices.Sorted(maps.Keys(got)), want)
					}
				}
				for _, w := range want {
					if _, ok := got[w]; !ok {
						t.Fatalf("%s got %v, want %v", who, slices.Sorted(maps.Keys(got)), want)
					}
				}
				return got
			}
			publish("m1", "m2")
			held := expect("the priority-5 member", highSt, lowSt, "m1", "m2")
			publish("m3", "m4", "m5") // the priority-5 member is full
			expect("the priority-0 member", lowSt, highSt, "m3", "m4", "m5")
			if high.Ack([]string{held["m1"].Msg.SystemID}) != 0 {
				t.Fatal("ack skipped")
			}
			eventually(t, "the priority-5 member's request for its room in JetStream", requestsIn(2))
			publish("m6")
			expect("the priority-5 member, with room again", highSt, lowSt, "m6")
			high.Close() // what it holds (m2, m6) goes to the other
			publish("m7")
			expect("the priority-0 member, alone", lowSt, highSt, "m2", "m6", "m7")
		})
	}
}

// Message.Priority is stored with the message: delivered as published, by the delayed
// stream too, in a group without priorities; and to a fanout subscription.
func TestPriorityDelivered(t *testing.T) {
	e := newEngine(t, Options{})
	st, _ := joinGroup(t, e, broker.SubscribeOptions{ID: "p", Group: "p", Patterns: []string{"p"}, MaxInFlight: 10})
	fan := e.NewStream(nil)
	defer fan.Close()
	if _, err := fan.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"p"}}); err != nil {
		t.Fatal(err)
	}
	publishAll(t, e, []broker.Draft{{Topic: "p", Payload: []byte("now"), Priority: 4},
		{Topic: "p", Payload: []byte("later"), Priority: 8, DeliverAfter: 50 * time.Millisecond},
		{Topic: "p", Payload: []byte("plain")}})
	got := map[string]uint8{}
	for range 3 {
		d := nextOn(t, st)
		got[string(d.Msg.Payload)] = d.Msg.Priority
	}
	if got["now"] != 4 || got["later"] != 8 || got["plain"] != 0 || len(got) != 3 {
		t.Fatalf("priorities delivered: %v, want now 4, later 8, plain 0", got)
	}
	if d := nextOn(t, fan); string(d.Msg.Payload) != "now" || d.Msg.Priority != 4 {
		t.Fatalf("fanout delivered %s with priority %d, want now with 4", d.Msg.Payload, d.Msg.Priority)
	}
}

// A node whose members all left stops pulling for the group: what is published meanwhile
// waits in JetStream, unseen, and goes to the next member by priority, each message at its
// first attempt. Before, the node's open pull brought each message back as soon as it gave
// it back, and a group of max_deliveries 2 dead-lettered them.
func TestMemberlessNodeStopsPulling(t *testing.T) {
	e := newEngine(t, Options{})
	o, _ := backlogWithoutMembers(t, e)
	st, sub := joinGroup(t, e, o)
	var got []string
	for range 3 {
		d := nextOn(t, st)
		got = append(got, string(d.Msg.Payload)+" attempt "+strconv.Itoa(int(d.Attempt)))
		sub.Ack([]string{d.Msg.SystemID})
	}
	if want := "m/9 attempt 1, m/3 attempt 1, m/0 attempt 1"; strings.Join(got, ", ") != want {
		t.Fatalf("got %s, want %s", strings.Join(got, ", "), want)
	}
}

// A ready lane waits at its head's level: when an older message of its key comes (JetStream
// redelivers it after a failover) or its head is taken out (a purge), the lane moves.
func TestKeyqRelevel(t *testing.T) {
	d := broker.Dispatch{Ordering: broker.OrderingKey, MaxPriority: 9}
	entry := func(key string, seq uint64, p uint8) *kentry {
		return &kentry{msg: &broker.Message{Key: key, Priority: p, Payload: []byte(key + strconv.FormatUint(seq, 10))}, info: ackInfo{sseq: seq}}
	}
	k := newKeyq(d)
	k.add(entry("a", 2, 0))
	k.add(entry("b", 3, 5))
	k.add(entry("a", 1, 9)) // redelivered: a's head now, at level 9
	if e := k.pop(math.MaxInt32); string(e.msg.Payload) != "a1" {
		t.Fatalf("first: %s, want a1 (its lane moved to level 9)", e.msg.Payload)
	}

	k = newKeyq(d)
	x1 := entry("x", 1, 9)
	k.add(x1)
	k.add(entry("x", 2, 0))
	k.add(entry("y", 3, 5))
	k.release(x1) // purged: x's head is x2 now, at level 0
	if e := k.pop(math.MaxInt32); string(e.msg.Payload) != "y3" {
		t.Fatalf("first: %s, want y3 (x's lane moved to level 0)", e.msg.Payload)
	}
}

// BenchmarkKeyqLevels is what a node's queue costs a message (parked, handed out, acked) in
// a window of keyParkMax messages of ten priorities, with and without max_priority: over as
// many keys (ordering), and without keys.
func BenchmarkKeyqLevels(b *testing.B) {
	for _, c := range []struct {
		name string
		d    broker.Dispatch
		keys bool
	}{
		{"keys", broker.Dispatch{Ordering: broker.OrderingKey}, true},
		{"keys_max_priority", broker.Dispatch{Ordering: broker.OrderingKey, MaxPriority: 9}, true},
		{"no_keys", broker.Dispatch{FairBy: "key"}, false},
		{"no_keys_max_priority", broker.Dispatch{MaxPriority: 9}, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			msgs := make([]*broker.Message, keyParkMax)
			for i := range msgs {
				msgs[i] = &broker.Message{Priority: uint8(i * 7 % 10)}
				if c.keys {
					msgs[i].Key = strconv.Itoa(i)
				}
			}
			for b.Loop() {
				k := newKeyq(c.d)
				for i, m := range msgs {
					k.add(&kentry{msg: m, info: ackInfo{sseq: uint64(i + 1)}})
				}
				for range msgs {
					k.release(k.pop(math.MaxInt32))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
		})
	}
}

// In a cluster a node without members keeps its open pull (endPullLocked), which brings
// each message back as soon as the node hands it back: those deliveries, which no member
// saw, are no attempts. A group of max_deliveries 2 dead-letters nothing, and the next
// member gets each message at attempt 1. (One node, told it is in a cluster.)
func TestMemberlessPullInClusterCountsNoAttempts(t *testing.T) {
	e := newEngine(t, Options{})
	e.solo = false // before any group: as a node of a cluster, it keeps a memberless pull open
	o, g := backlogWithoutMembers(t, e)
	eventually(t, "the messages brought back and handed back a few times", func() bool {
		infos, err := e.refreshGroups()
		ci := infos[g.consumer]
		return err == nil && ci != nil && ci.Delivered.Consumer >= 9
	})
	st, sub := joinGroup(t, e, o)
	got := map[string]bool{}
	for range 3 {
		d := nextOn(t, st)
		got[string(d.Msg.Payload)+" attempt "+strconv.Itoa(int(d.Attempt))] = true
		sub.Ack([]string{d.Msg.SystemID})
	}
	for _, w := range []string{"m/9 attempt 1", "m/3 attempt 1", "m/0 attempt 1"} {
		if !got[w] {
			t.Fatalf("got %v, want %s among them", got, w)
		}
	}
	if gs, err := e.Group("p"); err != nil || gs.DeadLettered != 0 {
		t.Fatalf("group: %+v, %v; want nothing dead-lettered", gs.GroupStats, err)
	}
}

// backlogWithoutMembers makes group "p" (max_priority 5, max_deliveries 2), lets its only
// member go, and publishes m/0, m/9 and m/3 (priorities 0, 9, 3) while it has none.
func backlogWithoutMembers(t *testing.T, e *Engine) (broker.SubscribeOptions, *group) {
	t.Helper()
	o := broker.SubscribeOptions{ID: "p", Group: "p", Patterns: []string{"p"}, MaxInFlight: 1, MaxDeliveries: 2, Dispatch: broker.Dispatch{MaxPriority: 5}}
	_, first := joinGroup(t, e, o)
	first.Close()
	g := groupOf(e, "p")
	eventually(t, "the group without members", func() bool { return g.memberCount() == 0 })
	for _, p := range []uint8{0, 9, 3} {
		publishAll(t, e, []broker.Draft{{Topic: "p", Payload: []byte("m/" + strconv.Itoa(int(p))), Priority: p}})
	}
	return o, g
}
