package jetstream

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// lookup returns the consumer group of subscription id (read from JetStream if another node
// made it) and the stream sequence of systemID, for the unary Ack and Nack.
func (e *Engine) lookup(id, systemID string) (*group, uint64, error) {
	g, err := e.findGroup(id)
	if err != nil {
		return nil, 0, err
	}
	parse, isFanout := e.ids.parse, false
	if g != nil {
		parse = g.parseID
	} else { // an id is a group's or a fanout subscription's, never both
		e.mu.RLock()
		isFanout = e.fanouts[id] != nil
		e.mu.RUnlock()
	}
	return grouping.AckTarget(id, systemID, isFanout, g, parse)
}

// Ack acknowledges one delivered message of a consumer group. In a cluster, one that no
// member of this node holds is passed to the node whose member holds it (forward). If no
// node answers, it is refused as unknown (never delivered, settled already, or held by a
// node that went away); the ack still goes to JetStream, which settles it in the last case
// (JetStream answers an ack whether or not the message was pending, so it cannot tell).
func (e *Engine) Ack(subscriptionID, systemID string) error {
	g, seq, err := e.lookup(subscriptionID, systemID)
	if err != nil {
		return err
	}
	if e.solo || g.holds(seq) {
		if g.ack(nil, []uint64{seq}) > 0 {
			return grouping.NotHeld(systemID, subscriptionID)
		}
		return nil
	}
	if e.forward(g, fmt.Appendf(nil, "ack %d", seq)) {
		return nil
	}
	_ = e.nc.Publish(ackSubject(g.stream, g.consumer, seq, 0), []byte("+ACK"))
	return grouping.NotHeld(systemID, subscriptionID)
}

// Nack gives one delivered message back to its group, to be redelivered after delay; in a
// cluster, through the node whose member holds it.
func (e *Engine) Nack(subscriptionID, systemID string, delay time.Duration, reason string) error {
	g, seq, err := e.lookup(subscriptionID, systemID)
	if err != nil {
		return err
	}
	if e.solo || g.holds(seq) {
		if g.nack(nil, []uint64{seq}, delay, reason) > 0 {
			return grouping.NotInFlight(systemID, subscriptionID)
		}
		return nil
	}
	if e.forward(g, fmt.Appendf(nil, "nack %d %d %s", seq, int64(delay), reason)) {
		return nil
	}
	return grouping.NotInFlight(systemID, subscriptionID)
}

// forwardTimeout bounds the wait for the node holding a forwarded delivery to answer.
const forwardTimeout = 500 * time.Millisecond

// forward asks the other nodes to settle a delivery of g that one of their members holds
// ("ack SEQ" or "nack SEQ DELAY_NS REASON"); the holder applies it, with its hooks, and
// answers. It says whether one did.
func (e *Engine) forward(g *group, req []byte) bool {
	_, err := e.nc.Request(e.subjS+g.consumer, req, forwardTimeout)
	return err == nil
}

// onSettle applies a settlement another node forwarded, if this node holds the delivery.
func (e *Engine) onSettle(m *nats.Msg) {
	g := e.groupByConsumer(m.Subject[len(e.subjS):])
	var op string
	var seq uint64
	var delay int64
	n, _ := fmt.Sscanf(string(m.Data), "%s %d %d", &op, &seq, &delay)
	if g == nil || n < 2 || !g.holds(seq) {
		return
	}
	done := false
	switch op {
	case "ack":
		done = g.ack(nil, []uint64{seq}) == 0
	case "nack":
		reason := ""
		if f := strings.SplitN(string(m.Data), " ", 4); len(f) == 4 {
			reason = f[3]
		}
		done = g.nack(nil, []uint64{seq}, time.Duration(delay), reason) == 0
	}
	if done {
		_ = m.Respond(nil)
	}
}

// Declare creates the consumer group gc describes (its consumer, if no node made it yet),
// or checks that the existing one matches it.
func (e *Engine) Declare(gc broker.GroupConfig) error {
	o := gc.SubscribeOptions()
	patterns, err := e.opts.CheckSubscribe(&o)
	if err != nil {
		return err
	}
	if err := checkDispatch(o.Dispatch); err != nil {
		return err
	}
	if err := gc.Limits.CheckRedelivery(); err != nil {
		return err
	}
	if err := gc.Limits.CheckBreaker(); err != nil {
		return err
	}
	gc.ID = o.ID
	e.mu.Lock()
	defer e.awaitAnnounces() // after the unlock
	defer e.mu.Unlock()
	g, err := e.groupLocked(gc.ID)
	if err != nil {
		return err
	}
	if g == nil {
		_, err = e.createLocked(gc, patterns, true, 0, nil)
		return err
	}
	if want := e.normalReplicas(gc.Replicas); want != g.replicas {
		return fmt.Errorf("%w: consumer group %q exists with %d replicas, declared with %d; JetStream cannot move a group's messages between streams: delete the group (tinybroker groups delete %s; its messages go with it) to make it again",
			broker.ErrGroupMismatch, g.id, g.copies(), e.copiesOf(gc.Replicas), g.id)
	}
	g.mu.Lock()
	dispatch := g.dispatch
	g.mu.Unlock()
	if !g.sameDefinition(o, patterns) || (gc.DeadLetterTopic == "" && g.dlq != deadletter.DefaultTopic(gc.ID)) || gc.MaxDeliveries != g.maxDeliveries || gc.Dispatch != dispatch {
		if g.declared || g.memberCount() > 0 {
			return fmt.Errorf("%w: consumer group %q exists with other settings (patterns %q, max_deliveries %d, dead-letter topic %q, ordering %q, fair_by %q, max_priority %d)",
				broker.ErrGroupMismatch, g.id, g.patterns, g.maxDeliveries, g.dlq, dispatch.Ordering, dispatch.FairBy, dispatch.MaxPriority)
		}
	}
	g.mu.Lock()
	g.name, g.patterns, g.maxDeliveries, g.declared = gc.Name, patterns, gc.MaxDeliveries, true
	g.setDispatchLocked(gc.Dispatch)
	g.own, g.limits = gc.Limits, e.groupLimits(gc.Limits)
	g.dlq = gc.DeadLetterTopic
	if g.dlq == "" {
		g.dlq = deadletter.DefaultTopic(gc.ID)
	}
	g.mu.Unlock()
	e.changed()
	return e.saveLocked(g)
}

// refreshGroups learns the consumer groups every node made, from JetStream, and returns
// them with their consumers' state.
func (e *Engine) refreshGroups() (map[string]*jetstream.ConsumerInfo, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	own, err := e.groupStreams(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	infos := make(map[string]*jetstream.ConsumerInfo)
	for _, name := range append([]string{e.opts.Stream}, own...) {
		s, err := e.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && name != e.opts.Stream {
			continue // a group stream deleted since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
		}
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			if g := e.learn(ci); g != nil {
				infos[g.id] = ci
			}
		}
		if err := l.Err(); err != nil {
			return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
		}
	}
	return infos, nil
}

// stats describes g; ci, if not nil, is its consumer's state as JetStream (the cluster)
// sees it: queued is what JetStream has not delivered plus what waits for redelivery.
func (g *group) stats(ci *jetstream.ConsumerInfo) broker.GroupStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ci != nil {
		g.pruneWaitingLocked(ci)
	}
	st := broker.GroupStats{ID: g.id, Group: g.name, Patterns: g.patterns, Members: len(g.members),
		Delivered: g.delivered, Acked: g.acked, Redelivered: g.redelivered, DeadLettered: g.deadLettered, Dropped: g.dropped, Expired: g.expiredMsgs,
		Declared: g.declared, Paused: g.paused, BreakerTrips: g.breaker.Trips, Nacked: g.nacked, TimedOut: g.timedOut, LeftBehind: g.leftBehind, Bytes: g.bytes, Rejected: g.rejected, Published: g.published.Load(),
		DeadLetters: max(0, g.deadCount), DeadLetterBytes: g.deadBytesLocked(), DeadLettersDropped: g.deadDropped,
		DeliveryLatency: g.deliveryLatency, AckLatency: g.ackLatency}
	now := time.Now()
	for seq, t := range g.delayed {
		if t.After(now) {
			st.Delayed++
		} else {
			delete(g.delayed, seq)
		}
	}
	if g.kq != nil { // the keys this node holds messages of
		st.Keys, st.Busiest = g.kq.busiest()
	}
	for _, m := range g.members {
		st.Room += max(0, m.maxInFlight-len(m.held))
		for _, h := range m.held {
			if st.Oldest == 0 || h.msg.PublishedAt < st.Oldest {
				st.Oldest = h.msg.PublishedAt
			}
		}
	}
	st.OldestUnacked = st.Oldest
	if ci != nil {
		// JetStream counts what was delivered and not acked as pending acks, whether a member
		// holds it or it waits for redelivery; what this node took back waits (queued, or
		// delayed). Another node's taken-back messages count as in flight.
		waiting := max(0, len(g.waiting)-st.Delayed)
		// An ordered group's node parks what it pulled (keyed.go): JetStream counts those as
		// pending acks, tinybroker as queued.
		parked := 0
		if g.kq != nil {
			parked = g.kq.parked
		}
		st.Queued = max(0, int(ci.NumPending)-g.skipped) + waiting + parked
		st.InFlight = max(0, ci.NumAckPending-waiting-st.Delayed-parked)
		// Stalled: since this node first saw messages queued and its members with room while
		// the deliveries stayed as they were: the consumer's (the cluster's), and this node's
		// (an ordered group hands out what it parked without JetStream).
		if st.Queued > 0 && st.Room > 0 {
			if deliveries := ci.Delivered.Consumer + g.delivered; g.stallSeen.IsZero() || deliveries != g.stallDelivered {
				g.stallSeen, g.stallDelivered = now, deliveries
			}
			st.Stalled = g.stallSeen.UnixNano()
		} else {
			g.stallSeen = time.Time{}
		}
	} else {
		for _, m := range g.members {
			st.InFlight += len(m.held)
		}
	}
	return st
}

// countDeadLettersOnce counts g's dead letters if this node has not yet (it keeps the count
// from then on: keepDeadLetter), so that Stats reports those kept before it started.
func (e *Engine) countDeadLettersOnce(g *group) {
	g.mu.Lock()
	counted := g.deadCount >= 0
	g.mu.Unlock()
	if counted {
		return
	}
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := e.countDeadLetters(ctx, g); err != nil {
		e.log.Warn("stats: could not count a group's dead letters", "subscription", g.id, "error", err)
	}
}

// Group describes one consumer group.
func (e *Engine) Group(id string) (broker.GroupInfo, error) {
	g, err := e.knownGroup(id)
	if err != nil {
		return broker.GroupInfo{}, err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	var ci *jetstream.ConsumerInfo
	if c, err := e.js.Consumer(ctx, g.stream, g.consumer); err == nil {
		ci = c.CachedInfo()
		g.counted(ci)
	} else if errors.Is(err, jetstream.ErrConsumerNotFound) {
		e.forgetGroup(id, g)
		return broker.GroupInfo{}, fmt.Errorf("%w %q: the consumer group was deleted", broker.ErrUnknownSubscription, id)
	}
	if _, err := e.countDeadLetters(ctx, g); err != nil {
		e.log.Warn("could not count a group's dead letters", "subscription", id, "error", err)
	}
	gi := broker.GroupInfo{GroupStats: g.stats(ci), Replicas: g.copies()}
	if s, err := e.js.Stream(ctx, g.stream); err == nil { // JetStream's own word
		gi.Replicas = s.CachedInfo().Config.Replicas
	}
	g.mu.Lock()
	gi.MaxDeliveries, gi.DeadLetterTopic, gi.Limits, gi.Dispatch = g.maxDeliveries, g.dlq, g.limits, g.dispatch
	for _, m := range g.members {
		gi.MemberList = append(gi.MemberList, broker.MemberInfo{ID: m.s.set.MemberID, Peer: m.peer, InFlight: len(m.held),
			MaxInFlight: m.maxInFlight, AckDeadline: m.ackDeadline, Joined: m.joined, Priority: m.priority})
	}
	g.mu.Unlock()
	return gi, nil
}

// Stats returns the counters of this node and the consumer groups of the cluster.
func (e *Engine) Stats() broker.Stats {
	st := broker.Stats{Published: e.published.Load(), Unrouted: e.unrouted.Load(), Dropped: e.hookDropped.Load(), Refused: e.refused.Load(),
		Delivered: e.fanoutDelivered.Load(), MemoryBudget: e.storeLimit}
	st.Delayed, st.DelayedBytes, st.DelayedRefused = e.delayedStats()
	infos, err := e.refreshGroups()
	if err != nil {
		e.log.Warn("stats: JetStream did not list the consumer groups", "error", err)
	}
	e.mu.RLock()
	for _, s := range e.fanouts {
		s.st.mu.Lock()
		buffered := 0
		for _, d := range s.st.buf[s.st.head:] {
			if d.Sub == s && d.Msg != nil {
				buffered++
			}
		}
		st.Subscriptions = append(st.Subscriptions, broker.SubscriptionStats{ID: s.id, Patterns: s.patterns, Delivered: s.delivered, Dropped: s.dropped, Buffered: buffered})
		s.st.mu.Unlock()
	}
	groups := make([]*group, 0, len(e.groups))
	for _, g := range e.groups {
		groups = append(groups, g)
	}
	e.mu.RUnlock()
	for _, g := range groups {
		e.countDeadLettersOnce(g)
		gs := g.stats(infos[g.id])
		st.Delivered += gs.Delivered
		st.Acked += gs.Acked
		st.Redelivered += gs.Redelivered
		st.DeadLettered += gs.DeadLettered
		st.MemoryUsed += gs.Bytes // what the groups hold, counted as against their bounds; on disk
		st.Groups = append(st.Groups, gs)
	}
	slices.SortFunc(st.Subscriptions, func(a, b broker.SubscriptionStats) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(st.Groups, func(a, b broker.GroupStats) int { return cmp.Compare(a.ID, b.ID) })
	return st
}

// PurgeGroup drops what group id has not yet handed out: it takes the messages JetStream
// would deliver next, without a member, and ends them (+TERM). What members hold stays.
func (e *Engine) PurgeGroup(id string) (int, error) {
	g, err := e.knownGroup(id)
	if err != nil {
		return 0, err
	}
	n, err := e.takeQueued(g, 0)
	if err != nil {
		return n, fmt.Errorf("%w: purging consumer group %q: %v", broker.ErrUnavailable, id, err)
	}
	return n, nil
}

// takeQueued takes up to limit (0: all) of the messages JetStream would deliver to g next,
// without a member, and ends them (+TERM), oldest first; it returns how many it ended.
func (e *Engine) takeQueued(g *group, limit int) (int, error) {
	inbox := nats.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	subj := "$JS.API.CONSUMER.MSG.NEXT." + g.stream + "." + g.consumer
	g.mu.Lock()
	keyed, ordered, pin := g.kq != nil, g.ordered(), g.pin
	g.mu.Unlock()
	prio := ""
	if ordered {
		// Only the node JetStream pinned may take an ordered group's messages (keyed.go).
		if pin == "" {
			return 0, fmt.Errorf("consumer group %q is ordered and this node does not dispatch it now: do this on the node its members pull from", g.id)
		}
		prio = fmt.Sprintf(`,"group":%q,"id":%q`, pinGroup, pin)
	} else {
		// A prioritized consumer refuses a request without its group; at priority 0 this
		// one goes before the members' (grouping.MaxPriority-p for a member of priority p).
		prio = fmt.Sprintf(`,"group":%q,"priority":0`, pinGroup)
	}
	n := 0
	if keyed && limit == 0 { // a purge: what this node parked goes too
		g.mu.Lock()
		var parked []*kentry
		if g.kq != nil {
			parked = g.kq.sorted()
		}
		for _, ke := range parked {
			if !ke.out {
				g.chargeLocked(-g.kq.release(ke))
				g.releaseLocked(msgCost(ke.msg), false)
				_ = e.nc.Publish(ke.reply, []byte("+TERM"))
				n++
			}
		}
		g.mu.Unlock()
	}
	for limit == 0 || n < limit {
		batch := 256
		if limit > 0 {
			batch = min(batch, limit-n)
		}
		if err := e.nc.PublishRequest(subj, inbox, fmt.Appendf(nil, `{"batch":%d,"no_wait":true%s}`, batch, prio)); err != nil {
			return n, err
		}
		got := 0
		for {
			m, err := sub.NextMsg(e.opts.RequestTimeout)
			if err != nil {
				return n, err
			}
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				break
			}
			got++
			n++
			if info, ok := parseAck(m.Reply); ok {
				g.mu.Lock()
				_, redelivery := g.waiting[info.sseq]
				delete(g.waiting, info.sseq)
				delete(g.delayed, info.sseq)
				if !skips(m, g) {
					h, _, hb := decodeHeaders(m.Header)
					g.releaseLocked(heldCost(strings.TrimPrefix(m.Subject, g.subj), keyOf(m.Header), m.Data, h, hb), !redelivery)
				} else if g.skipped > 0 {
					g.skipped--
				}
				g.mu.Unlock()
			}
			_ = e.nc.Publish(m.Reply, []byte("+TERM"))
			if got == batch { // a batch filled ends without a status
				break
			}
		}
		if got == 0 {
			return n, nil
		}
	}
	return n, nil
}

// skips says whether m was stored while g was full and refused it (hdrSkip).
func skips(m *nats.Msg, g *group) bool {
	v := m.Header[hdrSkip]
	return len(v) > 0 && slices.Contains(strings.Split(v[0], ","), g.consumer)
}

// knownGroup returns the group of subscription_id id, or ErrUnknownSubscription.
func (e *Engine) knownGroup(id string) (*group, error) {
	g, err := e.findGroup(id)
	if err == nil && g == nil {
		err = fmt.Errorf("%w %q: no consumer group has this subscription_id", broker.ErrUnknownSubscription, id)
	}
	return g, err
}

// pauseFor is how long a pause lasts: until resumed (JetStream's pause has an end; a
// century is within what its clock arithmetic takes).
const pauseFor = 100 * 365 * 24 * time.Hour

// resumeKick is how long after a resume JetStream's pause ends. A resume is a pause that
// ends a moment later, not JetStream's own resume: that one does not wake the consumer, so
// the pull requests waiting since the pause got nothing until they lapsed (10 s) or a
// message came; the end of a pause does wake it. A pause with no more than a second to go
// is read as over (groupFromInfo).
const resumeKick = 20 * time.Millisecond

// PauseGroup pauses or resumes the group's consumer (JetStream's consumer pause, kept in its
// configuration), then tells every node, so that none hands out what it parked meanwhile.
func (e *Engine) PauseGroup(id string, paused bool) error {
	g, err := e.knownGroup(id)
	if err != nil {
		return err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	until := time.Now().Add(resumeKick).UTC()
	if paused {
		until = time.Now().Add(pauseFor).UTC()
	}
	if _, err = e.js.PauseConsumer(ctx, g.stream, g.consumer, until); err != nil {
		return fmt.Errorf("%w: %s consumer group %q: %v", broker.ErrUnavailable, map[bool]string{true: "pausing", false: "resuming"}[paused], id, err)
	}
	g.mu.Lock()
	g.paused, g.pauseUntil = paused, &until
	if !paused {
		g.pumpAllLocked()
	}
	g.mu.Unlock()
	e.mu.Lock()
	e.announce(g.consumer)
	e.mu.Unlock()
	e.awaitAnnounces()
	e.log.Info(map[bool]string{true: "consumer group paused", false: "consumer group resumed"}[paused], "subscription", id)
	return nil
}

// DeleteGroup deletes the group's consumer; its members end with ErrGroupDeleted, here at
// once and on other nodes when JetStream tells their pull requests.
func (e *Engine) DeleteGroup(id string) error {
	g, err := e.knownGroup(id)
	if err != nil {
		return err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	if err := e.js.DeleteConsumer(ctx, g.stream, g.consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: deleting consumer group %q: %v", broker.ErrUnavailable, id, err)
	}
	if err := e.deleteGroupStream(ctx, g); err != nil {
		return fmt.Errorf("%w: deleting the stream of consumer group %q: %v", broker.ErrUnavailable, id, err)
	}
	e.mu.Lock()
	e.announce(g.consumer)
	e.mu.Unlock()
	e.awaitAnnounces()
	e.forgetGroup(id, g)
	if _, err := e.purgeDeadLetters(g); err != nil {
		e.log.Warn("the deleted group's dead letters stay in the dead-letter stream", "subscription", id, "error", err)
	}
	return nil
}

// Ready says whether the engine serves: nil while it is connected to its NATS server and not
// shutting down.
func (e *Engine) Ready() error {
	if e.closing.Load() {
		return fmt.Errorf("%w: the broker is shutting down", broker.ErrShuttingDown)
	}
	return e.unavailable()
}

// checkDispatch checks a group's ordering and fairness (keyed.go does both).
func checkDispatch(d broker.Dispatch) error { return d.Check() }
