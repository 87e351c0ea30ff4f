package memory

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// Ordering keys and fair dispatch (issue 27) on the fake clock: see keyed.go.

func ordering(o broker.Ordering) func(*broker.SubscribeOptions) {
	return func(so *broker.SubscribeOptions) { so.Dispatch.Ordering = o }
}

func fairBy(by string) func(*broker.SubscribeOptions) {
	return func(so *broker.SubscribeOptions) { so.Dispatch.FairBy = by }
}

// publishKeyed publishes "key:payload" pairs to "j.x", each with its key (a pair without
// ':' has no key), and returns their system_ids.
func (gt *groupTest) publishKeyed(pairs ...string) []string {
	gt.t.Helper()
	ds := make([]broker.Draft, len(pairs))
	for i, p := range pairs {
		key, payload, ok := strings.Cut(p, ":")
		if !ok {
			key, payload = "", p
		}
		ds[i] = broker.Draft{Topic: "j.x", Payload: []byte(payload), Key: key}
	}
	res := make([]broker.PublishResult, len(ds))
	errs := make([]error, len(ds))
	gt.b.PublishBatch(ds, res, errs)
	ids := make([]string, len(ds))
	for i, err := range errs {
		if err != nil {
			gt.t.Fatalf("publish %q: %v", pairs[i], err)
		}
		ids[i] = res[i].SystemID
	}
	return ids
}

// payloads returns the payloads of ds.
func payloads(ds []broker.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Msg.Payload))
	}
	return out
}

func ids(ds []broker.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Msg.SystemID)
	}
	return out
}

// With ordering "key", a key's next message waits until the previous is settled — acked or
// dead-lettered — while other keys go on; a nacked or timed-out message goes first again, and
// messages without a key are not held.
func TestOrderingKeyOneAtATime(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 10, ordering(broker.OrderingKey), maxDeliveries(3))
	gt.publishKeyed("a:a1", "a:a2", "b:b1", "a:a3", "b:b2", "c:c1", "n1", "n2")
	first := next(a)
	want(t, "first", payloads(first), "a1", "b1", "c1", "n1", "n2")
	// Acking a1 lets a2 go; b1 is nacked: it is redelivered before b2, which still waits.
	a.Ack([]string{first[0].Msg.SystemID})
	a.Nack([]string{first[1].Msg.SystemID}, 0, "")
	second := next(a)
	want(t, "after ack a1, nack b1", payloads(second), "a2", "b1")
	if second[1].Attempt != 2 {
		t.Fatalf("b1 attempt %d, want 2", second[1].Attempt)
	}
	// Every deadline passes: each in flight is redelivered (b1 for its last attempt), and
	// a3 and b2 still wait.
	gt.clock.Advance(31 * time.Second)
	third := next(a)
	got := payloads(third)
	slices.Sort(got)
	want(t, "after the deadline", got, "a2", "b1", "c1", "n1", "n2")
	// b1 nacked on its last attempt is dead-lettered, which frees b; acking a2 frees a.
	for _, d := range third {
		switch string(d.Msg.Payload) {
		case "b1":
			a.Nack([]string{d.Msg.SystemID}, 0, "")
		case "a2":
			a.Ack([]string{d.Msg.SystemID})
		}
	}
	want(t, "after b1 dead-lettered and a2 acked", payloads(next(a)), "b2", "a3")
	if st := gt.stats("g"); st.Keys != 3 || st.Queued != 0 || st.DeadLettered != 1 { // a3, b2 and c1 out
		t.Fatalf("stats: keys %d queued %d dead-lettered %d, want 3, 0 and 1", st.Keys, st.Queued, st.DeadLettered)
	}
}

// Ordering "group" is a single active consumer: one message in flight at a time, in publish
// order, whatever the keys and however many members have room; a message whose member left
// goes to another before the next.
func TestOrderingGroupSingleActive(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 5, ordering(broker.OrderingGroup))
	b := gt.member("g", 5)
	gt.publishKeyed("x:1", "y:2", "3", "x:4")
	take := func(what string, p string, attempt uint32) broker.Delivery {
		t.Helper()
		ds := append(next(a), next(b)...)
		if len(ds) != 1 || string(ds[0].Msg.Payload) != p || ds[0].Attempt != attempt {
			t.Fatalf("%s: got %q, want only %s (attempt %d)", what, payloads(ds), p, attempt)
		}
		return ds[0]
	}
	d := take("first", "1", 1)
	d.Sub.Ack(ids([]broker.Delivery{d}))
	d = take("second", "2", 1)
	d.Sub.(*Subscription).Close() // its member leaves with it in flight
	d = take("after its member left", "2", 2)
	d.Sub.Ack(ids([]broker.Delivery{d}))
	d = take("third", "3", 1)
	d.Sub.Ack(ids([]broker.Delivery{d}))
	d = take("fourth", "4", 1)
	d.Sub.Ack(ids([]broker.Delivery{d}))
	gt.settled("g")
}

// Fair dispatch takes turns across tenants in the order they first queued, one message a
// turn: a flood of one tenant's messages queued first does not delay the others behind it.
func TestFairDispatchOrder(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1, fairBy("key"))
	gt.publishKeyed("f:f1", "f:f2", "f:f3", "f:f4", "f:f5", "q1:q1", "q2:q2", "f:f6", "q1:q1b", "none")
	var order []string
	for range 10 {
		ds := next(a)
		if len(ds) != 1 {
			t.Fatalf("got %d deliveries at once, want 1", len(ds))
		}
		order = append(order, string(ds[0].Msg.Payload))
		a.Ack(ids(ds))
	}
	// f1 was handed over at once; then turns go f, q1, q2, "" (the tenant of "none").
	want(t, "order", order, "f1", "f2", "q1", "q2", "none", "f3", "q1b", "f4", "f5", "f6")
	gt.settled("g")
}

// fair_by "header:<name>" takes turns across that header's values; a message without the
// header is tenant "".
func TestFairByHeader(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1, fairBy("header:tenant"))
	for _, m := range []struct{ tenant, p string }{{"acme", "a1"}, {"acme", "a2"}, {"acme", "a3"}, {"bolt", "b1"}, {"", "n1"}, {"bolt", "b2"}} {
		h := map[string]string{}
		if m.tenant != "" {
			h["tenant"] = m.tenant
		}
		if _, err := gt.b.Publish("j.x", []byte(m.p), h); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	for range 6 {
		ds := next(a)
		order = append(order, payloads(ds)...)
		a.Ack(ids(ds))
	}
	want(t, "order", order, "a1", "a2", "b1", "n1", "a3", "b2")
}

// With ordering and fairness both on, fairness picks the tenant and ordering the message:
// a tenant whose every queued message waits behind its key gives its turn away.
func TestOrderingAndFairness(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1, ordering(broker.OrderingKey), fairBy("header:tenant"))
	a.Close() // the group is made; its messages queue until the next member joins
	pub := func(tenant, key, p string) {
		d := []broker.Draft{{Topic: "j.x", Payload: []byte(p), Key: key, Headers: broker.MakeHeaders(map[string]string{"tenant": tenant})}}
		res, errs := make([]broker.PublishResult, 1), make([]error, 1)
		gt.b.PublishBatch(d, res, errs)
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	pub("acme", "k1", "acme-k1-1")
	pub("acme", "k1", "acme-k1-2")
	pub("acme", "k2", "acme-k2-1")
	pub("bolt", "k3", "bolt-k3-1")
	pub("bolt", "k3", "bolt-k3-2")
	a = gt.member("g", 10)
	first := next(a)
	want(t, "first", payloads(first), "acme-k1-1", "bolt-k3-1", "acme-k2-1")
	a.Ack(ids(first))
	want(t, "second", payloads(next(a)), "acme-k1-2", "bolt-k3-2")
}

// The keys a group tracks are charged to its bytes and the broker's budget, and let go of
// with their last message: a burst of distinct keys leaves nothing behind once acked, and a
// bound in bytes refuses a publish that would pass it with the keys counted.
func TestKeysBounded(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1000, ordering(broker.OrderingKey))
	var pairs []string
	for i := range 500 {
		pairs = append(pairs, fmt.Sprintf("key-%d:%d", i, i), fmt.Sprintf("key-%d:%d-2", i, i))
	}
	gt.publishKeyed(pairs...)
	st := gt.stats("g")
	if st.Keys != 500 {
		t.Fatalf("keys %d, want 500", st.Keys)
	}
	var msgs, keys int64 = 0, tenantCost // one tenant, ""
	for _, p := range pairs {
		key, payload, _ := strings.Cut(p, ":")
		msgs += grouping.MessageCost("j.x", key, strings.Repeat("x", idLen), []byte(payload), 0, 0, 1) + groupEntryOverhead
	}
	for i := range 500 {
		keys += laneCost + int64(len(fmt.Sprintf("key-%d", i)))
	}
	if st.Bytes != msgs+keys {
		t.Fatalf("group bytes %d, want %d: %d for the messages and %d for the keys", st.Bytes, msgs+keys, msgs, keys)
	}
	for range 2 {
		a.Ack(ids(next(a)))
	}
	gt.settled("g")
	if st := gt.stats("g"); st.Keys != 0 || gt.group("g").keys.lanes.len() != 0 || len(gt.group("g").keys.tenants) != 0 {
		t.Fatalf("keys left after every message was acked: %+v", st)
	}

	// A group bounded in bytes: distinct keys cost more than one key, so fewer fit.
	fit := func(distinct bool) int {
		gt := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueuedBytes: 64 << 10}})
		gt.member("g", 1, ordering(broker.OrderingKey))
		for i := 0; ; i++ {
			key := "same"
			if distinct {
				key = strings.Repeat("k", 200) + strconv.Itoa(i)
			}
			d := []broker.Draft{{Topic: "j.x", Payload: []byte("p"), Key: key}}
			res, errs := make([]broker.PublishResult, 1), make([]error, 1)
			gt.b.PublishBatch(d, res, errs)
			if errs[0] != nil {
				if !strings.Contains(errs[0].Error(), "max_queued_bytes") {
					t.Fatalf("refused with %v, want the bytes bound", errs[0])
				}
				return i
			}
		}
	}
	same, distinct := fit(false), fit(true)
	if distinct >= same {
		t.Fatalf("%d messages of distinct keys fit, %d of one key: the keys' bytes are not bounded", distinct, same)
	}
}

// In a group with ordering and neither fair_by nor priorities (a lazy keyed queue), messages
// wait in the order they came and a key has a lane only while one of its messages is out or
// waits behind one: a backlog of 10,000 keys costs lanes for what the members hold, and a
// message whose key is busy is set aside on its key's lane, in order, while the others pass.
func TestLazyOrderedLanes(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 2, ordering(broker.OrderingKey))
	g := gt.group("g")
	if !g.keys.lazy {
		t.Fatal("a group with ordering alone is not lazy")
	}
	gt.publishKeyed("k1:1", "k1:2", "k2:1", "k3:1", "k1:3", "k3:2")
	if got := payloads(next(a)); !slices.Equal(got, []string{"1", "1"}) {
		t.Fatalf("first delivered %v, want k1's and k2's first (k1:2 waits behind k1:1)", got)
	}
	st := gt.stats("g")
	if st.Keys != 2 || len(st.Busiest) != 2 || st.Busiest[0].Key != "k1" || st.Busiest[0].Held != 2 {
		t.Fatalf("keys %d, busiest %+v: want k1 (one out, one waiting) and k2; k3 not yet come up", st.Keys, st.Busiest)
	}
	checkKeyed(t, g)
	var order []string
	for range 10 {
		ds := next(a)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			order = append(order, d.Msg.Key+":"+string(d.Msg.Payload))
		}
		a.Ack(ids(ds[:1])) // one at a time: each ack lets the next of some key go
		checkKeyed(t, g)
	}
	for _, key := range []string{"k1", "k3"} {
		var seq []string
		for _, o := range order {
			if k, p, _ := strings.Cut(o, ":"); k == key {
				seq = append(seq, p)
			}
		}
		if !slices.IsSorted(seq) {
			t.Fatalf("%s delivered out of order: %v (all: %v)", key, seq, order)
		}
	}

	// 10,000 keys queued behind members that hold 10: lanes for those 10 (and nothing for
	// the rest but the messages' own bytes).
	gt2 := newGroupTest(t, Options{})
	b := gt2.member("h", 10, ordering(broker.OrderingKey))
	var pairs []string
	for i := range 10_000 {
		pairs = append(pairs, fmt.Sprintf("key-%d:%d", i, i))
	}
	gt2.publishKeyed(pairs...)
	h := gt2.group("h")
	h.mu.Lock()
	lanes, bytes := h.keys.lanes.len(), h.keys.bytes
	h.mu.Unlock()
	if lanes != 10 || bytes > tenantCost+10*(laneCost+int64(len("key-9"))) {
		t.Fatalf("%d lanes costing %d bytes for 10 messages out of 10,000 queued, want 10 lanes", lanes, bytes)
	}
	checkKeyed(t, h)
	b.Ack(ids(next(b)))
	checkKeyed(t, h)

	// drop_oldest drops the first of the arrivals when nothing parked is ready.
	gt3 := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: 3, GroupOverflow: broker.OverflowDropOldest}})
	c := gt3.member("d", 1, ordering(broker.OrderingKey))
	gt3.publishKeyed("k1:1", "k1:2", "k2:1", "k3:1", "k4:1") // k1:1 out, then 3 queued: k4:1 drops k1:2
	if st := gt3.stats("d"); st.Dropped != 1 {
		t.Fatalf("dropped %d, want 1", st.Dropped)
	}
	var got []string
	for range 10 {
		ds := next(c)
		if len(ds) == 0 {
			break
		}
		got = append(got, ds[0].Msg.Key+":"+string(ds[0].Msg.Payload))
		c.Ack(ids(ds))
		checkKeyed(t, gt3.group("d"))
	}
	if want := []string{"k1:1", "k2:1", "k3:1", "k4:1"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v (k1:2, the oldest queued, dropped)", got, want)
	}
}

// A backlog over many keys leaves the tables of lanes and tenants sized for it, and every lane
// made and let go of after it would touch that big table: the tenants' map is made anew once
// it holds a sixteenth of its peak (a Go map never shrinks), the lanes' index shrinks as it
// empties, and the keys stay ordered and their bytes counted across it.
func TestKeyMapsShrinkAfterBacklog(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 100, ordering(broker.OrderingKey), fairBy("key"))
	g := gt.group("g")
	var pairs []string
	for i := range 3000 {
		pairs = append(pairs, fmt.Sprintf("key-%d:%d", i, i))
	}
	gt.publishKeyed(pairs...)
	gt.publishKeyed("key-0:0-2", "key-2999:2999-2") // behind their keys' first, across the shrink
	g.mu.Lock()
	tenants := reflect.ValueOf(g.keys.tenants).Pointer()
	lanes, tenantsPeak := len(g.keys.lanes.slots), g.keys.tenantsPeak
	g.mu.Unlock()
	if lanes < 6000 || tenantsPeak != 3000 {
		t.Fatalf("%d slots for 3000 lanes (want at least 6000) and a peak of %d tenants (want 3000)", lanes, tenantsPeak)
	}
	acked := map[string]bool{}
	for range 100 {
		ds := next(a)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			if p := string(d.Msg.Payload); strings.HasSuffix(p, "-2") && !acked[strings.TrimSuffix(p, "-2")] {
				t.Fatalf("%s delivered before its key's first was acked", p)
			}
		}
		a.Ack(ids(ds))
		for _, p := range payloads(ds) {
			acked[p] = true
		}
		checkKeyed(t, g)
	}
	if len(acked) != 3002 {
		t.Fatalf("%d messages acked, want 3002", len(acked))
	}
	gt.settled("g")
	g.mu.Lock()
	defer g.mu.Unlock()
	if reflect.ValueOf(g.keys.tenants).Pointer() == tenants {
		t.Fatalf("the map of tenants is the one sized for 3,000 keys: not made anew")
	}
	if n := len(g.keys.lanes.slots); n > laneIndexKeep || g.keys.tenantsPeak > shrinkMin {
		t.Fatalf("%d slots of lanes (want at most %d) and a peak of %d tenants (want at most %d) after the backlog drained", n, laneIndexKeep, g.keys.tenantsPeak, shrinkMin)
	}
}

// TestOrderedKeysUnderChurn is the test: 1,000 keys × 100 messages through 8
// members, members killed at random and replaced. Every message is delivered until acked,
// a key never has two messages in flight at once, and each key's messages are acked in
// publish order.
func TestOrderedKeysUnderChurn(t *testing.T) {
	keys, perKey := 1000, 100
	if testing.Short() {
		keys = 100
	}
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: keys * perKey}})
	rng := rand.New(rand.NewPCG(27, 1))
	members := make([]*Subscription, 8)
	join := func(i int) { members[i] = gt.member("g", 1+rng.IntN(20), ordering(broker.OrderingKey)) }
	for i := range members {
		join(i)
	}
	// Published a few keys at a time while the members work, so that a key's next message
	// often arrives while its previous one is in flight.
	nextSeq := make([]int, keys)
	open := make([]int, keys) // the keys with messages left to publish
	for k := range open {
		open[k] = k
	}
	publishSome := func() {
		var pairs []string
		for range min(50, len(open)) {
			i := rng.IntN(len(open))
			k := open[i]
			pairs = append(pairs, fmt.Sprintf("k%d:%d", k, nextSeq[k]))
			if nextSeq[k]++; nextSeq[k] == perKey {
				open[i] = open[len(open)-1]
				open = open[:len(open)-1]
			}
		}
		if len(pairs) > 0 {
			gt.publishKeyed(pairs...)
		}
	}
	acked := make(map[string]int, keys) // key → last sequence acked
	inFlight := make(map[string]string) // key → system_id in flight
	held := make(map[*Subscription][]broker.Delivery)
	total, kills := 0, 0
	for total < keys*perKey {
		publishSome()
		progress := len(open) > 0
		for i, s := range members {
			for _, d := range next(s) {
				progress = true
				k := d.Msg.Key
				if other, ok := inFlight[k]; ok && other != d.Msg.SystemID {
					t.Fatalf("key %s: %s delivered while %s is in flight", k, d.Msg.Payload, other)
				}
				inFlight[k] = d.Msg.SystemID
				held[s] = append(held[s], d)
			}
			// Each member settles a random part of what it holds, in the order it got them.
			hs := held[s]
			n := rng.IntN(len(hs) + 1)
			for _, d := range hs[:n] {
				seq, _ := strconv.Atoi(string(d.Msg.Payload))
				if last, ok := acked[d.Msg.Key]; ok && seq != last+1 || !ok && seq != 0 {
					t.Fatalf("key %s: message %d acked after %d", d.Msg.Key, seq, acked[d.Msg.Key])
				}
				acked[d.Msg.Key] = seq
				delete(inFlight, d.Msg.Key)
				total++
			}
			if n > 0 {
				s.Ack(ids(hs[:n]))
				progress = true
			}
			held[s] = hs[n:]
			if rng.IntN(50) == 0 { // killed: what it holds goes to the others
				for _, d := range held[s] {
					delete(inFlight, d.Msg.Key)
				}
				held[s] = nil
				s.Close()
				kills++
				join(i)
				progress = true
			}
		}
		if !progress && len(inFlight) == 0 {
			t.Fatalf("stuck after %d acks: %+v", total, gt.stats("g"))
		}
	}
	for k := range keys {
		if acked["k"+strconv.Itoa(k)] != perKey-1 {
			t.Fatalf("key k%d: last acked %d, want %d", k, acked["k"+strconv.Itoa(k)], perKey-1)
		}
	}
	if kills == 0 {
		t.Fatal("no member was killed: the test proves nothing about leaving")
	}
	t.Logf("%d messages of %d keys, %d members killed", total, keys, kills)
	gt.settled("g")
}

// floodRun simulates a group of 4 members, each holding up to room messages and done with
// each work ticks after it got it (one tick = 1ms of the fake clock), fed by 99 quiet keys
// (one message a tick between them) and, with flood, one key publishing 10 a tick (more than
// the members can take), for 2,000 ticks. It returns the quiet keys' p99 latency from publish
// to receipt, in ticks (a message received in the tick after its publish took 1; one never
// received counts as received at the end).
func floodRun(t *testing.T, seed uint64, room, work int, flood bool, fair string) int {
	gt := newGroupTest(t, Options{})
	rng := rand.New(rand.NewPCG(seed, 7))
	type job struct {
		id  string
		due int
	}
	var members []*Subscription
	jobs := map[*Subscription][]job{}
	for range 4 {
		members = append(members, gt.member("g", room, fairBy(fair)))
	}
	quiet := rng.Perm(99)
	publishedAt := make(map[string]int)
	var lat []int
	seq := 0
	for tick := range 2000 {
		for _, s := range members {
			for _, d := range next(s) {
				if at, ok := publishedAt[string(d.Msg.Payload)]; ok {
					lat = append(lat, tick-at)
					delete(publishedAt, string(d.Msg.Payload))
				}
				jobs[s] = append(jobs[s], job{d.Msg.SystemID, tick + work - 1})
			}
			var done []string
			for len(jobs[s]) > 0 && jobs[s][0].due <= tick {
				done = append(done, jobs[s][0].id)
				jobs[s] = jobs[s][1:]
			}
			s.Ack(done)
		}
		var pairs []string
		q := fmt.Sprintf("q%d:%d", quiet[tick%99], seq)
		seq++
		publishedAt[q[strings.IndexByte(q, ':')+1:]] = tick
		pairs = append(pairs, q)
		if flood {
			for range 10 {
				pairs = append(pairs, fmt.Sprintf("flood:f%d", seq))
				seq++
			}
		}
		gt.publishKeyed(pairs...)
		gt.clock.Advance(time.Millisecond)
	}
	for _, at := range publishedAt { // never received: at least this late
		lat = append(lat, 2000-at)
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100]
}

// A key that floods the group beside 99 quiet ones: with fair dispatch the quiet keys' p99
// latency stays within 2× of a run without the flood (median of 3 runs each), where plain
// FIFO lets it grow with the flood's backlog. Members that hold one message each and take a
// tick for it, and members that hold 8 and take 5 ticks each (there the quiet keys would
// wait for the flood's next ack but for the room kept for them: keyed.pop).
func TestFloodingKeyFairness(t *testing.T) {
	for _, c := range []struct{ room, work int }{{1, 1}, {8, 5}} {
		median := func(flood bool, fair string) int {
			var p99s []int
			for seed := range uint64(3) {
				p99s = append(p99s, floodRun(t, seed, c.room, c.work, flood, fair))
			}
			slices.Sort(p99s)
			return p99s[1]
		}
		calm, fair, fifo := median(false, "key"), median(true, "key"), median(true, "")
		t.Logf("members of room %d, %d ticks a message: quiet keys' p99 in ticks: %d without the flood, %d with it and fair_by key, %d with it and FIFO",
			c.room, c.work, calm, fair, fifo)
		if fair > 2*max(calm, 1) {
			t.Errorf("room %d, work %d: with fair dispatch the quiet keys' p99 is %d ticks, over 2× the %d without the flood", c.room, c.work, fair, calm)
		}
		if fifo <= 10*max(calm, 1) {
			t.Errorf("room %d, work %d: without fair dispatch the quiet keys' p99 is %d ticks, within 10× the %d without the flood: the flood does not flood", c.room, c.work, fifo, calm)
		}
	}
}

// BenchmarkGroupKeyed is W2 inside the engine: frames of 128 messages of 256 bytes to a group
// of 4 members (max_in_flight 256) that ack what they get, plain and with ordering or
// fairness over 10,000 keys (issue 27: ordering on must keep 0.8 of plain).
func BenchmarkGroupKeyed(b *testing.B) {
	for _, mode := range []struct {
		name string
		d    broker.Dispatch
		ttl  time.Duration
	}{{"plain", broker.Dispatch{}, 0}, {"ordering-key", broker.Dispatch{Ordering: broker.OrderingKey}, 0}, {"fair-key", broker.Dispatch{FairBy: "key"}, 0},
		{"ordering-and-fair", broker.Dispatch{Ordering: broker.OrderingKey, FairBy: "key"}, 0},
		{"plain-ttl", broker.Dispatch{}, time.Minute}} { // issue 28: W2 with TTLs set
		for _, deep := range []bool{false, true} {
			name := mode.name
			if deep {
				name += "-deep"
			}
			b.Run(name, func(b *testing.B) {
				br := newTestBroker(b, Options{})
				var members []*Subscription
				for range 4 {
					s, err := br.Subscribe(broker.SubscribeOptions{ID: "w2", Group: "w2", Patterns: []string{"bench.w2"}, Mode: broker.Balanced, MaxInFlight: 256, Dispatch: mode.d})
					if err != nil {
						b.Fatal(err)
					}
					members = append(members, s)
				}
				keys := make([]string, 10_000)
				for i := range keys {
					keys[i] = "key-" + strconv.Itoa(i)
				}
				frame := make([]broker.Draft, 128)
				res := make([]broker.PublishResult, len(frame))
				errs := make([]error, len(frame))
				payload := make([]byte, 256)
				buf := make([]broker.Delivery, 0, 256)
				ids := make([]string, 0, 256)
				k := 0
				if deep { // a backlog of 60,000 queued behind the members' room, as a group that cannot keep up
					for range 60_000 / len(frame) {
						for i := range frame {
							frame[i] = broker.Draft{Topic: "bench.w2", Payload: payload, Key: keys[k%len(keys)], TTL: mode.ttl}
							k++
						}
						br.PublishBatch(frame, res, errs)
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					for i := range frame {
						frame[i] = broker.Draft{Topic: "bench.w2", Payload: payload, Key: keys[k%len(keys)], TTL: mode.ttl}
						k++
					}
					br.PublishBatch(frame, res, errs)
					for _, s := range members {
						buf = s.Next(buf[:0], 256, 1<<20)
						ids = ids[:0]
						for _, d := range buf {
							ids = append(ids, d.Msg.SystemID)
						}
						s.Ack(ids)
					}
				}
				b.ReportMetric(float64(b.N*len(frame))/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// A dead letter keeps its key: published to the dead-letter topic with it, kept with it, and
// replayed with it, so that an ordered group's replay is ordered too.
func TestDeadLetterKeepsKey(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 1, ordering(broker.OrderingKey), maxDeliveries(1))
	dlq := gt.fanout("dlq.g")
	gt.publishKeyed("acct-1:p")
	ds := next(a)
	a.Nack(ids(ds), 0, "bad")
	dead := next(dlq)
	if len(dead) != 1 || dead[0].Msg.Key != "acct-1" {
		t.Fatalf("dead letter %v, want one with key acct-1", payloads(dead))
	}
	kept, _, err := gt.b.DeadLetters("g", "", 0)
	if err != nil || len(kept) != 1 || kept[0].Key != "acct-1" {
		t.Fatalf("kept %+v %v, want one with key acct-1", kept, err)
	}
	if _, err := gt.b.ReplayDeadLetters("g", nil); err != nil {
		t.Fatal(err)
	}
	re := next(a)
	if len(re) != 1 || re[0].Msg.Key != "acct-1" || string(re[0].Msg.Payload) != "p" {
		t.Fatalf("replayed %v, want p with key acct-1", payloads(re))
	}
}
