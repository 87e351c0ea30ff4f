package memory

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

// Declare creates the consumer group gc describes, or checks that an existing group of that
// id matches it. A declared group is never rebound by a member with other settings and never
// expires.
func (b *Engine) Declare(gc broker.GroupConfig) error {
	if gc.Replicas > 1 {
		return fmt.Errorf("%w: consumer group %q asks for %d replicas: the memory engine keeps one copy of a message, in this process; run on engine \"jetstream\" in a cluster for more, or drop replicas", broker.ErrInvalidSubscription, gc.Name, gc.Replicas)
	}
	o := gc.SubscribeOptions()
	gc.ID = o.ID
	patterns, err := b.opts.CheckSubscribe(&o)
	if err != nil {
		return err
	}
	if err := gc.Limits.CheckRedelivery(); err != nil {
		return err
	}
	if err := gc.Limits.CheckBreaker(); err != nil {
		return err
	}
	gc.Patterns = patterns
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.fanouts[gc.ID]; ok {
		return fmt.Errorf("%w: subscription_id %q is an open fanout subscription", broker.ErrGroupMismatch, gc.ID)
	}
	g := b.groups[gc.ID]
	if g != nil {
		if g.name != gc.Name || !slices.Equal(g.patterns, patterns) || g.maxDeliveries != gc.MaxDeliveries || g.dispatch != gc.Dispatch {
			if g.hasMembers() {
				return fmt.Errorf("%w: consumer group %q exists with other settings and has members; remove them or change the declaration", broker.ErrGroupMismatch, gc.Name)
			}
			b.rebindLocked(g, &o, patterns)
		}
	} else {
		if other, ok := b.groupNames[gc.Name]; ok {
			return fmt.Errorf("%w: consumer_group %q belongs to subscription_id %q", broker.ErrGroupMismatch, gc.Name, other)
		}
		if len(b.groups) >= b.opts.MaxGroups {
			return fmt.Errorf("%w: the broker holds %d consumer groups, its limit (limits { max_groups })", broker.ErrLimit, len(b.groups))
		}
		g = b.newGroupLocked(gc, nil)
	}
	g.declare(b.groupLimits(gc.Limits))
	return nil
}

// declare marks g declared, with limits. b.mu must be held (see group.declared).
func (g *group) declare(limits broker.GroupLimits) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.declared = true
	g.limits = limits
	g.emptySince = 0
	if g.quota != nil { // the configuration's now, not its creator's
		g.quota.ReleaseGroup()
		g.quota.AddBytes(-g.bytes)
		g.quota = nil
	}
}

// newGroupLocked creates and routes to a group charged to quota (nil: none). b.mu must be
// held.
func (b *Engine) newGroupLocked(gc broker.GroupConfig, quota *broker.Quota) *group {
	dlq := gc.DeadLetterTopic
	if dlq == "" {
		dlq = deadletter.DefaultTopic(gc.ID)
	}
	g := &group{b: b, id: gc.ID, name: gc.Name, patterns: gc.Patterns, maxDeliveries: gc.MaxDeliveries, dlq: dlq, dispatch: gc.Dispatch,
		limits: b.groupLimits(gc.Limits), waiting: make(map[uint64]*entry), quota: quota}
	if gc.Dispatch.Keyed() {
		g.keys = newKeyed(gc.Dispatch)
	}
	b.groups[gc.ID] = g
	b.groupNames[gc.Name] = gc.ID
	for _, p := range gc.Patterns {
		b.index.add(p, g)
	}
	return g
}

// rebindable reports whether a member asking for o may redefine g: g has no member (so
// nobody holds the name) and o asks for other settings. b.mu must be held.
func (g *group) rebindable(o *broker.SubscribeOptions, patterns []string) bool {
	if g.hasMembers() {
		return false
	}
	return g.name != o.Group || !slices.Equal(g.patterns, patterns) ||
		(o.MaxDeliveries != 0 && o.MaxDeliveries != g.maxDeliveries) ||
		(o.Dispatch.Ordering != broker.OrderingNone && o.Dispatch.Ordering != g.dispatch.Ordering) ||
		(o.Dispatch.FairBy != "" && o.Dispatch.FairBy != g.dispatch.FairBy) ||
		(o.DeadLetterTopic != "" && o.DeadLetterTopic != g.dlq)
}

// rebindLocked redefines a group that has no members after the settings of o: a name is
// bound to its first definition only while the group has members (or is declared), so that
// nobody can squat a group name. Queued messages that the new patterns do not match are
// dropped and counted. b.mu must be held.
func (b *Engine) rebindLocked(g *group, o *broker.SubscribeOptions, patterns []string) {
	for _, p := range g.patterns {
		b.index.remove(p, g)
	}
	delete(b.groupNames, g.name)
	g.mu.Lock()
	old := g.patterns
	g.name, g.patterns, g.maxDeliveries = o.Group, patterns, o.MaxDeliveries
	g.dlq = o.DeadLetterTopic
	g.redispatchLocked(o.Dispatch)
	if g.dlq == "" {
		g.dlq = deadletter.DefaultTopic(g.id)
	}
	dropped := g.dropUnmatchedLocked()
	if g.quota != o.Quota { // the caller took the group from o.Quota
		g.quota.ReleaseGroup()
		g.quota.AddBytes(-g.bytes)
		o.Quota.AddBytes(g.bytes)
		g.quota = o.Quota
	}
	g.mu.Unlock()
	b.groupNames[g.name] = g.id
	for _, p := range patterns {
		b.index.add(p, g)
	}
	b.log.Warn("consumer group redefined by a member with other settings while it had no members",
		"subscription", g.id, "group", g.name, "old_patterns", old, "patterns", patterns, "queued_messages_dropped", dropped)
}

// dropUnmatchedLocked drops what g holds that its patterns no longer match, counted as
// dropped.
func (g *group) dropUnmatchedLocked() int {
	n := g.dropWaitingLocked(func(e *entry) bool {
		for _, p := range g.patterns {
			if broker.Pattern(p).Match(e.msg.Topic) {
				return false
			}
		}
		return true
	})
	g.dropped += uint64(n)
	return n
}

// expired reports whether g has had no member for expireAfter at now.
func (g *group) expired(now, expireAfter int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members) == 0 && g.emptySince != 0 && !g.removed && now-g.emptySince >= expireAfter
}

// remove marks g removed and drops what it holds; it returns how many messages that was.
func (g *group) remove() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removed = true
	g.clearDeadLocked()
	return g.dropAllLocked()
}

// dropAllLocked lets go of everything queued or delayed and returns how many messages that
// was (the group is being purged or removed).
func (g *group) dropAllLocked() int {
	n := g.dropWaitingLocked(func(*entry) bool { return true })
	g.queue, g.delayed = leveled[*entry]{}, nil
	return n
}

// redispatchLocked gives g the dispatch d (a group without members redefined): what it has
// queued or delayed is queued again under d, in publish order (a delay is cut short).
func (g *group) redispatchLocked(d broker.Dispatch) {
	if d == g.dispatch {
		return
	}
	var es []*entry
	g.eachQueuedLocked(func(e *entry) {
		if !e.settled {
			es = append(es, e)
		}
	})
	for _, e := range g.delayed {
		if !e.settled {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.msg.ID, b.msg.ID) })
	if g.keys != nil {
		g.keysCostLocked(-g.keys.bytes)
	}
	g.queue, g.delayed, g.keys, g.dispatch = leveled[*entry]{}, nil, nil, d
	if d.Keyed() {
		g.keys = newKeyed(d)
	}
	for _, e := range es {
		e.delayed, e.out, e.tn, e.ol, e.lvl = false, false, nil, nil, d.Level(e.msg.Priority)
		if g.keys != nil {
			g.keysCostLocked(g.keys.push(e))
		} else {
			g.queue.pushBack(e, e.lvl)
		}
	}
	g.queued = len(es)
}

// eachQueuedLocked calls f on every entry of g's queue, settled ones included.
func (g *group) eachQueuedLocked(f func(*entry)) {
	if g.keys != nil {
		g.keys.each(f)
		return
	}
	g.queue.levels(func(r *ring[*entry]) {
		for i := range r.len() {
			f(r.at(i))
		}
	})
}

// dropWaitingLocked lets go of the queued and delayed messages that drop selects (settled
// where they stand) and returns how many.
func (g *group) dropWaitingLocked(drop func(*entry) bool) int {
	n := 0
	forget := func(e *entry) {
		if e.settled || !drop(e) {
			return
		}
		g.settleLocked(e)
		n++
	}
	g.eachQueuedLocked(forget)
	for _, e := range g.delayed {
		forget(e)
	}
	return n
}

func (g *group) hasMembers() bool { return g.memberCount() > 0 }
