package memory

import (
	"cmp"
	"iter"
	"slices"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// keyed is the queue of a consumer group with ordering or fair_by (broker.Dispatch.Keyed).
// Queued messages wait in lanes: a lane per order key (ordering), whose head alone may be
// out (in flight, delayed, or with the OnRedeliver hook) at a time, and per tenant a free
// lane for its messages that are not ordered. Lanes belong to tenants (fair_by's key; one
// tenant "" without fairness), and dispatch takes turns: the next tenant with a ready lane,
// then that tenant's next ready lane, then the head of that lane. So a tenant that floods
// gets one turn in N, and a key whose message is out holds back only its own messages.
//
// Lanes and tenants exist only while they hold something (a queued message, one out, or, for
// a tenant, any message the group holds), so there are never more of them than messages
// held; each is charged to the group's bytes and the broker's budget (laneCost, tenantCost).
// A key's messages count for the tenant of the first one queued while the key has a lane.
// Keys that come one message at a time (W2 over 10,000 keys) have a lane made and let go of
// per message, from the spares; keeping an emptied lane for its key's return was tried and
// cost more than it saved.
//
// A group with ordering and neither fair_by nor priorities has one tenant and no turns to
// take, and its queue is lazy: messages wait in arrivals, in the order they came, as in a
// group without keys, and pop takes the first whose key has no lane, making one (out) for
// it; one whose key has a lane (a message of it out, or waiting behind one) is parked on that
// lane on the way, and lanes with parked messages ready go before arrivals (theirs are the
// older). So a key has a lane only while it holds a message back, lanes number at most what
// the members hold plus what waits behind them, and a publish costs no lookup at all. See
// RATIONALE.md, "Ordering keys and fair dispatch".
type keyed struct {
	d       broker.Dispatch
	lanes   laneIndex          // ordered lanes, by order key
	tenants map[string]*tenant // by tenant
	ready   ring[*tenant]      // tenants with a ready lane, in turn
	held    int                // messages the group holds, over every tenant
	// flying is how many of them are at members, quietFlying how many of those were handed
	// out while their tenant was not noisy (pop).
	flying, quietFlying int
	bytes               int64    // what its lanes and tenants cost
	noisy               []string // tenants that became noisy since the group last logged (logNoisy)
	// Lanes and tenants let go of, for reuse: a key usually has a lane for a message or two
	// (W2 with 10,000 keys made and dropped one per message), and a spare costs no bytes.
	spareLanes   []*lane
	spareTenants []*tenant
	// The most entries tenants has had since it was made (shrunk): a Go map never shrinks,
	// and after a backlog over many tenants drains, a tenant made and let go of per message
	// probed a map sized for all of them and full of deleted slots (lanes, which churn the
	// most, are in a laneIndex, which shrinks by itself and leaves no deleted slots).
	tenantsPeak int
	last        *tenant // the tenant tenantFor found or made last: most messages are of it
	// lazy is set in a group with ordering and neither fair_by nor priorities. Its messages
	// queue in arrivals, in the order they came, and a key has a lane only while one of its
	// messages is out or waits behind one: a message is parked on its key's lane when it
	// comes up in arrivals and finds one. See RATIONALE.md, "Ordering keys and fair
	// dispatch".
	lazy     bool
	arrivals ring[*entry]
}

// maxSpares bounds the spare lanes and tenants kept.
const maxSpares = 256

// A map of lanes or tenants is made anew, sized for what it holds, once that is under
// 1/shrinkRatio of its peak, if the peak was over shrinkMin (a small map is cheap as it is):
// the copy costs a walk of the old map, paid for by the 15/16 of its peak let go of since.
const (
	shrinkRatio = 16
	shrinkMin   = 1024
)

type tenant struct {
	name  string
	home  *keyed         // the keyed queue it was made in, as for a lane
	ready leveled[*lane] // its ready lanes, in turn, by the priority level of their heads
	// free is its messages without an order, of priority level 0; freeHi those of levels
	// 1 to 9 (freeHi[l-1]), made on the first.
	free    *lane
	freeHi  *[grouping.MaxPriority]*lane
	inReady bool // in keyed.ready
	lanes   int  // lanes it has, free included
	held    int  // its messages the group holds: queued, out, in flight
	flying  int  // its messages handed to members and not back
	noisy   bool
}

type lane struct {
	key     string // the order key ("" for a free lane)
	h       uint64 // an ordered lane's key's hash in keyed.lanes
	t       *tenant
	home    *keyed // the keyed queue it was made in (the group's dispatch may have changed since)
	ordered bool
	lvl     uint8     // a free lane's priority level; an ordered lane's, while in t.ready
	q       entryList // queued, settled ones included (skipped)
	queued  int       // unsettled entries in q
	out     bool      // ordered: its head is out
	inReady bool      // in t.ready
}

// What a lane and a tenant cost besides their name: the struct and its place in the lane
// table, or the struct, its map entry and its ring of lanes.
const (
	laneCost   = 160
	tenantCost = 192
)

func newKeyed(d broker.Dispatch) *keyed {
	return &keyed{d: d, lanes: newLaneIndex(), tenants: make(map[string]*tenant),
		lazy: d.Ordering != broker.OrderingNone && d.FairBy == "" && d.MaxPriority == 0}
}

// freeLane returns t's free lane of priority level l, or nil.
func (t *tenant) freeLane(l uint8) *lane {
	if l == 0 {
		return t.free
	}
	if t.freeHi == nil {
		return nil
	}
	return t.freeHi[l-1]
}

func (t *tenant) setFree(l uint8, x *lane) {
	if l == 0 {
		t.free = x
		return
	}
	if t.freeHi == nil {
		t.freeHi = new([grouping.MaxPriority]*lane)
	}
	t.freeHi[l-1] = x
}

// eachFree calls f on each of t's free lanes, lowest level first.
func (t *tenant) eachFree(f func(*lane)) {
	if t.free != nil {
		f(t.free)
	}
	if t.freeHi != nil {
		for _, l := range t.freeHi {
			if l != nil {
				f(l)
			}
		}
	}
}

// laneFor returns the lane e goes to, creating it (and its tenant) if need be; the bytes
// that costs are added to k.bytes and returned.
func (k *keyed) laneFor(e *entry) (*lane, int64) {
	m := e.msg
	okey, ordered := k.d.OrderKey(m.Key)
	var h uint64
	if ordered {
		var l *lane
		if l, h = k.lanes.find(okey); l != nil {
			return l, 0
		}
	}
	t, cost := k.tenantFor(k.d.Tenant(m.Key, m.Headers))
	if l := t.freeLane(e.lvl); !ordered && l != nil { // a new tenant has no free lane
		return l, cost
	}
	l, lcost := k.newLane(t, okey, h, ordered, e.lvl)
	return l, cost + lcost
}

// tenantFor returns the tenant name, creating it if need be; the bytes that costs are added
// to k.bytes and returned.
func (k *keyed) tenantFor(name string) (*tenant, int64) {
	t := k.last
	if t == nil || t.home != k || t.name != name { // gone (tidyTenant), or another's
		t = k.tenants[name]
	}
	var cost int64
	if t == nil {
		if n := len(k.spareTenants); n > 0 {
			t, k.spareTenants = k.spareTenants[n-1], k.spareTenants[:n-1]
			t.name, t.home = name, k
		} else {
			t = &tenant{name: name, home: k}
		}
		k.tenants[name] = t
		k.tenantsPeak = max(k.tenantsPeak, len(k.tenants))
		cost = tenantCost + int64(len(name))
		k.bytes += cost
	}
	k.last = t
	return t, cost
}

// newLane makes a lane of t: an ordered one for okey (whose hash is h), or t's free lane of
// priority level lvl. The bytes that costs are added to k.bytes and returned.
func (k *keyed) newLane(t *tenant, okey string, h uint64, ordered bool, lvl uint8) (*lane, int64) {
	var l *lane
	if n := len(k.spareLanes); n > 0 {
		l, k.spareLanes = k.spareLanes[n-1], k.spareLanes[:n-1]
		l.key, l.t, l.ordered, l.home = okey, t, ordered, k
	} else {
		l = &lane{key: okey, t: t, ordered: ordered, home: k}
	}
	l.lvl = lvl
	t.lanes++
	if ordered {
		k.lanes.add(l, h)
	} else {
		t.setFree(lvl, l)
	}
	cost := laneCost + int64(len(okey))
	k.bytes += cost
	return l, cost
}

// push queues a new message at the back of its lane (of the arrivals, in a lazy keyed queue)
// and returns what that cost in lanes and tenants.
func (k *keyed) push(e *entry) int64 {
	if k.lazy {
		t, cost := k.tenantFor("")
		e.tn = t
		t.held++
		k.held++
		k.arrivals.pushBack(e)
		return cost
	}
	l, cost := k.laneFor(e)
	l.q.pushBack(e)
	l.queued++
	e.tn = l.t
	if l.ordered {
		e.ol = l
	}
	l.t.held++
	k.held++
	k.readied(l)
	if k.d.FairBy != "" {
		k.checkNoisy(l.t)
	}
	return cost
}

// requeue puts e, taken back from a member (or out of its delay), at the front of its lane:
// its key's next message again.
func (k *keyed) requeue(e *entry) int64 {
	if e.tn == nil { // queued before the group's dispatch changed: a new message to this one
		return k.push(e)
	}
	k.landed(e)
	// Its lane without a lookup: an ordered one lives while its message is out; a tenant
	// lives while it holds a message.
	l, cost := e.ol, int64(0)
	if l == nil && k.lazy { // not ordered: the front of the arrivals
		e.out = false
		k.arrivals.pushFront(e)
		return 0
	}
	if l == nil {
		if l = e.tn.freeLane(e.lvl); l == nil {
			l, cost = k.laneFor(e)
		}
	}
	if l.ordered && e.out {
		l.out = false
	}
	e.out = false
	l.q.pushFront(e)
	l.queued++
	k.readied(l)
	return cost
}

// readied puts l in turn if it has a message that may go now.
func (k *keyed) readied(l *lane) {
	if l.inReady || l.queued == 0 || l.out {
		return
	}
	l.inReady = true
	if l.ordered && k.d.MaxPriority > 0 { // ready at the level of its head, the first not settled (a read of a cold entry: only with priorities)
		for e := range l.q.all() {
			if !e.settled {
				l.lvl = e.lvl
				break
			}
		}
	}
	l.t.ready.pushBack(l, l.lvl)
	if t := l.t; !t.inReady {
		t.inReady = true
		k.ready.pushBack(t)
	}
}

// pop returns the next message to hand to a member, or nil if every queued message waits
// behind one of its key that is out. It returns what it freed of lanes and tenants too.
//
// Noisy tenants take their turns only while they have, together, fewer messages at members
// than room minus headroom, the headroom being what the other tenants have at members plus
// a tenth of room (at least one): the rest of the members' room is kept for the others, so
// that a message of a quiet tenant finds a member with room the moment it comes instead of
// waiting for the flood's next ack. room is what the members can hold together.
func (k *keyed) pop(room int) (e *entry, freed int64) {
	if e, freed = k.popReady(room); e == nil && k.lazy {
		var cost int64
		e, cost = k.popArrival()
		freed -= cost
	}
	return e, freed
}

// popReady is pop of the lanes in turn.
func (k *keyed) popReady(room int) (e *entry, freed int64) {
	noisyCap := max(1, room-k.quietFlying-max(1, room/10))
	for turns := k.ready.len(); turns > 0 && k.ready.len() > 0; turns-- {
		t := k.ready.popFront()
		if t.noisy && k.flying-k.quietFlying >= noisyCap {
			k.ready.pushBack(t) // its turn comes again once room is back
			continue
		}
		for t.ready.len() > 0 && e == nil {
			l := t.ready.popFront()
			l.inReady = false
			for !l.q.empty() {
				if x := l.q.popFront(); !x.settled {
					e = x
					break
				}
			}
			if e == nil { // only settled entries were left
				freed += k.tidyLane(l)
				continue
			}
			l.queued--
			if l.ordered {
				l.out, e.out = true, true
			} else {
				k.readied(l) // its next, if any, takes its turn after the tenant's other lanes
			}
		}
		if t.ready.len() > 0 {
			k.ready.pushBack(t) // its next turn comes after the other tenants'
		} else {
			t.inReady = false
			freed += k.tidyTenant(t)
		}
		if e != nil {
			k.takeOff(e)
			return e, freed
		}
	}
	return nil, freed
}

// popArrival returns the first of the arrivals (a lazy keyed queue's) that may go now, or
// nil; and what the lane made for it costs, in bytes. Arrivals of a key that has a lane (a
// message out, or waiting behind one) are parked on it on the way, in turn behind it.
func (k *keyed) popArrival() (*entry, int64) {
	for k.arrivals.len() > 0 {
		e := k.arrivals.popFront()
		if e.settled {
			continue
		}
		okey, ordered := k.d.OrderKey(e.msg.Key)
		if !ordered { // no key: nothing to wait for
			k.takeOff(e)
			return e, 0
		}
		l, h := k.lanes.find(okey)
		if l != nil {
			l.q.pushBack(e)
			l.queued++
			e.ol = l
			k.readied(l)
			continue
		}
		l, cost := k.newLane(e.tn, okey, h, true, e.lvl)
		l.out, e.out, e.ol = true, true, l
		k.takeOff(e)
		return e, cost
	}
	return nil, 0
}

// takeOff records that e, popped, goes to a member.
func (k *keyed) takeOff(e *entry) {
	t := e.tn
	e.flying, e.quiet = true, !t.noisy
	t.flying++
	k.flying++
	if e.quiet {
		k.quietFlying++
	}
}

// waiting says whether k may have a message to hand out (pop may still find none: every one
// waiting behind one of its key).
func (k *keyed) waiting() bool { return k.ready.len() > 0 || k.arrivals.len() > 0 }

// landed records that e, handed to a member, is back from it (or gone).
func (k *keyed) landed(e *entry) {
	if e.flying {
		e.flying = false
		if e.tn != nil {
			e.tn.flying--
		}
		k.flying--
		if e.quiet {
			k.quietFlying--
		}
	}
}

// unqueued records that e, queued, was settled where it stands (it is skipped when it comes
// up).
func (k *keyed) unqueued(e *entry) {
	if l := k.laneOf(e, e.tn); l != nil {
		l.queued--
	}
}

// release records that the group let go of e for good (acked, dead-lettered, dropped): its
// key's next message may go. It returns what that freed of lanes and tenants.
func (k *keyed) release(e *entry) (freed int64) {
	t := e.tn
	if t == nil { // not queued under this keyed (the group's dispatch changed since)
		return 0
	}
	k.landed(e)
	l := k.laneOf(e, t)
	e.tn, e.ol = nil, nil
	if l != nil {
		if e.out && l.ordered {
			l.out = false
			k.readied(l)
		}
		freed = k.tidyLane(l)
	}
	e.out = false
	t.held--
	k.held--
	if t.noisy && t.held*20 < k.held {
		t.noisy = false
	}
	return freed + k.tidyTenant(t)
}

// laneOf returns the lane of e, of tenant t, now, or nil if it has none (the lane went,
// which happens to a free lane while its message is in flight).
func (k *keyed) laneOf(e *entry, t *tenant) *lane {
	if e.ol != nil {
		return e.ol
	}
	if t != nil {
		return t.freeLane(e.lvl)
	}
	return nil
}

// tidyLane deletes l if it holds nothing and is not in turn. Whether it is k's own is told by
// its home, not by a lookup of its key (a third of its time in W2 over 10,000 keys).
func (k *keyed) tidyLane(l *lane) int64 {
	if l.queued > 0 || l.out || l.inReady || l.home != k {
		return 0
	}
	if l.ordered {
		k.lanes.remove(l)
	} else {
		if l.t.freeLane(l.lvl) != l {
			return 0
		}
		l.t.setFree(l.lvl, nil)
	}
	l.t.lanes--
	cost := laneCost + int64(len(l.key))
	k.bytes -= cost
	*l = lane{} // its settled entries, if any, are let go of with it
	if len(k.spareLanes) < maxSpares {
		k.spareLanes = append(k.spareLanes, l)
	}
	return cost
}

// shrunk returns m, or, if it is down to 1/shrinkRatio of its peak, a copy sized for what it
// holds (maps.Clone keeps the size); and the peak of the map returned.
func shrunk[V any](m map[string]V, peak int) (map[string]V, int) {
	if peak <= shrinkMin || len(m) >= peak/shrinkRatio {
		return m, peak
	}
	c := make(map[string]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c, len(c)
}

// tidyTenant deletes t if it has no lane, holds nothing and is not in turn.
func (k *keyed) tidyTenant(t *tenant) int64 {
	if t.lanes > 0 || t.held > 0 || t.inReady || t.home != k {
		return 0
	}
	delete(k.tenants, t.name)
	k.tenants, k.tenantsPeak = shrunk(k.tenants, k.tenantsPeak)
	cost := tenantCost + int64(len(t.name))
	k.bytes -= cost
	r := t.ready
	r.reuse()
	*t = tenant{ready: r}
	if len(k.spareTenants) < maxSpares {
		k.spareTenants = append(k.spareTenants, t)
	}
	return cost
}

// checkNoisy marks t noisy when it holds more than a tenth of what the group holds (and at
// least grouping.NoisyMin), once per episode, to be logged.
func (k *keyed) checkNoisy(t *tenant) {
	if !t.noisy && t.held >= grouping.NoisyMin && t.held*10 > k.held {
		t.noisy = true
		k.noisy = append(k.noisy, t.name)
	}
}

// victim returns the queued entry a full group with overflow "drop_oldest" drops: of the
// tenant that holds the most, the oldest queued of its lowest priority level (of its free
// lane, or else of its ready lane of that level that comes first), or nil if that tenant has
// none ready.
func (k *keyed) victim() *entry {
	if k.lazy {
		return k.lazyVictim()
	}
	var busiest *tenant
	for _, t := range k.tenants {
		if (t.freeQueued() != nil || t.ready.len() > 0) && (busiest == nil || t.held > busiest.held) {
			busiest = t
		}
	}
	if busiest == nil {
		return nil
	}
	first := func(l *lane) *entry {
		for e := range l.q.all() {
			if !e.settled {
				return e
			}
		}
		return nil
	}
	var v *entry
	if l := busiest.freeQueued(); l != nil {
		v = first(l)
	}
	busiest.ready.levels(func(r *ring[*lane]) { // highest level first: a lower one replaces v
		for i := range r.len() {
			if e := first(r.peek(i)); e != nil && (v == nil || e.lvl < v.lvl) {
				v = e
				return
			}
		}
	})
	return v
}

// lazyVictim is victim in a lazy keyed queue, without a walk of every lane: the head of the
// first lane in turn (parked messages ready to go, older than the arrivals), else the first
// of the arrivals, else, when every queued message waits behind one of its key, the oldest
// of them.
func (k *keyed) lazyVictim() *entry {
	if t := k.tenants[""]; t != nil {
		var v *entry
		t.ready.levels(func(r *ring[*lane]) { // one level: a lazy queue has no priorities
			for i := range r.len() {
				for e := range r.peek(i).q.all() {
					if !e.settled {
						v = e
						return
					}
				}
			}
		})
		if v != nil {
			return v
		}
	}
	for i := range k.arrivals.len() {
		if e := k.arrivals.peek(i); !e.settled {
			return e
		}
	}
	return k.oldestQueued()
}

// freeQueued returns t's free lane of the lowest level that has a message queued, or nil.
func (t *tenant) freeQueued() (q *lane) {
	t.eachFree(func(l *lane) {
		if q == nil && l.queued > 0 {
			q = l
		}
	})
	return q
}

// each calls f on every queued entry, settled ones included, lane by lane
// (f may settle them: they are gathered first).
func (k *keyed) each(f func(*entry)) {
	var es []*entry
	gather := func(l *lane) {
		for e := range l.q.all() {
			es = append(es, e)
		}
	}
	for _, t := range k.tenants {
		t.eachFree(gather)
	}
	for l := range k.lanes.all() {
		gather(l)
	}
	for i := range k.arrivals.len() {
		es = append(es, k.arrivals.at(i))
	}
	for _, e := range es {
		f(e)
	}
}

// oldestQueued returns the entry queued the longest (the least message id among the lanes'
// heads), or nil.
func (k *keyed) oldestQueued() *entry {
	var oldest *entry
	head := func(l *lane) {
		for e := range l.q.all() {
			if !e.settled {
				if oldest == nil || e.msg.ID < oldest.msg.ID {
					oldest = e
				}
				return
			}
		}
	}
	for _, t := range k.tenants {
		t.eachFree(head)
	}
	for l := range k.lanes.all() {
		head(l)
	}
	for i := range k.arrivals.len() {
		if e := k.arrivals.peek(i); !e.settled {
			if oldest == nil || e.msg.ID < oldest.msg.ID {
				oldest = e
			}
			break
		}
	}
	return oldest
}

// busiest returns the tenants (or, without fair_by, the order keys) that hold the most,
// at most grouping.BusiestKeys, most first, and how many there are.
func (k *keyed) busiest() (n int, top []broker.KeyLoad) {
	if k.d.FairBy == "" { // one tenant: list the keys, by what they have queued and out
		for l := range k.lanes.all() {
			held := l.queued
			if l.out {
				held++
			}
			top = keepBusiest(top, broker.KeyLoad{Key: l.key, Held: held})
		}
		return k.lanes.len(), top
	}
	for name, t := range k.tenants {
		top = keepBusiest(top, broker.KeyLoad{Key: name, Held: t.held, Noisy: t.noisy})
	}
	return len(k.tenants), top
}

// keepBusiest adds x to top, keeping the grouping.BusiestKeys that hold the most, most first
// (ties by key, for a stable listing).
func keepBusiest(top []broker.KeyLoad, x broker.KeyLoad) []broker.KeyLoad {
	by := func(a, b broker.KeyLoad) int {
		if c := cmp.Compare(b.Held, a.Held); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	}
	if len(top) == grouping.BusiestKeys && by(x, top[len(top)-1]) >= 0 {
		return top
	}
	i, _ := slices.BinarySearchFunc(top, x, by)
	top = slices.Insert(top, i, x)
	if len(top) > grouping.BusiestKeys {
		top = top[:grouping.BusiestKeys]
	}
	return top
}

// entryList is a lane's queue: a list of entries linked through entry.next. A lane holds a
// few messages at a time, often one, and is reached cold (W2 over 10,000 keys comes back to a
// lane 10,000 messages later): a list takes its head entry, which dispatch reads anyway,
// where a ring would read its buffer first, a cache miss more per message; and a lane costs
// no buffer of its own.
type entryList struct{ head, tail *entry }

func (q *entryList) empty() bool { return q.head == nil }

func (q *entryList) pushBack(e *entry) {
	e.next = nil
	if q.tail != nil {
		q.tail.next = e
	} else {
		q.head = e
	}
	q.tail = e
}

func (q *entryList) pushFront(e *entry) {
	e.next = q.head
	q.head = e
	if q.tail == nil {
		q.tail = e
	}
}

// popFront takes the first entry; q must not be empty.
func (q *entryList) popFront() *entry {
	e := q.head
	q.head, e.next = e.next, nil
	if q.head == nil {
		q.tail = nil
	}
	return e
}

// all yields q's entries, first to last; f must not change q.
func (q *entryList) all() iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		for e := q.head; e != nil; e = e.next {
			if !yield(e) {
				return
			}
		}
	}
}
