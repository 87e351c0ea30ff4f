package jetstream

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
)

// A consumer group is a durable JetStream pull consumer of the stream, named after its
// subscription_id, whose filter subjects are the group's patterns under <prefix>.g. and
// whose metadata holds the group's definition, so that every node (and a restarted one)
// reads it. Each member on this node pulls for itself: it asks JetStream for as many
// messages as it has room for (max_in_flight minus what it holds and has asked for), so
// JetStream hands messages to members in the order they asked, and a member never holds
// more than its max_in_flight. Ack deadlines, nacks, touches and members leaving are
// applied here (with the hooks) and passed to JetStream as +ACK, -NAK (with a delay),
// +WPI and +TERM; the consumer's own AckWait, longer than every member's deadline, only
// redelivers what a node that died held.

const (
	metaID            = "tinybroker-subscription-id"
	metaGroup         = "tinybroker-group"
	metaPatterns      = "tinybroker-patterns"
	metaMaxDeliveries = "tinybroker-max-deliveries"
	metaDLQ           = "tinybroker-dead-letter-topic"
	metaDeclared      = "tinybroker-declared"
	metaLimits        = "tinybroker-limits" // a declared group's own GroupLimits, as JSON

	// refreshEvery: a group that looks full asks JetStream how much it really holds at most
	// this often (see admit).
	refreshEvery = 100 * time.Millisecond

	pullExpires = 10 * time.Second // a member's pull request waits this long for messages
	ackWaitPad  = 5 * time.Second  // the consumer's AckWait: the longest member deadline plus this
)

type group struct {
	e        *Engine
	id       string
	consumer string
	// created is when JetStream created the consumer (its identity: one deleted and made
	// again under the same name is another). Written under Engine.mu.
	created time.Time

	// The definition: written under Engine.mu and group.mu, read under either.
	name          string
	patterns      []string
	maxDeliveries int
	dlq           string
	declared      bool
	ackWait       time.Duration
	quota         *broker.Quota
	own           broker.GroupLimits // as declared (zero: the engine's defaults)
	limits        broker.GroupLimits // in force: own, then the engine's defaults

	mu        sync.Mutex
	members   []*member
	memberSeq uint64
	// waiting holds what this node took back from its members until JetStream redelivers
	// it, so that a late ack settles it; delayed, when the nacked ones' delays end (stats).
	waiting                                              map[uint64]*broker.Message
	delayed                                              map[uint64]time.Time
	draining, removed                                    bool
	delivered, acked, redelivered, deadLettered, dropped uint64
	nacked, timedOut, leftBehind                         uint64
	// The bounds (admit): queued is what JetStream has not delivered yet (NumPending) as of
	// refreshed, plus what this node stored for the group since, less what it received;
	// bytes what the group holds (queued, in flight, delayed) by heldCost, counted by this
	// node as it stores and settles messages. Exact on one node; see RATIONALE.md for a
	// cluster.
	queued    int
	skipped   int // stored while the group refused them, not yet passed by its consumer
	bytes     int64
	refreshed time.Time
	rejected  uint64
	full      bool
	// The dead letters it keeps (dlq.go), as last counted, and those it let go of.
	// deadMu orders counting them against changing them: every change of the store this
	// node makes (a letter stored, deleted) holds it shared until deadCount has it too; a
	// count (JetStream's, which replaces deadCount) holds it alone, so that it neither
	// misses nor counts twice a change made while JetStream was asked.
	deadMu      sync.RWMutex
	deadCount   int   // -1: not counted yet
	deadAvg     int64 // what a letter costs, about (see deadBytesLocked)
	deadDropped uint64
	deadFull    bool
}

type member struct {
	g           *group
	s           *Subscription
	maxInFlight int
	ackDeadline time.Duration
	peer        string
	joined      int64
	inbox       string
	sub         *nats.Subscription
	held        map[uint64]*held // delivered, not yet settled, by stream sequence
	// A member has one pull request open at a time (JetStream delivers a message with its
	// own subject, so the messages of two requests could not be told apart): reqID names
	// it (0: none), remaining is how many messages it may still bring.
	reqID     uint64
	reqSeq    uint64
	remaining int
	left      bool
	// One timer per member takes back what it holds past its deadline (sweep): a timer per
	// delivery was a third of a delivery's CPU in the engine (W2 profile). timerAt is when
	// it fires (zero: not armed).
	timer   *time.Timer
	timerAt time.Time
}

type held struct {
	msg     *broker.Message
	reply   string
	info    ackInfo
	attempt uint32
	sentAt  time.Time
	due     time.Time // its ack deadline, as the member's last touch left it
}

func (g *group) matches(topic string) bool {
	for _, p := range g.patterns {
		if broker.Pattern(p).Match(topic) {
			return true
		}
	}
	return false
}

// filters are the consumer's filter subjects: the patterns that no other pattern of the
// group covers (JetStream refuses filters that overlap that way).
func (e *Engine) filters(patterns []string) []string {
	var out []string
	for i, p := range patterns {
		covered := false
		for j, q := range patterns {
			if i != j && broker.Pattern(q).Covers(p) && (!broker.Pattern(p).Covers(q) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, e.subjG+p)
		}
	}
	return out
}

func (e *Engine) consumerConfig(g *group) jetstream.ConsumerConfig {
	pj, _ := json.Marshal(g.patterns)
	cc := jetstream.ConsumerConfig{Durable: g.consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: g.ackWait,
		MaxDeliver: -1, MaxAckPending: -1, MaxWaiting: 8192, DeliverPolicy: jetstream.DeliverNewPolicy,
		Replicas: e.opts.Replicas, MemoryStorage: e.opts.MemoryStorage,
		Description: "tinybroker consumer group " + g.name,
		Metadata: map[string]string{metaID: g.id, metaGroup: g.name, metaPatterns: string(pj),
			metaMaxDeliveries: strconv.Itoa(g.maxDeliveries), metaDLQ: g.dlq, metaDeclared: strconv.FormatBool(g.declared)}}
	if !g.declared && e.opts.GroupExpireAfter > 0 {
		cc.InactiveThreshold = e.opts.GroupExpireAfter
	}
	if g.own != (broker.GroupLimits{}) {
		lj, _ := json.Marshal(g.own)
		cc.Metadata[metaLimits] = string(lj)
	}
	if f := e.filters(g.patterns); len(f) == 1 {
		cc.FilterSubject = f[0]
	} else {
		cc.FilterSubjects = f
	}
	return cc
}

func (e *Engine) newGroup(id string) *group {
	return &group{e: e, id: id, consumer: encodeName(id), waiting: make(map[uint64]*broker.Message), delayed: make(map[uint64]time.Time), deadCount: -1}
}

// groupFromInfo makes a group of a consumer tinybroker made, or nil.
func (e *Engine) groupFromInfo(ci *jetstream.ConsumerInfo) *group {
	md := ci.Config.Metadata
	id := md[metaID]
	if id == "" || encodeName(id) != ci.Name {
		return nil
	}
	g := e.newGroup(id)
	g.name, g.dlq, g.ackWait, g.created = md[metaGroup], md[metaDLQ], ci.Config.AckWait, ci.Created
	_ = json.Unmarshal([]byte(md[metaPatterns]), &g.patterns)
	g.maxDeliveries, _ = strconv.Atoi(md[metaMaxDeliveries])
	g.declared = md[metaDeclared] == "true"
	if lj := md[metaLimits]; lj != "" {
		_ = json.Unmarshal([]byte(lj), &g.own)
	}
	g.limits = e.groupLimits(g.own)
	g.queued, g.refreshed = int(ci.NumPending), time.Now() // what it refused, if any, included
	// What it held before this node knew it (a restart): its messages' costs are not known
	// here, so count each as the stream's average.
	if held := int64(ci.NumPending) + int64(ci.NumAckPending); held > 0 {
		g.bytes = held * e.avgCost()
	}
	return g
}

// groupLimits fills l's zero values with the engine's defaults.
func (e *Engine) groupLimits(l broker.GroupLimits) broker.GroupLimits {
	return l.Or(e.opts.GroupLimits())
}

// avgCost is the heldCost of the stream's average message, for messages stored before
// this node counted them.
func (e *Engine) avgCost() int64 {
	ctx, cancel := e.ctx()
	defer cancel()
	s, err := e.js.Stream(ctx, e.opts.Stream)
	if err != nil {
		return heldCost("", nil, nil, 0)
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return heldCost("", nil, nil, 0)
	}
	return heldCost("", make([]byte, st.Bytes/st.Msgs), nil, 0)
}

// admit charges a message of cost to g, unless g is at one of its bounds: then a
// "drop_oldest" group makes room by ending its oldest queued message, and a "reject" group
// (or one with nothing queued to drop) refuses it with ErrGroupFull. A group that looks
// full asks JetStream first how much it holds (at most every refreshEvery), since members
// on other nodes may have taken messages meanwhile; in a cluster, so does any group whose
// count is older than refreshEvery, since other nodes may have published to it.
func (g *group) admit(cost int64) error {
	refreshed := false
	for {
		g.mu.Lock()
		if !refreshed && !g.e.solo && g.claimRefreshLocked() {
			// In a cluster, other nodes publish to the group too: look at most every
			// refreshEvery, full or not.
			g.mu.Unlock()
			refreshed = true
			g.refresh()
			continue
		}
		over := g.overLocked(cost)
		if over == "" {
			g.queued++
			g.bytes += cost
			g.noteDrainedLocked()
			g.mu.Unlock()
			g.quota.AddBytes(cost)
			return nil
		}
		stale := !refreshed && g.claimRefreshLocked()
		drop := g.limits.Overflow == broker.OverflowDropOldest && g.queued > 0
		g.mu.Unlock()
		if stale {
			refreshed = true
			g.refresh()
			continue
		}
		if drop && g.dropOldest() {
			continue
		}
		g.mu.Lock()
		g.rejected++
		g.noteFullLocked(over)
		name := g.name
		g.mu.Unlock()
		return fmt.Errorf("%w: consumer group %q (subscription %q) is at %s; add members or ack faster, raise the limit, or use overflow \"drop_oldest\"",
			broker.ErrGroupFull, name, g.id, over)
	}
}

// claimRefreshLocked says whether the group's count is older than refreshEvery, and if so
// marks it fresh, so that one caller asks JetStream while the others go on with the count
// they have. g.mu must be held.
func (g *group) claimRefreshLocked() bool {
	if time.Since(g.refreshed) < refreshEvery {
		return false
	}
	g.refreshed = time.Now()
	return true
}

// overLocked says which bound taking one more message of cost bytes would pass, or "".
func (g *group) overLocked(cost int64) string {
	switch {
	case g.queued+len(g.waiting)-len(g.delayed) >= g.limits.MaxQueued:
		return fmt.Sprintf("its limit of %d queued messages (groups { max_queued })", g.limits.MaxQueued)
	case g.bytes+cost > g.limits.MaxQueuedBytes:
		return fmt.Sprintf("its limit of %d bytes held (groups { max_queued_bytes }; it holds %d)", g.limits.MaxQueuedBytes, g.bytes)
	case g.quota != nil:
		return g.quota.Over(cost)
	}
	return ""
}

// release gives back the cost of a message the group no longer holds (acked, ended), or,
// with queued set, one it never got to a member (not stored after all, dropped, purged).
func (g *group) release(cost int64, queued bool) {
	g.mu.Lock()
	g.releaseLocked(cost, queued)
	g.mu.Unlock()
}

func (g *group) releaseLocked(cost int64, queued bool) {
	if queued && g.queued > 0 {
		g.queued--
	}
	// A message another node stored was never charged here: the count stays at 0 at least.
	cost = min(cost, g.bytes)
	g.bytes -= cost
	g.quota.AddBytes(-cost)
	g.noteDrainedLocked()
}

// skipping counts n more (or fewer) messages stored that g refused.
func (g *group) skipping(n int) {
	g.mu.Lock()
	g.skipped = max(0, g.skipped+n)
	g.mu.Unlock()
}

// refresh takes what JetStream says the group has not delivered, cluster-wide.
func (g *group) refresh() {
	ctx, cancel := g.e.ctx()
	defer cancel()
	c, err := g.e.js.Consumer(ctx, g.e.opts.Stream, g.consumer)
	if err != nil {
		g.mu.Lock()
		g.refreshed = time.Now()
		g.mu.Unlock()
		return
	}
	g.counted(c.CachedInfo())
}

// counted takes the group's state from its consumer's, as JetStream just gave it.
func (g *group) counted(ci *jetstream.ConsumerInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshed = time.Now()
	g.queued = max(0, int(ci.NumPending)-g.skipped)
	if ci.NumPending == 0 && ci.NumAckPending == 0 { // holds nothing: no drift left either
		g.quota.AddBytes(-g.bytes)
		g.bytes = 0
	}
}

// dropOldest ends the oldest message JetStream has not delivered to the group yet (no
// member has room for it, or it would have been), for OverflowDropOldest. It says whether
// there was one.
func (g *group) dropOldest() bool {
	n, err := g.e.takeQueued(g, 1)
	if err != nil {
		g.e.log.Warn("could not drop a full group's oldest message", "group", g.id, "error", err)
	}
	if n > 0 {
		g.mu.Lock()
		g.dropped += uint64(n)
		g.mu.Unlock()
	}
	return n > 0
}

// noteFullLocked logs, once per episode, that the group refuses or drops publishes.
func (g *group) noteFullLocked(why string) {
	if g.full {
		return
	}
	g.full = true
	g.e.log.Warn("consumer group full: publishes to it are refused or drop its oldest messages until it drains",
		"subscription", g.id, "group", g.name, "at", why, "overflow", overflowName(g.limits.Overflow), "members", len(g.members), "queued", g.queued, "bytes", g.bytes)
}

// noteDrainedLocked logs the end of a full episode once the group is back under half its
// bounds.
func (g *group) noteDrainedLocked() {
	if !g.full || g.queued > g.limits.MaxQueued/2 || g.bytes > g.limits.MaxQueuedBytes/2 {
		return
	}
	g.full = false
	g.e.log.Warn("consumer group drained: it accepts publishes again", "subscription", g.id, "group", g.name, "queued", g.queued, "bytes", g.bytes)
}

func overflowName(o broker.Overflow) string {
	if o == broker.OverflowDropOldest {
		return "drop_oldest"
	}
	return "reject"
}

// groupLocked returns the group of subscription_id id, reading it from JetStream if another
// node (or an earlier run) made it; nil if there is none. Engine.mu must be held.
func (e *Engine) groupLocked(id string) (*group, error) {
	if g := e.groups[id]; g != nil {
		return g, nil
	}
	if e.fanouts[id] != nil {
		return nil, nil
	}
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.js.Consumer(ctx, e.opts.Stream, encodeName(id))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading consumer group %q from JetStream: %v", broker.ErrUnavailable, id, err)
	}
	g := e.groupFromInfo(c.CachedInfo())
	if g == nil || e.goneLocked(g) {
		return nil, nil
	}
	e.addGroupLocked(g)
	return g, nil
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
	c, err := e.js.CreateOrUpdateConsumer(ctx, e.opts.Stream, e.consumerConfig(g))
	if err != nil {
		return fmt.Errorf("%w: JetStream refused consumer group %q: %v", broker.ErrUnavailable, g.id, err)
	}
	g.created = c.CachedInfo().Created
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
	c, err := e.js.Consumer(ctx, e.opts.Stream, name)
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
	if gone == nil || e.closing.Load() {
		return
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
	g.own, g.limits = ng.own, ng.limits
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
	g.ackWait = max(ackDeadline, e.opts.AckDeadline) + ackWaitPad
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
	e.mu.Lock()
	defer e.awaitAnnounces() // after the unlock
	defer e.mu.Unlock()
	if _, ok := e.fanouts[o.ID]; ok {
		return nil, fmt.Errorf("%w: subscription_id %q is an open fanout subscription; choose another id for the consumer group", broker.ErrGroupMismatch, o.ID)
	}
	g, err := e.groupLocked(o.ID)
	if err != nil {
		return nil, err
	}
	if g != nil && !g.declared && g.memberCount() == 0 && !g.sameDefinition(o, patterns) {
		// A group without members is redefined by its next member (RATIONALE.md, "Why do
		// groups outlive their members").
		g.mu.Lock()
		g.name, g.patterns, g.maxDeliveries = o.Group, patterns, o.MaxDeliveries
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
		gc := broker.GroupConfig{ID: o.ID, Name: o.Group, MaxDeliveries: o.MaxDeliveries, DeadLetterTopic: o.DeadLetterTopic}
		if g, err = e.createLocked(gc, patterns, false, o.AckDeadline, o.Quota); err != nil {
			return nil, err
		}
	}
	if err := g.config().CheckMember(&o, patterns); err != nil {
		return nil, err
	}
	if need := o.AckDeadline + ackWaitPad; need > g.ackWait { // JetStream must not redeliver before the member's deadline
		g.ackWait = need
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
		MaxInFlight: o.MaxInFlight, AckDeadline: o.AckDeadline, MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq}
	g.mu.Unlock()
	if err := s.st.register(s, o.Peer); err != nil {
		return nil, err
	}
	m := &member{g: g, s: s, maxInFlight: o.MaxInFlight, ackDeadline: o.AckDeadline, peer: o.Peer, joined: time.Now().UnixNano(),
		inbox: nats.NewInbox(), held: make(map[uint64]*held)}
	sub, err := e.nc.Subscribe(m.inbox+".*", m.onMsg)
	if err != nil {
		s.st.subs.Remove(s.id, s)
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	m.sub = sub
	s.m = m
	g.mu.Lock()
	g.members = append(g.members, m)
	g.pumpLocked(m)
	g.mu.Unlock()
	return s, nil
}

// config is g's definition. Engine.mu or g.mu must be held.
func (g *group) config() broker.GroupConfig {
	return broker.GroupConfig{ID: g.id, Name: g.name, Patterns: g.patterns, MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq}
}

func (g *group) sameDefinition(o broker.SubscribeOptions, patterns []string) bool {
	return g.config().CheckMember(&o, patterns) == nil
}

func (g *group) memberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}

// pumpLocked asks JetStream for as many messages as m has room for, unless a request of
// m's is still open. g.mu must be held.
func (g *group) pumpLocked(m *member) {
	if m.left || g.draining || g.removed || m.reqID != 0 {
		return
	}
	room := m.maxInFlight - len(m.held)
	if room <= 0 {
		return
	}
	m.reqSeq++
	rid := m.reqSeq
	m.reqID, m.remaining = rid, room
	expires := pullExpires
	if after := g.e.opts.GroupExpireAfter; after > 0 && !g.declared {
		// A waiting request keeps the consumer active: one left by a member that has gone
		// must lapse well within the group's expiry.
		expires = min(expires, after/2)
	}
	req := fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, room, int64(expires))
	subj := "$JS.API.CONSUMER.MSG.NEXT." + g.e.opts.Stream + "." + g.consumer
	if err := g.e.nc.PublishRequest(subj, m.inbox+"."+strconv.FormatUint(rid, 10), req); err != nil {
		g.e.log.Warn("pull request failed", "group", g.id, "error", err)
	}
	// A request JetStream lost (a leader change, a restart) ends here at the latest.
	time.AfterFunc(expires+2*time.Second, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if m.reqID == rid {
			m.reqID = 0
			g.pumpLocked(m)
		}
	})
}

func (g *group) pumpAllLocked() {
	for _, m := range g.members {
		g.pumpLocked(m)
	}
}

// onMsg handles what JetStream sends to a member's inbox: a message, or the status that
// ends a pull request.
func (m *member) onMsg(msg *nats.Msg) {
	g, e := m.g, m.g.e
	if len(msg.Data) == 0 && msg.Header.Get("Status") != "" { // sent to the request's own reply subject
		rid, _ := strconv.ParseUint(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:], 10, 64)
		code := msg.Header.Get("Status")
		if code == "100" {
			return
		}
		g.mu.Lock()
		if m.reqID == rid {
			m.reqID = 0
		}
		deleted := code == "409" && strings.Contains(strings.ToLower(msg.Header.Get("Description")), "deleted")
		if !deleted {
			g.pumpLocked(m)
		}
		g.mu.Unlock()
		if deleted {
			go e.forgetGroup(g.id, g)
		}
		return
	}
	info, ok := parseAck(msg.Reply)
	if !ok {
		return
	}
	g.mu.Lock()
	if m.reqID != 0 {
		if m.remaining--; m.remaining <= 0 {
			m.reqID = 0
		}
	}
	if skips(msg, g) { // stored while the group was full: it refused it
		if info.delivered == 1 && g.skipped > 0 {
			g.skipped--
		}
		g.pumpLocked(m)
		g.mu.Unlock()
		_ = e.nc.Publish(msg.Reply, []byte("+TERM"))
		return
	}
	if m.left || g.draining || g.removed {
		if m.left && !g.draining && !g.removed {
			// A pull request of a member that has left, answered before JetStream saw its
			// inbox go: the message goes back and waits here for JetStream to redeliver it,
			// as what a leaving member held does (leave). Counted as waiting, not queued:
			// JetStream no longer counts it as pending, and a refresh of the count would
			// otherwise lose it and let the group take one message past its bound.
			if info.delivered == 1 && g.queued > 0 {
				g.queued--
			}
			if g.waiting[info.sseq] == nil {
				g.waiting[info.sseq] = e.decode(msg, info.sseq)
			}
		}
		g.mu.Unlock()
		_ = e.nc.Publish(msg.Reply, []byte("-NAK"))
		return
	}
	if info.delivered == 1 && g.queued > 0 {
		g.queued--
	}
	bm := e.decode(msg, info.sseq)
	h := &held{msg: bm, reply: msg.Reply, info: info, attempt: info.delivered, sentAt: time.Now()}
	if g.maxDeliveries > 0 && int(info.delivered) > g.maxDeliveries {
		// JetStream redelivered it by itself (the node that held it went away) past
		// max_deliveries: it is dead.
		h.attempt--
		g.mu.Unlock()
		g.settle([]takeItem{{h: h, reason: deadletter.ReasonAckDeadline}})
		return
	}
	m.held[info.sseq] = h
	delete(g.waiting, info.sseq)
	delete(g.delayed, info.sseq)
	g.delivered++
	if h.attempt > 1 {
		g.redelivered++
	}
	h.due = h.sentAt.Add(m.ackDeadline)
	m.armLocked(h.due)
	st := m.s.st
	st.mu.Lock()
	st.pushLocked(broker.Delivery{Msg: bm, Sub: m.s, Attempt: h.attempt})
	st.mu.Unlock()
	g.mu.Unlock()
}

// findLocked returns the delivery seq held on this node and its member: with only set,
// among pref's alone; otherwise pref's first, then every member's.
func (g *group) findLocked(pref *member, only bool, seq uint64) (*held, *member) {
	return grouping.FindHeld(pref, g.members, only, heldBy, seq)
}

// eachHeld calls f, under g.mu, on each of seqs held on this node, found as findLocked finds
// it, and returns how many were not.
func (g *group) eachHeld(pref *member, only bool, seqs []uint64, f func(seq uint64, h *held, m *member)) (unknown int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return grouping.EachHeld(pref, g.members, only, heldBy, seqs, f)
}

func heldBy(m *member) map[uint64]*held { return m.held }

// holds says whether a member of this node holds seq, or this node took it back and waits
// for JetStream to redeliver it.
func (g *group) holds(seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, _ := g.findLocked(nil, false, seq)
	return h != nil || g.waiting[seq] != nil
}

// ack settles seqs and returns how many were unknown. In a cluster, an id held by no member
// of this node is passed to JetStream, which settles it if another node's member holds it
// (and ignores it otherwise): it is not counted as unknown.
func (g *group) ack(pref *member, seqs []uint64) (unknown int) {
	if len(seqs) == 0 {
		return 0
	}
	hooks := g.e.currentHooks()
	var events []broker.AckEvent
	g.mu.Lock()
	if hooks != nil && !hooks.WantsAck(g.name) {
		hooks = nil
	}
	now := time.Now()
	for _, seq := range seqs {
		if h, m := g.findLocked(pref, false, seq); h != nil {
			delete(m.held, seq)
			g.acked++
			g.releaseLocked(msgCost(h.msg), false)
			_ = g.e.nc.Publish(h.reply, []byte("+ACK"))
			if hooks != nil {
				events = append(events, broker.AckEvent{Msg: h.msg, SystemID: h.msg.SystemID, SubscriptionID: g.id, Group: g.name, Attempt: h.attempt, InFlight: now.Sub(h.sentAt)})
			}
		} else if msg := g.waiting[seq]; msg != nil {
			delete(g.waiting, seq)
			delete(g.delayed, seq)
			g.acked++
			g.releaseLocked(msgCost(msg), false)
			_ = g.e.nc.Publish(ackSubject(g.e.opts.Stream, g.consumer, seq, 0), []byte("+ACK"))
			if hooks != nil {
				events = append(events, broker.AckEvent{Msg: msg, SystemID: msg.SystemID, SubscriptionID: g.id, Group: g.name})
			}
		} else if !g.e.solo {
			_ = g.e.nc.Publish(ackSubject(g.e.opts.Stream, g.consumer, seq, 0), []byte("+ACK"))
		} else {
			unknown++
		}
	}
	g.pumpAllLocked()
	g.mu.Unlock()
	for i := range events {
		g.e.emit(hooks.OnAck(&events[i]))
	}
	return unknown
}

// atOnce is the delay of a delivery whose member left: it goes back to JetStream for the
// other members at once, without the redelivery back-off (it did not fail).
const atOnce time.Duration = -1

// takeItem is a delivery taken back from its member, to be redelivered or dead-lettered.
type takeItem struct {
	h      *held
	reason string
	delay  time.Duration
}

// nack takes back seqs for redelivery after delay; with owner set, only its own.
func (g *group) nack(owner *member, seqs []uint64, delay time.Duration, reason string) (unknown int) {
	if reason == "" {
		reason = deadletter.ReasonNack
	}
	var items []takeItem
	unknown = g.eachHeld(owner, owner != nil, seqs, func(seq uint64, h *held, m *member) {
		delete(m.held, seq)
		g.nacked++
		items = append(items, takeItem{h: h, reason: reason, delay: delay})
	})
	g.settle(items)
	return unknown
}

// touch restarts the deadline of owner's deliveries, here and in JetStream.
func (g *group) touch(owner *member, seqs []uint64) (unknown int) {
	return g.eachHeld(owner, true, seqs, func(_ uint64, h *held, m *member) {
		h.due = time.Now().Add(m.ackDeadline) // the timer, if earlier, finds it later
		_ = g.e.nc.Publish(h.reply, []byte("+WPI"))
	})
}

// sweepSlack is how late the deadline timer may fire, so that one firing takes back the
// deliveries of a burst together.
const sweepSlack = time.Millisecond

// armLocked makes m's deadline timer fire by due (and sweepSlack). g.mu must be held.
func (m *member) armLocked(due time.Time) {
	if !m.timerAt.IsZero() && !due.Before(m.timerAt) {
		return // it fires earlier, and sweeps again
	}
	m.timerAt = due
	d := time.Until(due) + sweepSlack
	if m.timer == nil {
		m.timer = time.AfterFunc(d, func() { m.g.sweep(m) })
	} else {
		m.timer.Reset(d)
	}
}

// sweep takes back what m holds past its ack deadline, and arms the timer for the next.
func (g *group) sweep(m *member) {
	g.mu.Lock()
	m.timerAt = time.Time{}
	if m.left {
		g.mu.Unlock()
		return
	}
	now := time.Now()
	var items []takeItem
	var next time.Time
	for seq, h := range m.held {
		if !h.due.After(now) {
			delete(m.held, seq)
			g.timedOut++
			items = append(items, takeItem{h: h, reason: deadletter.ReasonAckDeadline})
		} else if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	if !next.IsZero() {
		m.armLocked(next)
	}
	g.mu.Unlock()
	g.settle(items)
}

// stopTimerLocked stops m's deadline timer, for good (m left). g.mu must be held.
func (m *member) stopTimerLocked() {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timerAt = time.Time{}
}

// leave removes m: its inbox is drained first (what JetStream still sends it is given
// back), then what it held goes back to JetStream at once, oldest first, for the other
// members.
func (g *group) leave(m *member) {
	g.mu.Lock()
	if grouping.Leave(&g.members, m) < 0 {
		g.mu.Unlock()
		return
	}
	m.left = true
	m.stopTimerLocked()
	st := m.s.st
	st.mu.Lock()
	st.removeLocked(m.s, nil)
	st.mu.Unlock()
	items := make([]takeItem, 0, len(m.held))
	for seq, h := range m.held {
		delete(m.held, seq)
		g.leftBehind++
		// Waiting from now on, as the member is gone from the group (settle decides its fate).
		g.waiting[seq] = h.msg
		items = append(items, takeItem{h: h, reason: deadletter.ReasonMemberLeft, delay: atOnce})
	}
	g.mu.Unlock()
	if err := m.sub.Drain(); err != nil {
		_ = m.sub.Unsubscribe()
	}
	g.settle(items)
}

// settle applies the hooks' verdicts (or the defaults) to deliveries taken back from their
// members: a nak (with its delay) for another attempt, past max_deliveries a dead letter,
// or a drop. Oldest first, so that JetStream redelivers them in publish order. No lock may
// be held.
func (g *group) settle(items []takeItem) {
	if len(items) == 0 {
		g.mu.Lock()
		g.pumpAllLocked()
		g.mu.Unlock()
		return
	}
	slices.SortFunc(items, func(a, b takeItem) int { return cmp.Compare(a.h.info.sseq, b.h.info.sseq) })
	hooks := g.e.currentHooks()
	g.mu.Lock()
	name, limits := g.name, g.limits
	g.mu.Unlock()
	if hooks != nil && !hooks.WantsRedeliver(name) {
		hooks = nil
	}
	var emits []broker.Draft
	for _, it := range items {
		h := it.h
		action, delay, reason := broker.RedeliverDefault, it.delay, it.reason
		if hooks != nil {
			v := hooks.OnRedeliver(&broker.RedeliverEvent{Msg: h.msg, SystemID: h.msg.SystemID, SubscriptionID: g.id, Group: name,
				Attempt: h.attempt, Reason: it.reason})
			emits = append(emits, v.Emit...)
			action = v.Action
			if action == broker.RedeliverDelay {
				delay = v.Delay
			}
			if v.Reason != "" {
				reason = v.Reason
			}
		}
		if action == broker.RedeliverDefault && g.maxDeliveries > 0 && int(h.attempt) >= g.maxDeliveries {
			action = broker.RedeliverDeadLetter
		}
		if delay != atOnce || action == broker.RedeliverDelay { // the redelivery back-off
			delay = limits.RedeliveryDelay(delay, h.attempt)
		}
		switch action {
		case broker.RedeliverDeadLetter:
			g.mu.Lock()
			delete(g.waiting, h.info.sseq)
			g.mu.Unlock()
			g.deadLetter(h, reason)
		case broker.RedeliverDrop:
			g.mu.Lock()
			delete(g.waiting, h.info.sseq)
			g.dropped++
			g.releaseLocked(msgCost(h.msg), false)
			g.mu.Unlock()
			_ = g.e.nc.Publish(h.reply, []byte("+TERM"))
		default:
			g.mu.Lock()
			g.waiting[h.info.sseq] = h.msg
			if delay > 0 {
				g.delayed[h.info.sseq] = time.Now().Add(delay)
				_ = g.e.nc.Publish(h.reply, fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(delay)))
			} else {
				_ = g.e.nc.Publish(h.reply, []byte("-NAK"))
			}
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	g.pumpAllLocked()
	g.mu.Unlock()
	g.e.emit(emits)
}

// deadLetter publishes h's message to the group's dead-letter topic with the
// tb-dead-letter-* headers, then ends it in JetStream (+TERM).
func (g *group) deadLetter(h *held, reason string) {
	g.mu.Lock()
	g.deadLettered++
	name, dlq := g.name, g.dlq
	g.mu.Unlock()
	hd := grouping.DeadLetterHeaders(h.msg, reason, g.id, name, h.attempt)
	if _, err := g.e.route(&publishing.Msg{Topic: dlq, Payload: h.msg.Payload, Headers: broker.MakeHeaders(hd)}); err != nil {
		g.e.log.Warn("dead letter refused; it stays in the group for another attempt", "topic", dlq, "error", err)
		_ = g.e.nc.Publish(h.reply, []byte(`-NAK {"delay":1000000000}`))
		return
	}
	g.release(msgCost(h.msg), false)
	_ = g.e.nc.Publish(h.reply, []byte("+TERM"))
	g.e.keepDeadLetter(g, h.msg, hd)
}

// msgCost is heldCost of a message a member received.
func msgCost(m *broker.Message) int64 { return heldCost(m.Topic, m.Payload, m.Headers, m.HeaderBytes) }

func (g *group) setDraining() {
	g.mu.Lock()
	g.draining = true
	g.mu.Unlock()
}

func (g *group) inFlight() (n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.members {
		n += len(m.held)
	}
	return n
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
		_ = m.sub.Unsubscribe()
		m.s.evict(err)
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

// evict ends a member's subscription for the engine: an Ended event on its stream, and the
// stream ends with err if it carried nothing else.
func (s *Subscription) evict(err error) {
	st := s.st
	st.mu.Lock()
	left := st.subs.Remove(s.id, s)
	s.closed = true
	st.removeLocked(s, nil)
	if !st.fin.Ended() {
		st.pushLocked(broker.Delivery{Sub: s, Ended: err})
	}
	st.mu.Unlock()
	if left == 0 {
		st.end(err)
	}
}
