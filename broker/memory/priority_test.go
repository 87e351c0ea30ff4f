package memory

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// Message and member priorities (issue 29) on the fake clock: see priority.go.

func maxPriority(n uint8) func(*broker.SubscribeOptions) {
	return func(so *broker.SubscribeOptions) { so.Dispatch.MaxPriority = n }
}

func memberPriority(p uint8) func(*broker.SubscribeOptions) {
	return func(so *broker.SubscribeOptions) { so.Priority = p }
}

// publishPrio publishes "key:payload@priority" triples to "j.x" (no ':': no key; no '@':
// priority 0).
func (gt *groupTest) publishPrio(specs ...string) {
	gt.t.Helper()
	ds := make([]broker.Draft, len(specs))
	for i, s := range specs {
		s, ps, _ := strings.Cut(s, "@")
		key, payload, ok := strings.Cut(s, ":")
		if !ok {
			key, payload = "", s
		}
		var p int
		if ps != "" {
			var err error
			if p, err = strconv.Atoi(ps); err != nil {
				gt.t.Fatal(err)
			}
		}
		ds[i] = broker.Draft{Topic: "j.x", Payload: []byte(payload), Key: key, Priority: uint8(p)}
	}
	res := make([]broker.PublishResult, len(ds))
	errs := make([]error, len(ds))
	gt.b.PublishBatch(ds, res, errs)
	for i, err := range errs {
		if err != nil {
			gt.t.Fatalf("publish %q: %v", specs[i], err)
		}
	}
}

// queueFor makes group "g" with o, closes its first member so that what is published next
// waits in its queue, and returns a function that opens a member of max_in_flight room and
// returns what it was handed at once, in order.
func (gt *groupTest) queueFor(o ...func(*broker.SubscribeOptions)) func(room int) []string {
	gt.t.Helper()
	gt.member("g", 1, o...).Close()
	return func(room int) []string {
		gt.t.Helper()
		return payloads(next(gt.member("g", room, o...)))
	}
}

// A group with max_priority hands out the highest level first, FIFO within a level; a
// priority above max_priority counts as max_priority; a nack puts a message back at the head
// of its own level. A group without max_priority delivers in publish order.
func TestPriorityStrict(t *testing.T) {
	gt := newGroupTest(t, Options{})
	join := gt.queueFor(maxPriority(5))
	gt.publishPrio("a@0", "b@3", "c@9", "d@5", "e@0", "f@3", "g@1")
	want(t, "by priority", join(100), "c", "d", "b", "f", "g", "a", "e")

	// One at a time, with acks and a nack in between: b, nacked, goes before f again.
	gt2 := newGroupTest(t, Options{})
	gt2.member("g", 1, maxPriority(5)).Close()
	gt2.publishPrio("a@0", "b@3", "c@0", "f@3")
	m := gt2.member("g", 1, maxPriority(5))
	d := next(m)
	want(t, "first", payloads(d), "b")
	if d[0].Msg.Priority != 3 {
		t.Fatalf("message b delivered with priority %d, want 3", d[0].Msg.Priority)
	}
	m.Nack([]string{d[0].Msg.SystemID}, 0, "")
	d = next(m)
	want(t, "after the nack", payloads(d), "b")
	m.Ack([]string{d[0].Msg.SystemID})
	for _, w := range []string{"f", "a", "c"} {
		d = next(m)
		want(t, "next", payloads(d), w)
		m.Ack([]string{d[0].Msg.SystemID})
	}

	// Without max_priority: publish order, whatever the priorities.
	gt3 := newGroupTest(t, Options{})
	join3 := gt3.queueFor()
	gt3.publishPrio("a@0", "b@9", "c@3")
	want(t, "fifo", join3(100), "a", "b", "c")
}

// Precedence: an ordering key first (a message never overtakes an earlier one of its key,
// whatever their priorities), then fair_by's turns (a tenant's high priority does not take
// another tenant's turn), then priority within the turn.
func TestPriorityPrecedence(t *testing.T) {
	gt := newGroupTest(t, Options{})
	gt.member("g", 1, maxPriority(9), ordering(broker.OrderingKey)).Close()
	gt.publishPrio("k:k-low@0", "k:k-high@9", "j:j-low@0", "m:m-high@9", "free-mid@4")
	a := gt.member("g", 100, maxPriority(9), ordering(broker.OrderingKey))
	d := next(a)
	want(t, "ready heads by priority; k-high waits behind k-low", payloads(d), "m-high", "free-mid", "k-low", "j-low")
	a.Ack([]string{d[2].Msg.SystemID}) // k-low: its key's next may go
	want(t, "after k-low's ack", payloads(next(a)), "k-high")

	gt2 := newGroupTest(t, Options{})
	join2 := gt2.queueFor(maxPriority(9), fairBy("key"))
	gt2.publishPrio("A:a1@9", "A:a2@9", "A:a3@9", "B:b1@0", "B:b2@0", "A:a-low@0")
	want(t, "tenants take turns; within A's turn, its highest first", join2(100), "a1", "b1", "a2", "b2", "a3", "a-low")

	gt3 := newGroupTest(t, Options{})
	join3 := gt3.queueFor(maxPriority(9), fairBy("key"))
	gt3.publishPrio("A:x@0", "A:y@9", "B:z@0")
	want(t, "A's turn takes its priority 9 first", join3(100), "y", "z", "x")
}

// A member of a lower priority gets work only while every higher one is full or gone;
// members of one priority share round-robin.
func TestMemberPriority(t *testing.T) {
	gt := newGroupTest(t, Options{})
	hi := gt.member("g", 2, memberPriority(5))
	hi2 := gt.member("g", 2, memberPriority(5))
	lo := gt.member("g", 10)
	gt.publish("m1", "m2")
	m1 := next(hi)
	want(t, "hi", payloads(m1), "m1")
	want(t, "hi2", payloads(next(hi2)), "m2")
	want(t, "lo while the others have room", payloads(next(lo)))
	gt.publish("m3", "m4", "m5", "m6")
	want(t, "hi", payloads(next(hi)), "m3")
	want(t, "hi2", payloads(next(hi2)), "m4")
	want(t, "lo once the others are full", payloads(next(lo)), "m5", "m6")

	gt.publish("m7")
	want(t, "lo while hi and hi2 are full", payloads(next(lo)), "m7")
	want(t, "hi full", payloads(next(hi)))
	// Room back on hi: the next message is its.
	hi.Ack([]string{m1[0].Msg.SystemID})
	gt.publish("m8")
	want(t, "hi once it has room again", payloads(next(hi)), "m8")
	hi.Close() // m3 and m8 go to the others: hi2 is full, so lo takes them
	want(t, "lo after hi left", payloads(next(lo)), "m3", "m8")
	want(t, "hi2 full", payloads(next(hi2)))
}

// The group reports each member's priority.
func TestMemberPriorityListed(t *testing.T) {
	gt := newGroupTest(t, Options{})
	gt.member("g", 1, memberPriority(7))
	gi, err := gt.b.Group("g")
	if err != nil {
		t.Fatal(err)
	}
	if len(gi.MemberList) != 1 || gi.MemberList[0].Priority != 7 {
		t.Fatalf("members %+v, want one of priority 7", gi.MemberList)
	}
}

// A full group with overflow "drop_oldest" lets go of the oldest message of its lowest
// priority first, in a group with priorities.
func TestPriorityDropOldest(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: 3, GroupOverflow: broker.OverflowDropOldest}})
	join := gt.queueFor(maxPriority(9))
	gt.publishPrio("a@9", "b@0", "c@5", "d@0", "e@1", "f@7")
	want(t, "kept", join(100), "a", "f", "c")
	if st := gt.stats("g"); st.Dropped != 3 {
		t.Fatalf("dropped %d, want 3", st.Dropped)
	}
}

// In a keyed group with priorities, drop_oldest drops the oldest message of the lowest level
// of the tenant that holds the most, whether it waits in an ordered lane or not.
func TestPriorityDropOldestKeyed(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: 3, GroupOverflow: broker.OverflowDropOldest}})
	join := gt.queueFor(maxPriority(9), ordering(broker.OrderingKey))
	gt.publishPrio("k:a@9", "free-b@5", "j:c@0", "m:d@7")
	want(t, "kept", join(100), "a", "d", "free-b")
}
