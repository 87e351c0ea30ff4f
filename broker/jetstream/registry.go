package jetstream

// The engine's consumer groups across the nodes of a cluster: created, learned from
// JetStream and announced to the other nodes, joined by members, forgotten when deleted.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

// groupLocked returns the group of subscription_id id, reading it from JetStream if another
// node (or an earlier run) made it; nil if there is none. Engine.mu must be held, and stays
// held for the read (Declare, which creates or checks the group under the same hold).
// Otherwise use findGroup, which reads without it.
func (e *Engine) groupLocked(id string) (*group, error) {
	if g := e.groups[id]; g != nil {
		return g, nil
	}
	if e.fanouts[id] != nil {
		return nil, nil
	}
	ci, err := e.readGroup(id)
	if ci == nil {
		return nil, err
	}
	return e.adoptLocked(ci), nil
}

// findGroup returns the group of subscription_id id as groupLocked does, reading JetStream
// without holding Engine.mu. A read is a round trip or two, up to RequestTimeout while the
// cluster is slow; Engine.mu guards the routing of new topics and the fanout dispatch, which
// a client acking or subscribing with made-up subscription_ids stalled while it was held so.
func (e *Engine) findGroup(id string) (*group, error) {
	e.mu.RLock()
	g, fanout := e.groups[id], e.fanouts[id] != nil
	e.mu.RUnlock()
	if g != nil || fanout {
		return g, nil
	}
	ci, err := e.readGroup(id)
	if ci == nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.adoptLocked(ci), nil
}

// readGroup reads the consumer of subscription_id id from JetStream: nil, nil if there is
// none.
func (e *Engine) readGroup(id string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.consumerByName(ctx, encodeName(id))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading consumer group %q from JetStream: %v", broker.ErrUnavailable, id, err)
	}
	return c.CachedInfo(), nil
}

// adoptLocked makes the group ci describes known to the engine and returns it, or the group
// the engine learned of meanwhile; nil if ci is no group of ours, was deleted since it was
// read, or its id is now a fanout subscription's. Engine.mu must be held.
func (e *Engine) adoptLocked(ci *jetstream.ConsumerInfo) *group {
	g := e.groupFromInfo(ci)
	if g == nil {
		return nil
	}
	if known := e.groups[g.id]; known != nil {
		return known
	}
	if e.fanouts[g.id] != nil || e.goneLocked(g) {
		return nil
	}
	e.addGroupLocked(g)
	return g
}

func (e *Engine) addGroupLocked(g *group) {
	e.groups[g.id] = g
	e.groupNames[g.name] = g.id
	e.changed()
}

// saveLocked creates or updates g's consumer. Engine.mu must be held.
func (e *Engine) saveLocked(g *group) error {
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.js.CreateOrUpdateConsumer(ctx, g.stream, e.consumerConfig(g))
	if err != nil {
		return fmt.Errorf("%w: JetStream refused consumer group %q: %v", broker.ErrUnavailable, g.id, err)
	}
	g.created, g.policy = c.CachedInfo().Created, c.CachedInfo().Config.PriorityPolicy
	e.announce(g.consumer)
	return nil
}

// announce tells every node that consumer group's definition changed (made, redefined,
// deleted), so that they route to it at once: a node routes a topic into the stream only
// for the groups it knows. Where the engine can count the other nodes (an embedded server:
// the subscriptions to the announcement, its routes' included), it asks each to answer once
// it has read the group again, and awaitAnnounces waits for them: a member hears
// "subscribed" only when a publish on any node reaches its group. Engine.mu must be held.
func (e *Engine) announce(consumer string) {
	subj := e.subjX + consumer
	msg := &nats.Msg{Subject: subj, Header: nats.Header{hdrFrom: []string{e.self}}}
	var w announceWait
	if e.interestCount != nil {
		w.others = e.interestCount(subj) - 1 // this engine is one
	}
	if w.others > 0 {
		msg.Reply = nats.NewInbox()
		var err error
		if w.sub, err = e.nc.SubscribeSync(msg.Reply); err != nil {
			w.others = 0
		}
	}
	if err := e.nc.PublishMsg(msg); err != nil {
		e.log.Warn("could not tell the other nodes of a consumer group's change", "consumer", consumer, "error", err)
	}
	if w.others > 0 {
		w.consumer = consumer
		e.announcing = append(e.announcing, w)
	}
}

// announceWait is an announcement whose answers are awaited.
type announceWait struct {
	consumer string
	sub      *nats.Subscription
	others   int
}

// announceTimeout bounds the wait for the other nodes to read a changed group: one that
// does not answer in time (busy, or gone) reads it a moment later.
const announceTimeout = 2 * time.Second

// awaitAnnounces waits for the answers to the announcements made under Engine.mu, which
// must not be held (the other nodes may be announcing to this one).
func (e *Engine) awaitAnnounces() {
	e.mu.Lock()
	ws := e.announcing
	e.announcing = nil
	e.mu.Unlock()
	deadline := time.Now().Add(announceTimeout)
	for _, w := range ws {
		for got := 0; got < w.others; got++ {
			if _, err := w.sub.NextMsg(time.Until(deadline)); err != nil {
				e.log.Warn("a node did not confirm a consumer group's change in time; it may miss publishes to it for a moment",
					"consumer", w.consumer, "confirmed", got, "nodes", w.others, "error", err)
				break
			}
		}
		_ = w.sub.Unsubscribe()
	}
}

// onAnnounce reads a group another node (or this one) changed again from JetStream.
func (e *Engine) onAnnounce(m *nats.Msg) {
	if e.closing.Load() || m.Header.Get(hdrFrom) == e.self { // it knows its own changes
		return
	}
	defer func() {
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}()
	name := strings.TrimPrefix(m.Subject, e.subjX)
	ctx, cancel := e.ctx()
	c, err := e.consumerByName(ctx, name)
	cancel()
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if gone := e.groupByConsumer(name); gone != nil {
			e.forgetGroup(gone.id, gone)
		}
		return
	}
	if err != nil {
		e.log.Warn("could not read a changed consumer group", "consumer", name, "error", err)
		return
	}
	e.learn(c.CachedInfo())
}

// groupByConsumer returns the group this node knows whose consumer has that name, or nil.
func (e *Engine) groupByConsumer(name string) *group {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, g := range e.groups {
		if g.consumer == name {
			return g
		}
	}
	return nil
}

// onConsumerDeleted forgets the group whose consumer JetStream deleted: expired (its
// InactiveThreshold, GroupExpireAfter), or deleted by a node (already forgotten there).
func (e *Engine) onConsumerDeleted(m *nats.Msg) {
	gone := e.groupByConsumer(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	if gone == nil || e.closing.Load() || !strings.HasSuffix(m.Subject, "."+gone.stream+"."+gone.consumer) {
		return // not one of this engine's groups: another stream's consumer of the same name
	}
	e.log.Info("consumer group expired: no activity for group_expire_after", "subscription", gone.id, "group", gone.name,
		"expire_after", e.opts.GroupExpireAfter)
	e.forgetGroup(gone.id, gone)
	if _, err := e.purgeDeadLetters(gone); err != nil {
		e.log.Warn("the expired group's dead letters stay in the dead-letter stream", "subscription", gone.id, "error", err)
	}
}

// learn adds a group made elsewhere, or takes the definition JetStream has for a known one.
func (e *Engine) learn(ci *jetstream.ConsumerInfo) *group {
	ng := e.groupFromInfo(ci)
	if ng == nil {
		return nil
	}
	e.mu.Lock()
	if g := e.groups[ng.id]; g != nil && g.stream != ng.stream && ng.created.After(g.created) {
		// Deleted and made again elsewhere with other replicas, and the deletion missed
		// here: another group (where its messages are stored is fixed for a group's life).
		e.mu.Unlock()
		e.forgetGroup(g.id, g)
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	g := e.groups[ng.id]
	if g == nil {
		if e.goneLocked(ng) { // read before JetStream deleted it, and forgotten since
			return nil
		}
		e.addGroupLocked(ng)
		return ng
	}
	if ng.created.After(g.created) { // made again (another node), and its deletion missed here
		g.created = ng.created
	}
	g.mu.Lock()
	if g.name != ng.name {
		delete(e.groupNames, g.name)
		e.groupNames[ng.name] = g.id
	}
	g.name, g.patterns, g.maxDeliveries, g.dlq, g.declared, g.ackWait = ng.name, ng.patterns, ng.maxDeliveries, ng.dlq, ng.declared, ng.ackWait
	g.own, g.limits, g.policy = ng.own, ng.limits, ng.policy
	if g.dispatch != ng.dispatch {
		g.setDispatchLocked(ng.dispatch)
	}
	resumed := g.paused && !ng.paused
	g.paused, g.pauseUntil = ng.paused, ng.pauseUntil
	if resumed {
		g.pumpAllLocked()
	}
	g.mu.Unlock()
	e.changed()
	return g
}

// createLocked defines a new group from gc and makes its consumer. Engine.mu must be held.
func (e *Engine) createLocked(gc broker.GroupConfig, patterns []string, declared bool, ackDeadline time.Duration, q *broker.Quota) (*group, error) {
	if other, ok := e.groupNames[gc.Name]; ok && other != gc.ID {
		return nil, fmt.Errorf("%w: consumer_group %q belongs to subscription_id %q; members must share both", broker.ErrGroupMismatch, gc.Name, other)
	}
	if len(e.groups) >= e.opts.MaxGroups {
		return nil, fmt.Errorf("%w: the broker holds %d consumer groups, its limit (limits { max_groups }); reuse a group or raise the limit", broker.ErrLimit, len(e.groups))
	}
	if err := q.TakeGroup(); err != nil {
		return nil, err
	}
	g := e.newGroup(gc.ID)
	g.name, g.patterns, g.maxDeliveries, g.declared, g.quota = gc.Name, patterns, gc.MaxDeliveries, declared, q
	g.own, g.limits, g.refreshed = gc.Limits, e.groupLimits(gc.Limits), time.Now()
	g.dlq = gc.DeadLetterTopic
	if g.dlq == "" {
		g.dlq = deadletter.DefaultTopic(gc.ID)
	}
	g.setDispatchLocked(gc.Dispatch)
	g.ackWait = max(ackDeadline, e.opts.AckDeadline) + ackWaitPad
	e.place(g, gc.Replicas)
	if g.ownStream() {
		if err := e.ensureGroupStream(g); err != nil {
			q.ReleaseGroup()
			return nil, err
		}
	}
	if err := e.saveLocked(g); err != nil {
		q.ReleaseGroup()
		return nil, err
	}
	e.addGroupLocked(g)
	return g, nil
}

// join makes s a member of the group o names, creating or redefining the group as the
// memory engine does.
func (e *Engine) join(o broker.SubscribeOptions, patterns []string, s *Subscription) (*Subscription, error) {
	// A group another node made is read from JetStream before Engine.mu is taken (findGroup
	// says why); one it does not find is made below.
	if _, err := e.findGroup(o.ID); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.awaitAnnounces() // after the unlock
	defer e.mu.Unlock()
	if _, ok := e.fanouts[o.ID]; ok {
		return nil, fmt.Errorf("%w: subscription_id %q is an open fanout subscription; choose another id for the consumer group", broker.ErrGroupMismatch, o.ID)
	}
	g := e.groups[o.ID]
	var err error
	if g != nil && !g.declared && g.memberCount() == 0 && !g.sameDefinition(o, patterns) {
		// A group without members is redefined by its next member (RATIONALE.md, "Why do
		// groups outlive their members").
		g.mu.Lock()
		g.name, g.patterns, g.maxDeliveries = o.Group, patterns, o.MaxDeliveries
		g.setDispatchLocked(o.Dispatch)
		g.dlq = o.DeadLetterTopic
		if g.dlq == "" {
			g.dlq = deadletter.DefaultTopic(o.ID)
		}
		g.mu.Unlock()
		for name, id := range e.groupNames {
			if id == g.id {
				delete(e.groupNames, name)
			}
		}
		e.groupNames[g.name] = g.id
		if err := e.saveLocked(g); err != nil {
			return nil, err
		}
		e.changed()
	}
	if g == nil {
		gc := broker.GroupConfig{ID: o.ID, Name: o.Group, MaxDeliveries: o.MaxDeliveries, DeadLetterTopic: o.DeadLetterTopic, Dispatch: o.Dispatch}
		if g, err = e.createLocked(gc, patterns, false, o.AckDeadline, o.Quota); err != nil {
			return nil, err
		}
	}
	if err := g.checkMember(o, patterns); err != nil {
		return nil, err
	}
	// JetStream must not redeliver before the member's deadline; and an unordered group's
	// consumer takes the prioritized policy once a member with a priority comes (until
	// then its members' priorities, all 0, would change nothing; and a node of an older
	// version, which pulls without the priority group, keeps working: priority.go).
	need := o.AckDeadline + ackWaitPad
	if prioritize := o.Priority > 0 && !g.ordered() && g.policy != jetstream.PriorityPolicyPrioritized; need > g.ackWait || prioritize {
		if prioritize {
			g.policy = jetstream.PriorityPolicyPrioritized
		}
		g.ackWait = max(g.ackWait, ackWaitFor(need))
		if err := e.saveLocked(g); err != nil {
			return nil, err
		}
	}
	s.g, s.id = g, o.ID
	g.mu.Lock()
	g.memberSeq++
	memberID := g.name + "-" + strconv.FormatUint(g.memberSeq, 10)
	if !e.solo { // unique in the cluster
		memberID = g.name + "-" + e.nc.ConnectedServerName() + "-" + strconv.FormatUint(g.memberSeq, 10)
	}
	s.set = broker.Settings{ID: o.ID, MemberID: memberID, Mode: broker.Balanced, Group: g.name, Patterns: s.patterns,
		MaxInFlight: o.MaxInFlight, AckDeadline: o.AckDeadline, MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq, Dispatch: g.dispatch, Priority: o.Priority}
	g.mu.Unlock()
	if err := s.st.register(s, o.Peer); err != nil {
		return nil, err
	}
	m := &member{g: g, s: s, maxInFlight: o.MaxInFlight, ackDeadline: o.AckDeadline, priority: o.Priority, peer: o.Peer, joined: time.Now().UnixNano(),
		inbox: nats.NewInbox(), held: make(map[uint64]*held)}
	g.mu.Lock()
	ordered := g.kq != nil
	g.mu.Unlock()
	if ordered {
		// One inbox for the group's members on this node (keyed.go): what JetStream sends
		// them arrives in its order.
		if err := g.keyedInbox(); err != nil {
			s.st.subs.Remove(s.id, s)
			return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
		}
	} else {
		sub, err := e.nc.Subscribe(m.inbox+".*", m.onMsg)
		if err != nil {
			s.st.subs.Remove(s.id, s)
			return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		m.sub = sub
	}
	s.m = m
	g.mu.Lock()
	g.members = append(g.members, m)
	g.armTickLocked()
	g.pumpAllLocked()
	g.mu.Unlock()
	return s, nil
}

// forgetGroup drops group g (its consumer was deleted, here or on another node): its
// members here end with ErrGroupDeleted.
func (e *Engine) forgetGroup(id string, g *group) {
	e.mu.Lock()
	if g == nil {
		g = e.groups[id]
	}
	if g == nil || e.groups[id] != g {
		e.mu.Unlock()
		return
	}
	delete(e.groups, id)
	if e.groupNames[g.name] == id {
		delete(e.groupNames, g.name)
	}
	e.rememberGoneLocked(g)
	e.changed()
	e.mu.Unlock()
	g.mu.Lock()
	g.removed = true
	if g.tick != nil {
		g.tick.Stop()
		g.tick = nil
	}
	if g.kq != nil {
		for _, e := range g.kq.bySeq {
			if e.timer != nil {
				e.timer.Stop()
			}
		}
	}
	members := g.members
	g.members = nil
	for _, m := range members {
		m.left = true
		m.stopTimerLocked()
		clear(m.held)
	}
	g.quota.AddBytes(-g.bytes)
	g.bytes = 0
	g.mu.Unlock()
	g.quota.ReleaseGroup()
	err := fmt.Errorf("%w: consumer group %q (subscription %q) was deleted by an administrator; subscribing again creates a new, empty group", broker.ErrGroupDeleted, g.name, g.id)
	for _, m := range members {
		if m.sub != nil {
			_ = m.sub.Unsubscribe()
		}
		m.s.evict(err)
	}
	g.mu.Lock()
	ksub := g.ksub
	g.ksub = nil
	g.mu.Unlock()
	if ksub != nil {
		_ = ksub.Unsubscribe()
	}
}

// goneKey names a consumer JetStream deleted: its name and its creation time.
type goneKey struct {
	consumer string
	created  int64
}

// rememberGoneLocked notes that g's consumer was deleted and g forgotten, so that a reading
// of it from before the deletion (a listing for Stats, an announcement's) does not bring g
// back: no deletion would follow to forget it again, and an expired group would stay for
// good. A reading older than goneFor is not in flight any more. Engine.mu must be held.
func (e *Engine) rememberGoneLocked(g *group) {
	now := time.Now()
	for k, t := range e.gone {
		if now.Sub(t) > e.goneFor() {
			delete(e.gone, k)
		}
	}
	if g.created.IsZero() {
		return
	}
	if e.gone == nil {
		e.gone = make(map[goneKey]time.Time)
	}
	e.gone[goneKey{g.consumer, g.created.UnixNano()}] = now
}

// goneLocked says whether g, as just read from JetStream, is a consumer that was deleted
// and forgotten meanwhile. Engine.mu must be held.
func (e *Engine) goneLocked(g *group) bool {
	_, ok := e.gone[goneKey{g.consumer, g.created.UnixNano()}]
	return ok && !g.created.IsZero()
}

// goneFor is how long a deleted consumer is remembered: longer than any call to JetStream
// that read it before it went.
func (e *Engine) goneFor() time.Duration { return 2*e.opts.RequestTimeout + time.Minute }
