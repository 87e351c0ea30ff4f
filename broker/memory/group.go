package memory

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/latency"
)

// group is a consumer group: the members of one balanced subscription_id. Messages wait in
// queue until a member has room (len(owned) < maxInFlight), then go to members round-robin
// and stay in the member's owned set until acked. A message that is nacked, times out or is
// left behind by a member goes back to the head of the queue (or to delayed, for a nack with
// a delay), or to the dead-letter topic after maxDeliveries attempts.
//
// Locks (lockrank): group.mu ranks below outbox.mu and scheduler.mu. Dead letters are published after
// group.mu is released, since their topic may route back to this group. A group never takes
// a stream's outbox.mu itself: it calls its members' Subscription methods (handOver,
// takeUnsent), which do.
type group struct {
	b  *Engine
	id string // immutable
	// name, patterns, maxDeliveries, dlq and declared are written under both b.mu and g.mu
	// (rebindLocked, declare), so that either lock is enough to read them: b.mu where the
	// broker matches members and declarations, g.mu in the group's own operations.
	name          string
	patterns      []string
	maxDeliveries int
	dlq           string
	declared      bool // declared in the configuration: never expires, never rebound
	dispatch      broker.Dispatch
	quota         *broker.Quota // of the member that created it (nil: none); written under b.mu and g.mu

	mu     lockrank.Mutex[lockrank.MemoryGroup] // guards everything below
	limits broker.GroupLimits                   // after defaults
	queue  leveled[*entry]                      // unkeyed groups' queue (keys nil), by priority level
	keys   *keyed                               // the queue of a group with ordering or fair_by (broker.Dispatch.Keyed)
	// queued counts the unsettled entries of queue; bytes is what the group holds (queued,
	// in flight, delayed, waiting for a hook): Message.cost + groupEntryOverhead each.
	queued int
	bytes  int64
	// waiting finds the entries that were handed to a member before (attempt > 0) and wait
	// again, queued or delayed, so that a late ack settles them without a scan: it marks them
	// settled and the queue (or onTimer, for delayed) skips them when they come up.
	waiting                                              map[uint64]*entry
	full                                                 bool // refused or dropped since it last drained
	fullSince                                            uint64
	refusals                                             [boundKinds]error // while full, by bound: refusalLocked
	members                                              []*member
	rr                                                   int       // index of the member to try first
	prioMembers                                          int       // members with a priority above 0
	delayed                                              delayHeap // nacked with a delay, by deadline: when they are requeued
	expiry                                               expiry    // the entries that expire, by when
	expiredOut                                           []*entry  // found expired by dispatchLocked: onTimer lets go of them
	wake                                                 int64     // earliest time registered with the scheduler; 0 if none
	draining                                             bool      // shutting down: deliver nothing new
	paused                                               bool      // Engine.PauseGroup: deliver nothing new until resumed
	lastDelivery                                         int64     // Engine.now of its last delivery to a member (0: none)
	breaker                                              grouping.Breaker
	emptySince                                           int64 // when the last member left (Broker.now clock); 0 while it has members
	removed                                              bool  // expired: no longer routed to
	memberSeq                                            uint64
	delivered, acked, redelivered, deadLettered, dropped uint64
	rejected                                             uint64 // publishes refused while full (broker.OverflowReject)
	expiredMsgs                                          uint64 // let go of past their ttl or max_age
	noisy                                                uint64 // tenants found flooding the group (keyed.checkNoisy)
	published                                            uint64 // messages taken (deliver)
	nacked, timedOut, leftBehind                         uint64 // taken back from members, by reason
	dead                                                 deadStore
	// deliveryLatency and ackLatency: broker.GroupStats's, kept under mu with the counters.
	deliveryLatency, ackLatency latency.Histogram
}

func (b *Engine) groupLimits(l broker.GroupLimits) broker.GroupLimits {
	return l.Or(b.opts.GroupLimits())
}

type member struct {
	s           *Subscription
	prio        uint8 // broker.SubscribeOptions.Priority
	maxInFlight int
	ackDeadline time.Duration
	owned       map[uint64]*entry // delivered, not yet acked
	peer        string
	joined      int64 // Unix nanoseconds
	ended       error // under the stream's out.mu: why the engine ended it (Subscription.evict)
}

type entry struct {
	msg      *message
	attempt  uint32
	deadline int64 // in flight: ack deadline; delayed: when to requeue (Broker.now clock)
	sentAt   int64 // when the current attempt was handed to a member (Broker.now clock)
	settled  bool  // acked or dropped while queued or delayed: skip it when it comes up (msg is nil)
	lvl      uint8 // its priority level in the group (broker.Dispatch.Level)
	delayed  bool  // in group.delayed, not in queue
	timed    bool  // its first delivery is in group.deliveryLatency
	// In a keyed group: out is set while it is its ordered key's message out (in flight,
	// delayed, with a hook), and tn is the tenant it counts for while the group holds it.
	out    bool
	tn     *tenant
	ol     *lane  // its ordered lane while it is queued or out (nil for one not ordered)
	next   *entry // the next in its lane's queue (entryList)
	flying bool   // handed to a member and not back (keyed.landed)
	quiet  bool   // flying, handed out while its tenant was not noisy
	// expires is when it expires (Broker.now clock; 0: never), from its ttl and the group's
	// max_age; expIdx and expPos are its place in group.expiry (expiry.drop). held is set
	// while a member holds it.
	expires int64
	expIdx  int
	expPos  int64
	held    bool
}

// takeBack collects what a group operation took back from its members, to be finished by
// finish once group.mu is released: dead letters to publish, and messages waiting for the
// OnRedeliver hook, which never runs under the lock.
type takeBack struct {
	hooks   broker.Hooks // nil unless the group's redeliveries are hooked
	requeue []*entry
	dead    []deadLetter
	hooked  []hookedEntry
	emits   []broker.Draft
}

type hookedEntry struct {
	e      *entry
	reason string
	delay  time.Duration
}

func (g *group) newTakeBack() *takeBack {
	tb := &takeBack{}
	if h := g.b.currentHooks(); h != nil && h.WantsRedeliver(g.hookName()) {
		tb.hooks = h
	}
	return tb
}

// hookName returns g's name for a hook, which is called with no lock held: the name changes
// under g.mu when a group without members is rebound.
func (g *group) hookName() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.name
}

type deadLetter struct {
	topic   string
	payload []byte
	headers map[string]string
	key     string // the message's: a dead-letter topic's own group may order by it
}

// errGroupRemoved refuses a message for a group that expired after the publish matched it.
var errGroupRemoved = errors.New("consumer group removed")

// errNotTaken: a fanout subscriber did not take the message (slow consumer, closing); it
// still counts as routed.
var errNotTaken = errors.New("not taken")

// deliver queues m for the members, unless the group is at one of its bounds: then a
// "drop_oldest" group makes room by dropping its oldest queued messages, and a "reject" group
// (or one with nothing queued to drop) refuses m with ErrGroupFull. The publish still reaches
// every other target (see RATIONALE.md, "Why does a full group not refuse the whole publish?").
func (g *group) deliver(m *message) (<-chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed { // expired after this publish matched it: nobody can join it any more
		return nil, errGroupRemoved
	}
	cost := m.cost + groupEntryOverhead
	for {
		over := g.overLocked(cost)
		if over == notOver {
			break
		}
		if g.limits.Overflow != broker.OverflowDropOldest || g.queued == 0 {
			g.rejected++
			g.noteFullLocked(over, cost)
			return nil, g.refusalLocked(over, cost)
		}
		g.dropOldestLocked()
		g.noteFullLocked(over, cost)
	}
	e := &entry{msg: m, lvl: g.dispatch.Level(m.Priority)}
	now := g.b.now()
	if ttl := g.limits.MaxAge; m.TTL > 0 || ttl > 0 {
		if m.TTL > 0 && (ttl <= 0 || m.TTL < ttl) {
			ttl = m.TTL
		}
		e.expires = now + int64(ttl)
		g.expiry.push(e)
		g.scheduleLocked(e.expires)
	}
	g.holdLocked(e)
	if g.keys != nil {
		g.keysCostLocked(g.keys.push(e))
		g.logNoisyLocked()
	} else {
		g.queue.pushBack(e, e.lvl)
	}
	g.queued++
	g.published++
	g.dispatchLocked(now)
	return nil, nil
}

// A bound a group's publish can meet (overLocked).
type bound uint8

const (
	notOver    bound = iota
	overQueued       // groups { max_queued }
	overBytes        // groups { max_queued_bytes }
	overBudget       // the broker's memory budget for groups
	overQuota        // the user's limits { max_queued_bytes }
	boundKinds
)

// overLocked says which bound taking one more message of cost bytes would pass.
func (g *group) overLocked(cost int64) bound {
	switch {
	case g.queued >= g.limits.MaxQueued:
		return overQueued
	case g.bytes+cost > g.limits.MaxQueuedBytes:
		return overBytes
	case g.b.mem.used.Load()+groupEntryOverhead > g.b.mem.groupsLimit:
		return overBudget
	case g.quota.Over(cost) != "":
		return overQuota
	}
	return notOver
}

// describeLocked says what bound b is, for a log line or a refusal.
func (g *group) describeLocked(b bound, cost int64) string {
	switch b {
	case overQueued:
		return fmt.Sprintf("its limit of %d queued messages (groups { max_queued })", g.limits.MaxQueued)
	case overBytes:
		return fmt.Sprintf("its limit of %d bytes held (groups { max_queued_bytes }; it holds %d)", g.limits.MaxQueuedBytes, g.bytes)
	case overBudget:
		return fmt.Sprintf("the broker's memory budget for consumer groups (%d bytes, 3/4 of memory { max_bytes })", g.b.mem.groupsLimit)
	case overQuota:
		return g.quota.Over(cost)
	}
	return ""
}

// refusalLocked is the error a full group refuses a message with. It is made once per bound
// and full episode (noteDrainedLocked forgets it): a publisher that keeps sending to a full
// group gets the same error for each message, and the broker, busy enough already, does not
// format one per message.
func (g *group) refusalLocked(b bound, cost int64) error {
	if err := g.refusals[b]; err != nil {
		return err
	}
	err := fmt.Errorf("%w: consumer group %q (subscription %q) is at %s; add members or ack faster, raise the limit, or use overflow \"drop_oldest\"",
		broker.ErrGroupFull, g.name, g.id, g.describeLocked(b, cost))
	g.refusals[b] = err
	return err
}

// dropOldestLocked drops the oldest queued message to make room (OverflowDropOldest).
func (g *group) dropOldestLocked() {
	if g.keys != nil {
		if e := g.keys.victim(); e != nil {
			g.dropped++
			g.settleLocked(e)
		}
		return
	}
	for g.queue.len() > 0 {
		e := g.queue.popLowest() // the oldest of the lowest priority
		if e.settled {
			continue
		}
		g.queued--
		g.dropped++
		g.forgetLocked(e)
		return
	}
}

// noteFullLocked logs, once per episode, that the group refuses or drops publishes.
func (g *group) noteFullLocked(over bound, cost int64) {
	if g.full {
		return
	}
	why := g.describeLocked(over, cost)
	g.full = true
	g.fullSince = g.rejected + g.dropped
	policy := "reject"
	if g.limits.Overflow == broker.OverflowDropOldest {
		policy = "drop_oldest"
	}
	g.b.log.Warn("consumer group full: publishes to it are refused or drop its oldest messages until it drains",
		"subscription", g.id, "group", g.name, "at", why, "overflow", policy, "members", len(g.members), "queued", g.queued, "bytes", g.bytes)
}

// noteDrainedLocked logs the end of a full episode once the group is back under half its
// bounds.
func (g *group) noteDrainedLocked() {
	if !g.full || g.queued > g.limits.MaxQueued/2 || g.bytes > g.limits.MaxQueuedBytes/2 {
		return
	}
	g.full = false
	g.refusals = [boundKinds]error{}
	g.b.log.Warn("consumer group drained: it accepts publishes again", "subscription", g.id, "group", g.name,
		"refused_or_dropped_while_full", g.rejected+g.dropped-g.fullSince, "queued", g.queued, "bytes", g.bytes)
}

// holdLocked charges e's message to the group and the broker's budget.
func (g *group) holdLocked(e *entry) {
	g.bytes += e.msg.cost + groupEntryOverhead // the broker's budget was charged by the publish
	if g.quota != nil {
		g.quota.AddBytes(e.msg.cost + groupEntryOverhead)
	}
}

// forgetLocked lets go of e for good: acked, dropped, dead-lettered or expired.
func (g *group) forgetLocked(e *entry) {
	g.dropLocked(e)
	g.b.release(e.msg, groupEntryOverhead)
}

// dropLocked is forgetLocked but for giving e's message back to the broker's budget, which
// its caller does (Engine.releaseAll), once g.mu is released: that is an atomic operation on
// the message, cold by then, and one on the budget, which every publish touches too, and the
// members' acks wait for g.mu (see ack).
func (g *group) dropLocked(e *entry) {
	e.held = false
	g.expiry.drop(e)
	g.bytes -= e.msg.cost + groupEntryOverhead
	if g.quota != nil {
		g.quota.AddBytes(-e.msg.cost - groupEntryOverhead)
	}
	if g.keys != nil {
		g.keysCostLocked(-g.keys.release(e))
	}
	if e.attempt > 0 {
		delete(g.waiting, e.msg.ID)
	}
	g.noteDrainedLocked()
}

// keysCostLocked charges (or, negative, gives back) what the keyed queue's lanes and tenants
// cost, like a message's bytes: to the group, its quota and the broker's budget.
func (g *group) keysCostLocked(n int64) {
	if n == 0 {
		return
	}
	g.bytes += n
	if g.quota != nil {
		g.quota.AddBytes(n)
	}
	g.b.mem.add(n)
}

// roomLocked is how many messages the members can hold together (keyed.pop).
func (g *group) roomLocked() int {
	room := 0
	for _, m := range g.members {
		room += m.maxInFlight
	}
	return room
}

// logNoisyLocked logs the tenants that began to flood the group (keyed.checkNoisy).
func (g *group) logNoisyLocked() {
	for _, name := range g.keys.noisy {
		g.noisy++
		t := g.keys.tenants[name]
		held := 0
		if t != nil {
			held = t.held
		}
		g.b.log.Warn("noisy key: it holds over a tenth of what its consumer group holds; fair dispatch keeps the other keys' turns (groups { fair_by })",
			"subscription", g.id, "group", g.name, "key", name, "held", held, "group_held", g.keys.held, "fair_by", g.dispatch.FairBy)
	}
	g.keys.noisy = g.keys.noisy[:0]
}

// replaceMsgLocked gives e the message m (a copy of e.msg with other headers), which keeps
// e's place (and its key's) in the group.
func (g *group) replaceMsgLocked(e *entry, m *message) {
	cost := e.msg.cost + groupEntryOverhead
	g.bytes -= cost
	if g.quota != nil {
		g.quota.AddBytes(-cost)
	}
	g.b.release(e.msg, groupEntryOverhead)
	g.b.charge(m, 1)
	e.msg = m
	g.holdLocked(e)
	g.b.release(m, 0)
}

// dispatchLocked hands queued messages to members with room, round-robin. g.mu must be held.
func (g *group) dispatchLocked(now int64) {
	if g.draining || g.paused {
		return
	}
	wall := g.b.wallAt(now) // for the deliveryLatency of first attempts
	room := 0
	if g.keys != nil && g.keys.d.FairBy != "" { // only a noisy tenant is held to room (keyed.pop)
		room = g.roomLocked()
	}
	for g.queue.len() > 0 || g.keys != nil && g.keys.waiting() {
		m := g.nextMemberLocked()
		if m == nil {
			return
		}
		var e *entry
		if g.keys != nil {
			var freed int64
			e, freed = g.keys.pop(room)
			g.keysCostLocked(-freed)
			if e == nil { // every queued message waits behind one of its key
				g.rr = (g.rr - 1 + len(g.members)) % len(g.members) // m's turn stays
				return
			}
		} else if e = g.queue.popFront(); e.settled {
			continue
		}
		g.queued--
		if e.expires != 0 && e.expires <= now { // its wake-up has not come yet: onTimer lets go of it
			g.expiry.drop(e)
			g.expiredOut = append(g.expiredOut, e)
			g.scheduleLocked(now)
			continue
		}
		if e.attempt > 0 {
			delete(g.waiting, e.msg.ID)
		} else if !e.timed { // not one taken back unsent from a member that left
			g.deliveryLatency.Observe(time.Duration(wall - e.msg.PublishedAt))
			e.timed = true
		}
		g.assignLocked(m, e, now)
	}
}

// nextMemberLocked returns the next member in round-robin order that has room, or nil. With
// member priorities, it is the next of the highest priority among those with room: a member
// of a lower priority gets a message only while every higher one is full.
func (g *group) nextMemberLocked() *member {
	n := len(g.members)
	if g.prioMembers > 0 {
		pick := -1
		for i := range n {
			idx := (g.rr + i) % n
			if m := g.members[idx]; len(m.owned) < m.maxInFlight && (pick < 0 || m.prio > g.members[pick].prio) {
				pick = idx
			}
		}
		if pick < 0 {
			return nil
		}
		g.rr = (pick + 1) % n
		return g.members[pick]
	}
	for i := range n {
		idx := (g.rr + i) % n
		if m := g.members[idx]; len(m.owned) < m.maxInFlight {
			g.rr = (idx + 1) % n
			return m
		}
	}
	return nil
}

func (g *group) assignLocked(m *member, e *entry, now int64) {
	e.held = true
	e.attempt++
	e.sentAt = now
	e.deadline = now + int64(m.ackDeadline)
	m.owned[e.msg.ID] = e
	g.delivered++
	g.lastDelivery = now
	if e.attempt > 1 {
		g.redelivered++
	}
	m.s.handOver(e.msg, e.attempt)
	g.scheduleLocked(e.deadline)
}

func (g *group) scheduleLocked(at int64) {
	if g.wake == 0 || at < g.wake {
		g.wake = at
		g.b.sched.add(at, g)
	}
}

// findOwnedLocked returns the in-flight entry seq and its member. With only set it looks at
// pref alone; otherwise at pref first, then at every member.
func (g *group) findOwnedLocked(pref *member, only bool, seq uint64) (*entry, *member) {
	return grouping.FindHeld(pref, g.members, only, ownedBy, seq)
}

// eachOwnedLocked calls f on each of seqs in flight, found as findOwnedLocked finds it, and
// returns how many were not.
func (g *group) eachOwnedLocked(pref *member, only bool, seqs []uint64, f func(seq uint64, e *entry, m *member)) (unknown int) {
	return grouping.EachHeld(pref, g.members, only, ownedBy, seqs, f)
}

func ownedBy(m *member) map[uint64]*entry { return m.owned }

// settleLocked lets go of e, queued or delayed, where it stands: it is marked settled, to be
// skipped when it reaches the head of the queue or its delay ends, and releases its message
// at once, so that what the budget gets back is really free.
func (g *group) settleLocked(e *entry) {
	g.standDownLocked(e)
	g.forgetLocked(e)
	e.msg = nil
}

// standDownLocked marks e, queued or delayed, settled where it stands (skipped when it comes
// up) and takes it out of what the group counts as waiting; its holder lets go of it next.
func (g *group) standDownLocked(e *entry) {
	if !e.delayed {
		g.queued--
		if g.keys != nil {
			g.keys.unqueued(e)
		}
	}
	e.settled = true
}

// ack settles seqs, looking first among pref's deliveries, and returns how many were unknown.
// Hooked acks are reported to OnAck once g.mu is released.
func (g *group) ack(pref *member, seqs []uint64) (unknown int) {
	if len(seqs) == 0 {
		return 0
	}
	h := g.b.currentHooks()
	if h != nil && !h.WantsAck(g.hookName()) {
		h = nil
	}
	var events []broker.AckEvent
	var buf [256]*message // a frame's worth of acks without an allocation
	acked := buf[:0]
	g.mu.Lock()
	now := g.b.now()
	for _, seq := range seqs {
		if e, m := g.findOwnedLocked(pref, false, seq); e != nil {
			delete(m.owned, seq)
			g.acked++
			g.ackLatency.Observe(time.Duration(now - e.sentAt))
			g.dropLocked(e)
			acked = append(acked, e.msg)
			if h != nil {
				events = append(events, g.ackEvent(e, time.Duration(now-e.sentAt)))
			}
		} else if e := g.waiting[seq]; e != nil {
			// A late ack: the message waits again, queued or delayed (its deadline passed, or
			// its member left before the ack arrived by the unary Ack). A message never handed
			// to a member cannot be acked: nobody was given it.
			g.acked++
			if h != nil {
				events = append(events, g.ackEvent(e, 0))
			}
			g.settleLocked(e)
		} else {
			unknown++
		}
	}
	g.dispatchLocked(now)
	g.mu.Unlock()
	g.b.releaseAll(acked, groupEntryOverhead)
	for i := range events {
		events[i].SystemID = events[i].Msg.SystemID
		g.b.emit(h.OnAck(&events[i]))
	}
	return unknown
}

func (g *group) ackEvent(e *entry, inFlight time.Duration) broker.AckEvent {
	return broker.AckEvent{Msg: &e.msg.Message, SubscriptionID: g.id, Group: g.name, Attempt: e.attempt, InFlight: inFlight}
}

// nack gives in-flight seqs back for redelivery after delay and returns how many were unknown.
// With owner set, only that member's deliveries can be nacked: a late nack from a member
// must not take back a message that was redelivered to another.
func (g *group) nack(owner *member, seqs []uint64, delay time.Duration, reason string) (unknown int) {
	if len(seqs) == 0 {
		return 0
	}
	if reason == "" {
		reason = deadletter.ReasonNack
	}
	tb := g.newTakeBack()
	g.mu.Lock()
	now := g.b.now()
	unknown = g.eachOwnedLocked(owner, owner != nil, seqs, func(seq uint64, e *entry, m *member) {
		delete(m.owned, seq)
		g.nacked++
		g.giveBackLocked(e, reason, delay, now, tb)
	})
	g.requeueLocked(tb)
	g.dispatchLocked(now)
	g.mu.Unlock()
	g.finish(tb)
	return unknown
}

// touch extends the deadline of owner's in-flight seqs and returns how many were unknown.
func (g *group) touch(owner *member, seqs []uint64) (unknown int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.b.now()
	return g.eachOwnedLocked(owner, true, seqs, func(_ uint64, e *entry, m *member) {
		e.deadline = now + int64(m.ackDeadline)
	})
}

// giveBackLocked takes back e, no longer owned by any member, for another attempt. With
// hooks it waits in tb.hooked for OnRedeliver; otherwise the default applies at once.
func (g *group) giveBackLocked(e *entry, reason string, delay time.Duration, now int64, tb *takeBack) {
	if g.keys != nil {
		g.keys.landed(e)
	}
	e.held = false
	if e.expires != 0 && e.expires <= now {
		g.expireLocked(e, tb)
		return
	}
	if tb.hooks != nil {
		tb.hooked = append(tb.hooked, hookedEntry{e: e, reason: reason, delay: delay})
		return
	}
	g.defaultGiveBackLocked(e, reason, delay, now, tb)
}

// defaultGiveBackLocked redelivers e after delay, no sooner than the group's redelivery
// back-off allows (to g.delayed), or with delay atOnce at once (appended to tb.requeue);
// past maxDeliveries it dead-letters it (to tb.dead, published by finish).
func (g *group) defaultGiveBackLocked(e *entry, reason string, delay time.Duration, now int64, tb *takeBack) {
	if g.maxDeliveries > 0 && int(e.attempt) >= g.maxDeliveries {
		g.deadLetterLocked(e, deadletter.CodeMaxDeliveries, reason, tb)
		return
	}
	if delay != atOnce {
		delay = g.limits.RedeliveryDelay(delay, e.attempt, e.msg.ID)
	}
	g.delayLocked(e, delay, now, tb)
}

// atOnce is the delay of a message whose member left: it goes to the other members at
// once, without the redelivery back-off (it did not fail; its member went away).
const atOnce time.Duration = -1

func (g *group) delayLocked(e *entry, delay time.Duration, now int64, tb *takeBack) {
	if delay > 0 {
		e.deadline = now + int64(delay)
		e.delayed = true
		heap.Push(&g.delayed, e)
		g.waitLocked(e)
		g.scheduleLocked(e.deadline)
		return
	}
	tb.requeue = append(tb.requeue, e)
}

// waitLocked lets a late ack find e, queued or delayed again, if it was handed to a member:
// one taken back from its member's buffer before it was sent has attempt 0 again and cannot
// be acked. forgetLocked and dispatchLocked remove entries on the same condition.
func (g *group) waitLocked(e *entry) {
	if e.attempt > 0 {
		g.waiting[e.msg.ID] = e
	}
}

// deadLetterLocked sends e to the dead-letter topic, code (a deadletter.Code*) saying which
// path did, reason why.
func (g *group) deadLetterLocked(e *entry, code, reason string, tb *takeBack) {
	g.deadLettered++
	if g.breaker.Note(g.b.now(), g.limits) && !g.paused {
		g.paused = true
		g.b.log.Warn("dead-letter breaker tripped: consumer group paused; find why its messages fail, then resume it (tinybroker groups resume)",
			"subscription", g.id, "dead_letters", g.limits.DeadLetterBreaker, "within", g.limits.DeadLetterBreakerWindow)
	}
	d := g.deadLetter(e, code, reason)
	g.keepDeadLetterLocked(e, d, code, reason)
	tb.dead = append(tb.dead, d)
	g.forgetLocked(e)
}

// requeueLocked puts tb.requeue back at the head of the queue, oldest first: they were
// published before anything still queued.
func (g *group) requeueLocked(tb *takeBack) {
	es := tb.requeue
	slices.SortFunc(es, func(a, b *entry) int { return -cmp.Compare(a.msg.ID, b.msg.ID) })
	for _, e := range es {
		e.delayed = false
		if g.keys != nil {
			g.keysCostLocked(g.keys.requeue(e))
		} else {
			g.queue.pushFront(e, e.lvl)
		}
		g.waitLocked(e)
	}
	g.queued += len(es)
	tb.requeue = es[:0]
}

// finish completes an operation once g.mu is released: it asks OnRedeliver about hooked
// messages and applies its verdicts, then publishes dead letters and emitted messages.
func (g *group) finish(tb *takeBack) {
	if len(tb.hooked) > 0 {
		hooked, name := tb.hooked, g.hookName()
		verdicts := make([]broker.RedeliverVerdict, len(hooked))
		for i, h := range hooked {
			verdicts[i] = tb.hooks.OnRedeliver(&broker.RedeliverEvent{Msg: &h.e.msg.Message, SystemID: h.e.msg.SystemID,
				SubscriptionID: g.id, Group: name, Attempt: h.e.attempt, Reason: h.reason})
			tb.emits = append(tb.emits, verdicts[i].Emit...)
		}
		g.mu.Lock()
		now := g.b.now()
		for i, h := range hooked {
			v, e := &verdicts[i], h.e
			if len(v.SetHeaders) > 0 || len(v.DelHeaders) > 0 {
				g.replaceMsgLocked(e, e.msg.withHeaders(v.SetHeaders, v.DelHeaders))
			}
			switch v.Action {
			case broker.RedeliverDelay: // a plugin's delay, no shorter than the back-off
				g.delayLocked(e, g.limits.RedeliveryDelay(v.Delay, e.attempt, e.msg.ID), now, tb)
			case broker.RedeliverDeadLetter:
				reason := v.Reason
				if reason == "" {
					reason = h.reason
				}
				g.deadLetterLocked(e, grouping.VerdictCode(v), reason, tb)
			case broker.RedeliverDrop:
				g.dropped++
				g.forgetLocked(e)
			default:
				g.defaultGiveBackLocked(e, h.reason, h.delay, now, tb)
			}
		}
		g.requeueLocked(tb)
		g.dispatchLocked(now)
		g.mu.Unlock()
	}
	g.b.publishDeadLetters(tb.dead)
	g.b.emit(tb.emits)
}

func (g *group) deadLetter(e *entry, code, reason string) deadLetter {
	h := grouping.DeadLetterHeaders(&e.msg.Message, code, reason, g.id, g.name, e.attempt)
	return deadLetter{topic: g.dlq, payload: e.msg.Payload, headers: h, key: e.msg.Key}
}

// nextMemberID names a new member.
func (g *group) nextMemberID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.memberSeq++
	return g.name + "-" + strconv.FormatUint(g.memberSeq, 10)
}

// join adds s as a member and gives it work at once.
func (g *group) join(s *Subscription, maxInFlight int, ackDeadline time.Duration, prio uint8, peer string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := &member{s: s, prio: prio, maxInFlight: maxInFlight, ackDeadline: ackDeadline, owned: make(map[uint64]*entry),
		peer: peer, joined: time.Now().UnixNano()}
	s.m = m // before its first delivery
	g.members = append(g.members, m)
	if prio > 0 {
		g.prioMembers++
	}
	g.emptySince = 0
	g.dispatchLocked(g.b.now())
}

// leave removes m and hands its unacked messages at once to the other members (or, with none
// left, keeps them at the head of the queue for the next member).
func (g *group) leave(m *member) {
	tb := g.newTakeBack()
	g.mu.Lock()
	i := grouping.Leave(&g.members, m)
	if i < 0 {
		g.mu.Unlock()
		return
	}
	if m.prio > 0 {
		g.prioMembers--
	}
	if len(g.members) == 0 && g.b.opts.GroupExpireAfter > 0 && !g.declared {
		g.emptySince = g.b.now()
		g.scheduleLocked(g.emptySince + int64(g.b.opts.GroupExpireAfter))
	}
	if g.rr > i {
		g.rr--
	}
	if g.rr >= len(g.members) {
		g.rr = 0
	}
	// Deliveries still in the outbox never reached the member: they do not count as attempts.
	m.s.takeUnsent(func(d delivery) {
		if e := m.owned[d.m.ID]; e != nil {
			e.attempt--
		}
	})
	now := g.b.now()
	// In publish order: those that go to the dead-letter topic (or the hook) then go in the
	// order they were published, as the requeued ones do (requeueLocked), not a map's.
	for _, seq := range slices.Sorted(maps.Keys(m.owned)) {
		e := m.owned[seq]
		delete(m.owned, seq)
		g.leftBehind++
		g.giveBackLocked(e, deadletter.ReasonMemberLeft, atOnce, now, tb)
	}
	g.requeueLocked(tb)
	g.dispatchLocked(now)
	g.mu.Unlock()
	g.finish(tb)
}

// onTimer redelivers what passed its ack deadline and requeues delayed messages whose delay
// is over, then registers the next wake-up.
func (g *group) onTimer() {
	tb := g.newTakeBack()
	g.mu.Lock()
	now := g.b.now()
	g.wake = 0
	next := int64(0)
	later := func(t int64) {
		if next == 0 || t < next {
			next = t
		}
	}
	var late []*entry
	for _, m := range g.members {
		for seq, e := range m.owned {
			if e.deadline > now {
				later(e.deadline)
				continue
			}
			delete(m.owned, seq)
			late = append(late, e)
		}
	}
	// In publish order, as when a member leaves.
	slices.SortFunc(late, func(a, b *entry) int { return cmp.Compare(a.msg.ID, b.msg.ID) })
	for _, e := range late {
		g.timedOut++
		g.giveBackLocked(e, deadletter.ReasonAckDeadline, 0, now, tb)
	}
	// Delayed messages are a heap by deadline: a wake-up takes those due, not a scan of all
	// (with the redelivery back-off, every nacked message waits there).
	for len(g.delayed) > 0 {
		e := g.delayed[0]
		if !e.settled && e.deadline > now {
			later(e.deadline)
			break
		}
		heap.Pop(&g.delayed)
		if !e.settled {
			tb.requeue = append(tb.requeue, e)
		}
	}
	// What expired goes, wherever it waits: queued or delayed, settled where it stands; one a
	// member holds goes when it comes back (giveBackLocked).
	for e := g.expiry.due(now); e != nil; e = g.expiry.due(now) {
		if !e.held {
			g.expireWaitingLocked(e, tb)
		}
	}
	if at, ok := g.expiry.next(); ok {
		later(at)
	}
	for _, e := range g.expiredOut {
		g.expireLocked(e, tb)
	}
	g.expiredOut = nil
	g.requeueLocked(tb)
	expired := false
	if g.emptySince != 0 {
		if at := g.emptySince + int64(g.b.opts.GroupExpireAfter); at <= now {
			expired = true
		} else {
			later(at)
		}
	}
	if next != 0 {
		g.scheduleLocked(next)
	}
	g.dispatchLocked(now)
	g.mu.Unlock()
	g.finish(tb)
	if expired {
		g.b.expireGroup(g)
	}
}

// subscriptions returns the members' subscriptions.
func (g *group) subscriptions() []*Subscription {
	g.mu.Lock()
	defer g.mu.Unlock()
	subs := make([]*Subscription, len(g.members))
	for i, m := range g.members {
		subs[i] = m.s
	}
	return subs
}

// drain stops new deliveries and returns how many messages are in flight.
func (g *group) drain() (inFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.draining = true
	for _, m := range g.members {
		inFlight += len(m.owned)
	}
	return inFlight
}

func (g *group) stats() broker.GroupStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.statsLocked()
}

func (g *group) statsLocked() broker.GroupStats {
	st := broker.GroupStats{ID: g.id, Group: g.name, Patterns: g.patterns, Members: len(g.members), Expired: g.expiredMsgs,
		Queued: g.queued, Bytes: g.bytes, Delivered: g.delivered, Acked: g.acked, Redelivered: g.redelivered,
		DeadLettered: g.deadLettered, Dropped: g.dropped, Rejected: g.rejected, Published: g.published, Declared: g.declared, Paused: g.paused, BreakerTrips: g.breaker.Trips,
		Nacked: g.nacked, TimedOut: g.timedOut, LeftBehind: g.leftBehind,
		DeadLetters: g.dead.len(), DeadLetterBytes: g.dead.bytes, DeadLettersDropped: g.dead.dropped,
		DeliveryLatency: g.deliveryLatency, AckLatency: g.ackLatency}
	older := func(e *entry) {
		if !e.settled && (st.Oldest == 0 || e.msg.PublishedAt < st.Oldest) {
			st.Oldest = e.msg.PublishedAt
		}
	}
	for _, e := range g.delayed {
		if !e.settled {
			st.Delayed++
			older(e)
		}
	}
	for _, m := range g.members {
		st.InFlight += len(m.owned)
		st.Room += max(0, m.maxInFlight-len(m.owned))
		for _, e := range m.owned {
			older(e)
			if !e.settled && (st.OldestUnacked == 0 || e.msg.PublishedAt < st.OldestUnacked) {
				st.OldestUnacked = e.msg.PublishedAt
			}
		}
	}
	if g.keys != nil {
		if e := g.keys.oldestQueued(); e != nil {
			st.OldestQueued = e.msg.PublishedAt
			older(e)
		}
		st.Keys, st.Busiest = g.keys.busiest()
	}
	// Requeued messages go back to the head of their level, oldest first: the first unsettled
	// entry of a level is its oldest queued.
	g.queue.levels(func(r *ring[*entry]) {
		for i := range r.len() {
			if e := r.peek(i); !e.settled {
				if st.OldestQueued == 0 || e.msg.PublishedAt < st.OldestQueued {
					st.OldestQueued = e.msg.PublishedAt
				}
				older(e)
				break
			}
		}
	})
	if st.Queued > 0 && st.Room > 0 {
		// Stalled since the later of its last delivery and its oldest queued message's publish.
		st.Stalled = st.OldestQueued
		if g.lastDelivery != 0 {
			st.Stalled = max(st.Stalled, g.b.wallAt(g.lastDelivery))
		}
	}
	return st
}

// info describes g in full: its stats, settings and members.
func (g *group) info() broker.GroupInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	gi := broker.GroupInfo{GroupStats: g.statsLocked(), MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq, Dispatch: g.dispatch, Limits: g.limits, Replicas: 1}
	for _, m := range g.members {
		gi.MemberList = append(gi.MemberList, broker.MemberInfo{ID: m.s.bal.MemberID, Peer: m.peer, InFlight: len(m.owned),
			MaxInFlight: m.maxInFlight, AckDeadline: m.ackDeadline, Joined: m.joined, Priority: m.prio})
	}
	return gi
}

// ring is a growable double-ended queue.
type ring[T any] struct {
	buf        []T
	head, size int
	reads      int // entries read by at, for tests to count scans (popFront is counted by head)
}

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) at(i int) T {
	r.reads++
	return r.buf[(r.head+i)&(len(r.buf)-1)]
}

// peek is at without counting the read (for stats).
func (r *ring[T]) peek(i int) T { return r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring[T]) grow() {
	if r.size < len(r.buf) {
		return
	}
	n := max(16, 2*len(r.buf))
	buf := make([]T, n)
	k := copy(buf, r.buf[r.head:]) // the ring is full: head to the end, then the start to head
	copy(buf[k:], r.buf[:r.head])
	r.buf, r.head = buf, 0
}

func (r *ring[T]) pushBack(e T) {
	r.grow()
	r.buf[(r.head+r.size)&(len(r.buf)-1)] = e
	r.size++
}

func (r *ring[T]) pushFront(e T) {
	r.grow()
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = e
	r.size++
}

// reuse empties r for another use, keeping its buffer if it is small (a spare lane's). An
// empty ring's buffer is clear already (popFront clears what it takes).
func (r *ring[T]) reuse() {
	if len(r.buf) > 16 {
		r.buf = nil
	} else if r.size > 0 {
		clear(r.buf)
	}
	r.head, r.size = 0, 0
}

func (r *ring[T]) popFront() T {
	var zero T
	e := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.size--
	if r.size == 0 && len(r.buf) > 4096 { // give a burst's memory back
		r.buf, r.head = nil, 0
	}
	return e
}

// expireLocked lets go of e, expired, taken from a member or the queue: to the dead-letter
// topic with reason "expired", or dropped (on_expire "drop").
func (g *group) expireLocked(e *entry, tb *takeBack) {
	g.expiredMsgs++
	if g.limits.DropExpired() {
		g.dropped++
		g.forgetLocked(e)
		return
	}
	g.deadLetterLocked(e, deadletter.CodeExpired, deadletter.ReasonExpired, tb)
}

// expireWaitingLocked lets go of e, expired while queued or delayed, as expireLocked does.
func (g *group) expireWaitingLocked(e *entry, tb *takeBack) {
	g.standDownLocked(e)
	g.expireLocked(e, tb)
	e.msg = nil
}

// delayHeap holds the delayed entries of a group, earliest deadline first.
type delayHeap []*entry

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(*entry)) }
func (h *delayHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
