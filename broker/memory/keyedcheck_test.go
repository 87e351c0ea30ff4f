package memory

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// checkKeyed checks what a keyed group's bookkeeping says against what it holds: the lanes'
// queued counts, the busy lanes (one message out each, no more), the lanes in turn, what each
// tenant holds, and the bytes charged.
func checkKeyed(t *testing.T, g *group) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys
	queued := 0
	var keysBytes int64
	lanes := map[*lane]bool{}
	checkLane := func(l *lane) {
		lanes[l] = true
		keysBytes += laneCost + int64(len(l.key))
		n := 0
		for e := range l.q.all() {
			if !e.settled {
				n++
				if e.out {
					t.Fatalf("lane %q: a queued message is marked out", l.key)
				}
			}
		}
		if n != l.queued {
			t.Fatalf("lane %q counts %d queued, holds %d", l.key, l.queued, n)
		}
		queued += n
		if n > 0 && !l.out && !l.inReady {
			t.Fatalf("lane %q has %d queued, is not busy and not in turn", l.key, n)
		}
	}
	for l := range k.lanes.all() {
		checkLane(l)
	}
	// A lazy keyed queue's arrivals: queued, not parked on a lane (nor marked out).
	arrived := 0
	for i := range k.arrivals.len() {
		if e := k.arrivals.peek(i); !e.settled {
			arrived++
			if e.out || e.ol != nil {
				t.Fatalf("an arrival is marked out or parked")
			}
		}
	}
	if arrived > 0 && !k.lazy {
		t.Fatalf("%d arrivals in a keyed queue that is not lazy", arrived)
	}
	queued += arrived
	heldBy := map[*tenant]int{}
	for name, tn := range k.tenants {
		keysBytes += tenantCost + int64(len(name))
		tn.eachFree(checkLane)
		inTurn := false
		tn.ready.levels(func(r *ring[*lane]) {
			for i := range r.len() {
				l := r.peek(i)
				inTurn = inTurn || l.queued > 0
				if !l.inReady {
					t.Fatalf("tenant %q: a lane in turn is not marked so", name)
				}
			}
		})
		if inTurn && !tn.inReady {
			t.Fatalf("tenant %q has lanes in turn and is not in turn itself", name)
		}
	}
	if queued != g.queued {
		t.Fatalf("the lanes hold %d queued, the group counts %d", queued, g.queued)
	}
	if keysBytes != k.bytes {
		t.Fatalf("lanes and tenants cost %d, the keyed queue counts %d", keysBytes, k.bytes)
	}
	// What is out: in flight at a member, or delayed.
	out := map[string]int{}
	held := queued
	var bytes int64 = k.bytes
	count := func(e *entry) {
		if okey, ordered := g.dispatch.OrderKey(e.msg.Key); ordered {
			out[okey]++
			if !e.out {
				t.Fatalf("key %q: a message out is not marked so", okey)
			}
		}
	}
	flying := map[*tenant]int{}
	for _, m := range g.members {
		for _, e := range m.owned {
			if !e.flying {
				t.Fatalf("a message at a member is not marked flying")
			}
			flying[e.tn]++
			count(e)
			held++
			heldBy[e.tn]++
			bytes += e.msg.cost + groupEntryOverhead
		}
	}
	for _, e := range g.delayed {
		if !e.settled {
			count(e)
			held++
			heldBy[e.tn]++
			bytes += e.msg.cost + groupEntryOverhead
		}
	}
	for l := range lanes {
		for e := range l.q.all() {
			if !e.settled {
				heldBy[e.tn]++
				bytes += e.msg.cost + groupEntryOverhead
			}
		}
	}
	for i := range k.arrivals.len() {
		if e := k.arrivals.peek(i); !e.settled {
			heldBy[e.tn]++
			bytes += e.msg.cost + groupEntryOverhead
		}
	}
	for key, n := range out {
		if n > 1 {
			t.Fatalf("key %q has %d messages out", key, n)
		}
		if l := k.lanes.get(key, k.lanes.hash(key)); l == nil || !l.out {
			t.Fatalf("key %q has a message out and its lane is not busy", key)
		}
	}
	for l := range k.lanes.all() {
		if key := l.key; l.out && out[key] == 0 {
			t.Fatalf("lane %q is busy with nothing out", key)
		}
	}
	if held != k.held {
		t.Fatalf("the group holds %d, the keyed queue counts %d", held, k.held)
	}
	total := 0
	for _, n := range flying {
		total += n
	}
	if total != k.flying || k.quietFlying < 0 || k.quietFlying > k.flying {
		t.Fatalf("%d messages at members, the keyed queue counts %d (%d quiet)", total, k.flying, k.quietFlying)
	}
	for tn := range heldBy {
		if tn != nil && tn.flying != flying[tn] {
			t.Fatalf("tenant %q counts %d at members, has %d", tn.name, tn.flying, flying[tn])
		}
	}
	for tn, n := range heldBy {
		if tn == nil || tn.held != n || k.tenants[tn.name] != tn {
			t.Fatalf("a tenant holds %d messages; its count or its entry is wrong (%+v)", n, tn)
		}
	}
	if bytes != g.bytes {
		t.Fatalf("the group holds %d bytes, counts %d", bytes, g.bytes)
	}
}

// TestKeyedInvariants drives keyed groups of every kind through random publishes, members
// joining and leaving, acks, nacks with and without delays, deadlines passing, purges and
// redefinitions, and checks their bookkeeping after every step, then that acking everything
// leaves nothing behind.
func TestKeyedInvariants(t *testing.T) {
	for _, d := range []broker.Dispatch{{Ordering: broker.OrderingKey}, {Ordering: broker.OrderingGroup}, {FairBy: "key"},
		{FairBy: "header:tenant"}, {Ordering: broker.OrderingKey, FairBy: "key"}, {Ordering: broker.OrderingKey, FairBy: "header:tenant"},
		{Ordering: broker.OrderingKey, MaxPriority: 3}, {FairBy: "header:tenant", MaxPriority: 9}, {Ordering: broker.OrderingKey, FairBy: "key", MaxPriority: 2}} {
		t.Run(fmt.Sprintf("%s-%s-%d", d.Ordering, d.FairBy, d.MaxPriority), func(t *testing.T) {
			for seed := range uint64(20) {
				keyedRun(t, d, seed)
			}
		})
	}
}

func keyedRun(t *testing.T, d broker.Dispatch, seed uint64) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{AckDeadline: time.Second}})
	rng := rand.New(rand.NewPCG(seed, 27))
	opts := func(so *broker.SubscribeOptions) { so.Dispatch = d }
	var members []*Subscription
	held := map[*Subscription][]broker.Delivery{}
	join := func() { members = append(members, gt.member("g", 1+rng.IntN(4), opts)) }
	join()
	g := gt.group("g")
	seq := 0
	for step := range 300 {
		switch op := rng.IntN(10); {
		case op < 4:
			n := 1 + rng.IntN(5)
			ds := make([]broker.Draft, n)
			for i := range ds {
				key := ""
				if rng.IntN(5) > 0 {
					key = "k" + strconv.Itoa(rng.IntN(6))
				}
				ds[i] = broker.Draft{Topic: "j.x", Payload: []byte(strconv.Itoa(seq)), Key: key, Priority: uint8(rng.IntN(5)),
					Headers: broker.MakeHeaders(map[string]string{"tenant": "t" + strconv.Itoa(rng.IntN(3))})}
				seq++
			}
			res, errs := make([]broker.PublishResult, n), make([]error, n)
			gt.b.PublishBatch(ds, res, errs)
		case op < 6 && len(members) > 0:
			s := members[rng.IntN(len(members))]
			held[s] = append(held[s], next(s)...)
			hs := held[s]
			if len(hs) == 0 {
				break
			}
			i := rng.IntN(len(hs))
			switch rng.IntN(3) {
			case 0:
				s.Ack(ids(hs[i : i+1]))
			case 1:
				s.Nack(ids(hs[i:i+1]), 0, "")
			default:
				s.Nack(ids(hs[i:i+1]), time.Duration(rng.IntN(3))*500*time.Millisecond, "")
			}
			held[s] = append(hs[:i:i], hs[i+1:]...)
		case op == 6 && len(members) > 0:
			i := rng.IntN(len(members))
			members[i].Close()
			delete(held, members[i])
			members = append(members[:i], members[i+1:]...)
		case op == 7 && len(members) < 4:
			join()
		case op == 8:
			gt.clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		case op == 9 && rng.IntN(10) == 0:
			g.purge()
		}
		checkKeyed(t, g)
		if t.Failed() {
			t.Fatalf("seed %d, step %d", seed, step)
		}
	}
	// Ack everything, whoever holds it, until the group is empty.
	if len(members) == 0 {
		join()
	}
	for range 10_000 {
		gt.clock.Advance(2 * time.Second) // delays end
		for _, s := range members {
			s.Ack(ids(next(s)))
			held[s] = nil
		}
		if st := gt.stats("g"); st.Queued+st.InFlight+st.Delayed == 0 {
			break
		}
	}
	checkKeyed(t, g)
	gt.settled("g")
	if g.keys.lanes.len() != 0 || len(g.keys.tenants) != 0 || g.keys.bytes != 0 {
		t.Fatalf("seed %d: %d lanes and %d tenants left", seed, g.keys.lanes.len(), len(g.keys.tenants))
	}
}
