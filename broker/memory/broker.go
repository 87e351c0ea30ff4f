// Package memory is tinybroker's embedded engine, its default: topic routing, fanout
// subscriptions and balanced consumer groups with acks, redelivery and dead-lettering, all in
// the memory of one process. It implements broker.Engine and knows nothing of gRPC or Wasm.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
	"github.com/tinybroker/tinybroker/broker/internal/streaming"
)

// SlowConsumerPolicy is what happens to a fanout subscriber whose buffer is full.
type SlowConsumerPolicy int

const (
	// SlowConsumerDisconnect ends the subscription with ErrSlowConsumer.
	SlowConsumerDisconnect SlowConsumerPolicy = iota
	// SlowConsumerDrop drops the message for that subscriber and counts it.
	SlowConsumerDrop
)

// Options configure a Broker. Zero values take the defaults shown.
type Options struct {
	// Limits are the rules every engine applies (broker.Limits: message and header sizes,
	// subscriptions per stream, groups...).
	broker.Limits

	// MaxMemoryBytes is the budget, in bytes, for everything the broker holds for later:
	// messages queued, in flight or delayed in consumer groups and buffered for fanout
	// subscribers, counted as what they really cost (see memory.go). Consumer groups together
	// may use 3/4 of it. Default: DefaultMemoryLimit() (a quarter of GOMEMLIMIT).
	MaxMemoryBytes int64

	FanoutBufferMessages int                // messages buffered per fanout subscriber (262,144)
	FanoutBufferBytes    int                // payload bytes buffered per fanout subscriber (64 MiB)
	SlowConsumer         SlowConsumerPolicy // what a full fanout buffer does (SlowConsumerDisconnect)

	// PublisherWait: how long a publish may wait for a fanout subscriber that is more than
	// half full to drain to a quarter (1s; negative: never wait). A subscriber that does not
	// drain in time is not waited for again until it has; its hard limits then apply.
	PublisherWait time.Duration

	Logger hclog.Logger // hclog.NewNullLogger() if nil

	// clock replaces the monotonic clock in tests (fakeClock): deadlines and delays then
	// fire only when the test advances it, in the test's goroutine.
	clock *fakeClock
}

func (o *Options) setDefaults() {
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = DefaultMemoryLimit()
	}
	if o.DedupeMaxBytes <= 0 { // the message ids remembered are part of the budget
		o.DedupeMaxBytes = min(64<<20, o.MaxMemoryBytes/16)
	}
	if o.MaxDelayedBytes <= 0 { // delayed messages are held in the budget
		o.MaxDelayedBytes = o.MaxMemoryBytes / 8
	}
	o.Limits = o.Limits.WithDefaults()
	o.Limits = o.Limits.WithGroupDefaults(o.MaxMemoryBytes/8, min(64<<20, o.MaxMemoryBytes/16))
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.FanoutBufferMessages, 262_144)
	def(&o.FanoutBufferBytes, 64<<20)
	if o.PublisherWait == 0 {
		o.PublisherWait = time.Second
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
}

// Engine routes published messages to subscriptions. Its methods are safe for concurrent use.
//
// Locks: their order, for both engines, is broker/internal/lockrank's ranks (RATIONALE.md,
// "Lock order"), checked under the lockrank tag. The publish path takes no broker-wide lock: it reads the index (its cache is
// lock-free), then locks each matching target on its own.
type Engine struct {
	opts      Options
	log       hclog.Logger
	ids       idCodec
	seq       atomic.Uint64 // last message sequence number
	mem       *memBudget
	epoch     time.Time // origin of now(), a monotonic clock
	epochUnix int64     // epoch's time of day, Unix nanoseconds (wallAt)
	index     *index
	sched     *scheduler
	delayed   delayQueue // messages published with a delay, until they fall due

	hooks        publishing.HookSlot
	gate         publishing.Gate // the steps of a publish every engine shares
	dedupe       *publishing.Dedupe
	unrouted     atomic.Uint64
	hookDropped  atomic.Uint64 // messages dropped by an OnPublish verdict
	refused      atomic.Uint64 // publishes refused by every consumer group they matched
	dlqFailed    atomic.Uint64
	streamSeq    atomic.Uint64 // last stream id
	closing      atomic.Bool
	shutdownOnce sync.Once
	stop         chan struct{}
	wg           sync.WaitGroup

	mu         lockrank.RWMutex[lockrank.MemoryEngine]
	fanouts    map[string]*Subscription // fanout subscriptions by id
	groups     map[string]*group        // consumer groups by subscription id
	groupNames map[string]string        // consumer group name → subscription id
	autoID     uint64
	gone       fanoutTotals // counters of closed fanout subscriptions
}

type fanoutTotals struct{ delivered uint64 }

// New starts a broker.
func New(opts Options) *Engine {
	opts.setDefaults()
	b := &Engine{
		opts:       opts,
		log:        opts.Logger,
		ids:        newIDCodec(),
		mem:        newMemBudget(opts.MaxMemoryBytes),
		epoch:      time.Now(),
		index:      newIndex(),
		sched:      newScheduler(),
		stop:       make(chan struct{}),
		fanouts:    make(map[string]*Subscription),
		groups:     make(map[string]*group),
		groupNames: make(map[string]string),
	}
	b.epochUnix = b.epoch.UnixNano()
	b.delayed.b = b
	b.dedupe = publishing.NewDedupe(opts.DedupeWindow, opts.DedupeMaxBytes, b.mem.add, b.dedupeEvicted)
	b.gate = publishing.Gate{Limits: &b.opts.Limits, Hooks: &b.hooks, Closing: &b.closing, Dedupe: b.dedupe,
		Now: func() int64 { return b.wallAt(b.now()) }}
	if opts.clock != nil {
		opts.clock.b = b
		return b
	}
	b.wg.Go(func() {
		b.sched.run(b.stop, b.now)
	})
	return b
}

// now is the broker's monotonic clock, in nanoseconds since New.
func (b *Engine) now() int64 {
	if c := b.opts.clock; c != nil {
		return c.t.Load()
	}
	return int64(time.Since(b.epoch))
}

// wallAt is the time of day, in Unix nanoseconds, at now() = at: the epoch's plus the
// monotonic clock since, so that timing a delivery against Message.PublishedAt needs no
// second clock read (time.Now costs 65-100 ns on a kvm-clock VM, as much as a delivery's
// other accounting). A step of the wall clock since the engine started skews it by the step.
// With a test's clock, it reads the time of day.
func (b *Engine) wallAt(at int64) int64 {
	if b.opts.clock != nil {
		return time.Now().UnixNano()
	}
	return b.epochUnix + at
}

// FormatID returns the system_id of message sequence number seq (a Message has it as
// SystemID).
func (b *Engine) FormatID(seq uint64) string { return b.ids.format(seq) }

// ParseID returns the sequence number of a system_id of this broker process.
func (b *Engine) ParseID(id string) (uint64, error) { return b.ids.parse(id) }

// Publish validates and routes one message. The broker keeps payload and headers: the caller
// must not modify them afterwards.
func (b *Engine) Publish(topic string, payload []byte, headers map[string]string) (broker.PublishResult, error) {
	m, emit, err := b.gate.One(topic, payload, broker.MakeHeaders(headers))
	res, err := b.routeMsg(&m, err)
	b.emit(emit)
	return res, err
}

// PublishBatch publishes a frame in order; see broker.Engine.
func (b *Engine) PublishBatch(frame []broker.Draft, res []broker.PublishResult, errs []error) {
	clear(res)
	bt := b.gate.Batch(frame, errs)
	defer bt.Release()
	for j := range bt.Msgs {
		i := bt.At[j]
		res[i], errs[i] = b.routeMsg(&bt.Msgs[j], nil)
	}
	bt.Settle(res, errs)
	b.emit(bt.Emitted())
}

// dedupeEvicted logs that the table of message ids forgot ids before their window ended
// (at the first eviction, then at every doubling of the count, so as not to flood the log).
func (b *Engine) dedupeEvicted(total uint64) {
	if total&(total-1) == 0 {
		b.log.Warn("the table of message ids is full: the oldest half of the ids is forgotten before its dedupe window ends, and a retry of one of them would be published again; raise limits { dedupe_max_bytes } or shorten dedupe_window",
			"dedupe_max_bytes", b.opts.DedupeMaxBytes, "dedupe_window", b.opts.DedupeWindow, "evicted_total", total)
	}
}

// routeMsg routes a message that passed the gate (err nil), or counts it dropped by a
// plugin's verdict.
func (b *Engine) routeMsg(m *publishing.Msg, err error) (broker.PublishResult, error) {
	switch {
	case err != nil:
		return broker.PublishResult{}, err
	case m.Drop:
		b.hookDropped.Add(1)
		seq := b.seq.Add(1)
		return broker.PublishResult{Seq: seq, SystemID: b.ids.format(seq), DroppedBy: m.DroppedBy, DropReason: m.DropReason}, nil
	case m.Delay > 0:
		return b.delayed.hold(m)
	}
	return b.routeChecked(m.Topic, m.Key, m.TTL, m.Prio, m.Payload, m.Headers, m.HB)
}

// emit routes the messages hooks emitted, without OnPublish; one refused is logged.
func (b *Engine) emit(ds []broker.Draft) {
	if len(ds) == 0 { // most publishes: no hook emitted anything
		return
	}
	for m, err := range b.gate.Emitted(ds) {
		if err == nil {
			_, err = b.routeChecked(m.Topic, m.Key, 0, 0, m.Payload, m.Headers, m.HB)
		}
		if err != nil {
			b.log.Warn("message emitted by a plugin refused", "topic", m.Topic, "error", err)
		}
	}
}

// route checks the headers of a message whose topic and payload are valid (a dead letter,
// for example), then routes it.
func (b *Engine) route(topic, key string, payload []byte, headers broker.Headers) (broker.PublishResult, error) {
	hb, err := b.opts.CheckHeaders(headers)
	if err != nil {
		return broker.PublishResult{}, err
	}
	return b.routeChecked(topic, key, 0, 0, payload, headers, hb)
}

// routeChecked delivers a valid message to every matching target that takes it; a consumer
// group at its bounds refuses it for itself only (see group.deliver). hb is the headers' size.
func (b *Engine) routeChecked(topic, key string, ttl time.Duration, prio uint8, payload []byte, headers broker.Headers, hb int) (broker.PublishResult, error) {
	return b.routeSeq(b.seq.Add(1), topic, key, ttl, prio, payload, headers, hb, true)
}

// routeSeq is routeChecked of a message whose sequence number is seq (a delayed message has
// had it since its publish). With pace unset it does not wait for slow fanout subscribers
// (waitForRoom): the scheduler's goroutine routes delayed messages, and must not stall.
func (b *Engine) routeSeq(seq uint64, topic, key string, ttl time.Duration, prio uint8, payload []byte, headers broker.Headers, hb int, pace bool) (broker.PublishResult, error) {
	targets := b.index.match(topic)
	m := &message{Message: broker.Message{ID: seq, Topic: topic, Payload: payload, Headers: headers, Key: key, TTL: ttl, Priority: prio, PublishedAt: time.Now().UnixNano(), Targets: len(targets), HeaderBytes: hb}}
	m.SystemID = b.ids.formatIn(seq, &m.idBlock)
	m.cost = grouping.MessageCost(topic, key, m.SystemID, payload, len(headers), hb, len(targets))
	b.charge(m, len(targets))
	var wait []target
	var rooms []<-chan struct{}
	var full error
	routed := 0
	for _, t := range targets {
		room, err := t.deliver(m)
		if err != nil { // not taken: give back this target's hold
			b.release(m, holderOverhead)
			switch {
			case err == errNotTaken: // a fanout subscriber that lost it (slow, closing): still routed
				routed++
			case full == nil && errors.Is(err, broker.ErrGroupFull):
				full = err
			} // otherwise a group that expired meanwhile
			continue
		}
		routed++
		if room != nil {
			wait, rooms = append(wait, t), append(rooms, room)
		}
	}
	b.release(m, 0)
	if b.log.IsDebug() {
		b.logRoute(m, targets, routed, full)
	}
	if routed == 0 {
		if full != nil { // refused by every target: tell the publisher
			b.refused.Add(1)
			return broker.PublishResult{}, full
		}
		b.unrouted.Add(1)
	}
	if len(rooms) > 0 && pace {
		b.waitForRoom(wait, rooms)
	}
	return broker.PublishResult{Seq: m.ID, SystemID: m.SystemID, Routed: routed}, nil
}

// logRoute logs where a message went, at debug level, with its trace context if it has one.
func (b *Engine) logRoute(m *message, targets []target, routed int, full error) {
	names := make([]string, 0, len(targets))
	for _, t := range targets {
		switch t := t.(type) {
		case *Subscription:
			names = append(names, "subscription "+t.id)
		case *group:
			names = append(names, "group "+t.id)
		}
	}
	args := []any{"topic", m.Topic, "system_id", m.SystemID, "targets", names, "routed", routed}
	if tp, ok := m.Headers.Get("traceparent"); ok {
		args = append(args, "traceparent", tp)
	}
	if full != nil {
		args = append(args, "refused_by_full_group", full.Error())
	}
	b.log.Debug("message routed", args...)
}

// waitForRoom paces a publisher to fanout subscribers that fell behind: it waits, at most
// PublisherWait in all, for each to drain; one that does not is marked stalled and is not
// waited for again until it drains. The message is already delivered: waiting only slows the
// next publish of this publisher.
func (b *Engine) waitForRoom(ts []target, rooms []<-chan struct{}) {
	t := time.NewTimer(b.opts.PublisherWait)
	defer t.Stop()
	for i, room := range rooms {
		select {
		case <-room:
		case <-b.stop:
			return
		case <-t.C:
			for _, tg := range ts[i:] {
				if s, ok := tg.(*Subscription); ok {
					s.stall()
				}
			}
			return
		}
	}
}

// publishDeadLetters publishes dead letters as ordinary messages. No lock may be held.
func (b *Engine) publishDeadLetters(dead []deadLetter) {
	for _, d := range dead {
		if _, err := b.route(d.topic, d.key, d.payload, broker.MakeHeaders(d.headers)); err != nil {
			b.dlqFailed.Add(1)
			b.log.Warn("dead letter refused; it is lost", "topic", d.topic, "error", err)
		}
	}
}

// Subscribe opens a subscription on a stream of its own: drain it with the Subscription's
// Next, Ready, Done and Err. Use NewStream to carry many subscriptions on one stream.
func (b *Engine) Subscribe(o broker.SubscribeOptions) (*Subscription, error) {
	s, err := b.subscribe(o, b.newStream(nil))
	if err != nil {
		return nil, err
	}
	s.own = true
	return s, nil
}

// testRegistered, if set (by a test), is called when a fanout subscription is registered
// with its stream, its "subscribed" event queued, b.mu still held.
var testRegistered func(*Engine, *Subscription)

// subscribe opens a subscription on st.
func (b *Engine) subscribe(o broker.SubscribeOptions, st *Stream) (*Subscription, error) {
	patterns, err := b.opts.AdmitSubscribe(b.closing.Load(), &o)
	if err != nil {
		return nil, err
	}
	s := &Subscription{b: b, st: st, mode: o.Mode, patterns: patterns}
	// b.mu is held from registering s with its stream to routing to it, so that a stream
	// ending meanwhile (which detaches its subscriptions under b.mu) finds s complete.
	b.mu.Lock()
	defer b.mu.Unlock()
	if o.Mode == broker.Fanout {
		if o.ID, err = grouping.FanoutID(o.ID, &b.autoID, b.fanouts, b.groups); err != nil {
			return nil, err
		}
		s.id = o.ID
		err := st.register(s, o.Peer, func() { // under the outbox lock: index.mu is a leaf
			b.fanouts[o.ID] = s
			for _, p := range patterns {
				b.index.add(p, s)
			}
		})
		if err != nil {
			return nil, err
		}
		if testRegistered != nil {
			testRegistered(b, s)
		}
		return s, nil
	}
	g, err := b.groupFor(&o, patterns)
	if err != nil {
		return nil, err
	}
	s.g = g
	s.id = o.ID
	s.bal = &broker.Settings{ID: o.ID, MemberID: g.nextMemberID(), Mode: broker.Balanced, Group: g.hookName(), Patterns: s.patterns,
		MaxInFlight: o.MaxInFlight, AckDeadline: o.AckDeadline, MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq, Dispatch: g.dispatch, Priority: o.Priority}
	if err := st.register(s, o.Peer, nil); err != nil { // the group is routed to already
		return nil, err
	}
	g.join(s, o.MaxInFlight, o.AckDeadline, o.Priority, o.Peer)
	return s, nil
}

// groupFor returns the consumer group o joins, creating it for its first member. b.mu must
// be held.
func (b *Engine) groupFor(o *broker.SubscribeOptions, patterns []string) (*group, error) {
	if _, ok := b.fanouts[o.ID]; ok {
		return nil, fmt.Errorf("%w: subscription_id %q is an open fanout subscription; choose another id for the consumer group", broker.ErrGroupMismatch, o.ID)
	}
	g := b.groups[o.ID]
	if g != nil && !g.declared && g.rebindable(o, patterns) {
		if g.quota != o.Quota { // the group changes hands: it counts against its new owner
			if err := o.Quota.TakeGroup(); err != nil {
				return nil, err
			}
		}
		b.rebindLocked(g, o, patterns)
	}
	if g == nil {
		if other, ok := b.groupNames[o.Group]; ok {
			return nil, fmt.Errorf("%w: consumer_group %q belongs to subscription_id %q; members must share both", broker.ErrGroupMismatch, o.Group, other)
		}
		if len(b.groups) >= b.opts.MaxGroups {
			return nil, fmt.Errorf("%w: the broker holds %d consumer groups, its limit (limits { max_groups }); reuse a group, let unused ones expire (groups { expire_after }) or raise the limit", broker.ErrLimit, len(b.groups))
		}
		if err := o.Quota.TakeGroup(); err != nil {
			return nil, err
		}
		return b.newGroupLocked(broker.GroupConfig{ID: o.ID, Name: o.Group, Patterns: patterns, MaxDeliveries: o.MaxDeliveries, DeadLetterTopic: o.DeadLetterTopic,
			Dispatch: o.Dispatch}, o.Quota), nil
	}
	gc := broker.GroupConfig{ID: g.id, Name: g.name, Patterns: g.patterns, MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq, Dispatch: g.dispatch}
	if err := gc.CheckMember(o, patterns); err != nil {
		return nil, err
	}
	return g, nil
}

// detach removes a subscription from routing; a group member leaves its group.
func (b *Engine) detach(s *Subscription) {
	b.mu.Lock()
	if s.g != nil {
		g, m := s.g, s.m // set under b.mu by subscribe
		b.mu.Unlock()
		g.leave(m)
		return
	}
	defer b.mu.Unlock()
	if b.fanouts[s.id] != s {
		return
	}
	delete(b.fanouts, s.id)
	for _, p := range s.patterns {
		b.index.remove(p, s)
	}
	b.gone.delivered += s.stats().Delivered
}

// expireGroup removes g if it still has no member and its time is up (a member may have
// joined since the timer fired).
func (b *Engine) expireGroup(g *group) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.groups[g.id] != g || !g.expired(b.now(), int64(b.opts.GroupExpireAfter)) {
		return
	}
	dropped := b.removeGroupLocked(g)
	b.log.Info("consumer group expired: no member for group_expire_after", "subscription", g.id, "group", g.name,
		"expire_after", b.opts.GroupExpireAfter, "messages_dropped", dropped)
}

// removeGroupLocked stops routing to g and drops what it holds; it returns how many
// messages that was. b.mu must be held, g must have no members.
func (b *Engine) removeGroupLocked(g *group) int {
	dropped := g.remove()
	g.quota.ReleaseGroup()
	delete(b.groups, g.id)
	delete(b.groupNames, g.name)
	for _, p := range g.patterns {
		b.index.remove(p, g)
	}
	return dropped
}

// lookupMessage finds the consumer group of subscription id and the sequence number of
// systemID, for the unary Ack and Nack.
func (b *Engine) lookupMessage(id, systemID string) (*group, uint64, error) {
	b.mu.RLock()
	g, isFanout := b.groups[id], b.fanouts[id] != nil
	b.mu.RUnlock()
	return grouping.AckTarget(id, systemID, isFanout, g, b.ids.parse)
}

// Ack acknowledges one delivered message of a balanced subscription.
func (b *Engine) Ack(subscriptionID, systemID string) error {
	g, seq, err := b.lookupMessage(subscriptionID, systemID)
	if err != nil {
		return err
	}
	if g.ack(nil, []uint64{seq}) > 0 {
		return grouping.NotHeld(systemID, subscriptionID)
	}
	return nil
}

// Nack gives one delivered message back to its group, to be redelivered after delay.
func (b *Engine) Nack(subscriptionID, systemID string, delay time.Duration, reason string) error {
	g, seq, err := b.lookupMessage(subscriptionID, systemID)
	if err != nil {
		return err
	}
	if g.nack(nil, []uint64{seq}, delay, reason) > 0 {
		return grouping.NotInFlight(systemID, subscriptionID)
	}
	return nil
}

// Stats returns a snapshot of the broker's counters, subscriptions sorted by id.
func (b *Engine) Stats() broker.Stats {
	st := broker.Stats{Published: b.seq.Load() - b.refused.Load(), Unrouted: b.unrouted.Load(), Dropped: b.hookDropped.Load(),
		Refused: b.refused.Load(), MemoryUsed: b.mem.used.Load(), MemoryBudget: b.mem.limit}
	st.Delayed, st.DelayedBytes, st.DelayedRefused = b.delayed.stats()
	b.mu.RLock()
	st.Delivered = b.gone.delivered
	for _, s := range b.fanouts {
		ss := s.stats()
		st.Delivered += ss.Delivered
		st.Subscriptions = append(st.Subscriptions, ss)
	}
	groups := make([]*group, 0, len(b.groups))
	for _, g := range b.groups {
		groups = append(groups, g)
	}
	b.mu.RUnlock()
	for _, g := range groups {
		gs := g.stats()
		st.Delivered += gs.Delivered
		st.Acked += gs.Acked
		st.Redelivered += gs.Redelivered
		st.DeadLettered += gs.DeadLettered
		st.Groups = append(st.Groups, gs)
	}
	slices.SortFunc(st.Subscriptions, func(a, b broker.SubscriptionStats) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(st.Groups, func(a, b broker.GroupStats) int { return cmp.Compare(a.ID, b.ID) })
	return st
}

// Shutdown stops the broker: it refuses new publishes and subscriptions at once, delivers
// nothing new to consumer groups, and waits until every in-flight message is acked and every
// fanout buffer is sent, or ctx is done. Then it ends every subscription with
// ErrShuttingDown and stops its goroutines. It returns ctx.Err() if the grace ran out with
// messages still in flight. Shutdown is idempotent; later calls return at once.
func (b *Engine) Shutdown(ctx context.Context) error {
	var err error
	b.shutdownOnce.Do(func() {
		b.closing.Store(true)
		err = b.drain(ctx)
		for _, s := range b.allSubscriptions() {
			s.end(fmt.Errorf("%w: the broker is stopping; reconnect to its replacement", broker.ErrShuttingDown))
		}
		close(b.stop)
		b.wg.Wait()
		if n := b.delayed.drop(); n > 0 {
			b.log.Warn("delayed messages lost: the memory engine holds them in memory only", "lost", n)
		}
	})
	return err
}

// allSubscriptions returns every open subscription: the fanout ones and every group's
// members. No lock may be held.
func (b *Engine) allSubscriptions() []*Subscription {
	b.mu.RLock()
	subs := make([]*Subscription, 0, len(b.fanouts))
	for _, s := range b.fanouts {
		subs = append(subs, s)
	}
	groups := make([]*group, 0, len(b.groups))
	for _, g := range b.groups {
		groups = append(groups, g)
	}
	b.mu.RUnlock()
	for _, g := range groups {
		subs = append(subs, g.subscriptions()...)
	}
	return subs
}

// drain waits until nothing is in flight or buffered, or ctx is done.
func (b *Engine) drain(ctx context.Context) error {
	return streaming.Drain(ctx, b.log, "shutdown grace period over with messages unacked or unsent", func() (busy int) {
		b.mu.RLock()
		defer b.mu.RUnlock()
		for _, g := range b.groups {
			busy += g.drain()
		}
		for _, s := range b.fanouts {
			busy += s.stats().Buffered
		}
		return busy
	})
}
