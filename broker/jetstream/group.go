package jetstream

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/latency"
)

// A consumer group is a durable JetStream pull consumer of the stream, named after its
// subscription_id, whose filter subjects are the group's patterns under <prefix>.g. and
// whose metadata holds the group's definition, so that every node (and a restarted one)
// reads it. Each member on this node pulls for itself: it asks JetStream for as many
// messages as it has room for (max_in_flight minus what it holds and has asked for), so
// JetStream hands messages to members by their priority, then in the order they asked
// (priority.go), and a member never holds more than its max_in_flight. (A group with
// ordering, fair_by or max_priority is dispatched by its node instead: keyed.go.) Ack
// deadlines, nacks, touches and members leaving are applied here (with the hooks) and
// passed to JetStream as +ACK, -NAK (with a delay), +WPI and +TERM; the consumer's own
// AckWait, longer than every member's deadline, only redelivers what a node that died held.

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

// ackWaitFor is the consumer's AckWait that a member deadline (plus ackWaitPad) of need
// raises it to: ackWaitPad doubled until it is at least need. Members joining with ever
// longer deadlines, up to Limits.MaxAckDeadline, so update the consumer (a JetStream call
// under Engine.mu) a dozen times at most rather than once a millisecond of deadline, at the
// cost of waiting up to twice as long as needed before JetStream redelivers what a crashed
// node held.
func ackWaitFor(need time.Duration) time.Duration {
	w := ackWaitPad
	for w < need && w <= math.MaxInt64/2 {
		w *= 2
	}
	return max(w, need)
}

type group struct {
	e        *Engine
	id       string
	consumer string
	// Where its messages are stored (storage.go), set when it is made or read: replicas is 0
	// for the engine's stream, else the copies its own stream keeps; stream is JetStream's
	// name of that stream, subj the subject prefix its messages are stored under, and secret
	// its system_ids' (idCodec).
	replicas int
	stream   string
	subj     string
	secret   uint64
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
	// Delivery marks (marks.go): the mark the last run left, and how far this run's goes.
	markRead           bool
	markPrev, markNext uint64
	// dispatch is the group's ordering and fairness (keyed.go); kq, set when it orders,
	// holds what this node pulled and has not settled. pin is the pin this node pulls with
	// ("" none); pinChecking, while it asks whether another node may hold messages, and
	// graceUntil, when the grace for those ends; pinGen counts the pins taken; tick is the
	// keepalive and +WPI timer. Under g.mu.
	dispatch    broker.Dispatch
	kq          *keyq
	pin         string
	pinChecking bool
	graceUntil  time.Time
	gatherUntil time.Time // a group with priorities: see gatheringLocked
	pinGen      uint64
	// policy is the priority policy of the consumer as last read or saved, or to be saved
	// (Engine.mu): an unordered group's has none until a member with a priority joins.
	policy jetstream.PriorityPolicy
	// turn is where the choice of a member on this node starts (takerLocked), for
	// round-robin among those of the same priority. Under g.mu.
	turn    int
	keepPin string // the pin of the last keepalive
	// An ordered group's node pulls for its members together (pullKeyedLocked): ksub is
	// the subscription of kinbox, its requests' inbox; kreqID names the open request (0:
	// none), kremaining what it may still bring, kreqPin the pin it carries.
	ksub            *nats.Subscription
	kinbox          string
	kreqID, kreqSeq uint64
	kremaining      int
	kreqPin         string
	tick            *time.Timer
	quota           *broker.Quota
	own             broker.GroupLimits // as declared (zero: the engine's defaults)
	limits          broker.GroupLimits // in force: own, then the engine's defaults

	mu        lockrank.Mutex[lockrank.JetStreamGroup]
	members   []*member
	memberSeq uint64
	// waiting holds what this node took back from its members until JetStream redelivers
	// it, so that a late ack settles it; delayed, when the nacked ones' delays end (stats);
	// unseen, how many of JetStream's deliveries of each this node handed back without a
	// member having seen them — the group paused (onMsg), or a keyed group's node left
	// without members (flushLocked): they are no attempts.
	waiting           map[uint64]*broker.Message
	delayed           map[uint64]time.Time
	unseen            map[uint64]uint32
	draining, removed bool
	// paused (Engine.PauseGroup): JetStream delivers nothing to the consumer until
	// pauseUntil, which its configuration keeps (a resume sets it too: see resumeKick), and
	// this node hands out nothing it parked.
	paused     bool
	pauseUntil *time.Time
	// stallSeen is when stats first saw the group stalled (broker.GroupStats.Stalled) with
	// the consumer's deliveries at stallDelivered; zero while it is not.
	stallSeen                                            time.Time
	stallDelivered                                       uint64
	breaker                                              grouping.Breaker // dead letters (GroupLimits.DeadLetterBreaker), under mu
	delivered, acked, redelivered, deadLettered, dropped uint64
	nacked, timedOut, leftBehind, expiredMsgs            uint64
	deliveryLatency, ackLatency                          latency.Histogram // broker.GroupStats's
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
	published atomic.Uint64 // messages it took that were stored through this node (no lock: counted per message on the publish path)
	full      bool
	// The dead letters it keeps (dlq.go), as last counted, and those it let go of.
	// deadMu orders counting them against changing them: every change of the store this
	// node makes (a letter stored, deleted) holds it shared until deadCount has it too; a
	// count (JetStream's, which replaces deadCount) holds it alone, so that it neither
	// misses nor counts twice a change made while JetStream was asked.
	deadMu      lockrank.RWMutex[lockrank.JetStreamDead]
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
	priority    uint8 // broker.SubscribeOptions.Priority
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
	// inboxClosed: the inbox of a member that has left is unsubscribed (closeInbox). It
	// stays open while a pull request of the member's may still bring messages.
	inboxClosed bool
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
	e       *kentry   // an ordered group's: its entry (keyed.go)
	fenced  bool      // its node lost the pin: touches are not passed on
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
// group covers (JetStream refuses filters that overlap that way), under prefix.
func filters(prefix string, patterns []string) []string {
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
			out = append(out, prefix+p)
		}
	}
	return out
}

func (e *Engine) consumerConfig(g *group) jetstream.ConsumerConfig {
	pj, _ := json.Marshal(g.patterns)
	cc := jetstream.ConsumerConfig{Durable: g.consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: g.ackWait,
		MaxDeliver: -1, MaxAckPending: -1, MaxWaiting: 8192, DeliverPolicy: jetstream.DeliverNewPolicy,
		Replicas: g.copies(), MemoryStorage: e.opts.MemoryStorage,
		Description: "tinybroker consumer group " + g.name,
		Metadata: map[string]string{metaID: g.id, metaGroup: g.name, metaPatterns: string(pj),
			metaMaxDeliveries: strconv.Itoa(g.maxDeliveries), metaDLQ: g.dlq, metaDeclared: strconv.FormatBool(g.declared)}}
	if g.dispatch.Ordering != broker.OrderingNone {
		cc.Metadata[metaOrdering] = g.dispatch.Ordering.String()
		// One node dispatches at a time: the one JetStream pins (keyed.go).
		cc.PriorityPolicy, cc.PriorityGroups, cc.PinnedTTL = jetstream.PriorityPolicyPinned, []string{pinGroup}, pinnedTTL
	} else if g.policy == jetstream.PriorityPolicyPrioritized {
		// A member with a priority joined (Engine.join): JetStream serves the waiting pull
		// requests by their priority, so a member of a lower priority gets a message only
		// while every higher one is full (priority.go).
		cc.PriorityPolicy, cc.PriorityGroups = jetstream.PriorityPolicyPrioritized, []string{pinGroup}
	}
	if g.dispatch.FairBy != "" {
		cc.Metadata[metaFairBy] = g.dispatch.FairBy
	}
	if g.dispatch.MaxPriority > 0 {
		cc.Metadata[metaMaxPriority] = strconv.Itoa(int(g.dispatch.MaxPriority))
	}
	if !g.declared && e.opts.GroupExpireAfter > 0 {
		cc.InactiveThreshold = e.opts.GroupExpireAfter
	}
	if !reflect.DeepEqual(g.own, broker.GroupLimits{}) {
		lj, _ := json.Marshal(g.own)
		cc.Metadata[metaLimits] = string(lj)
	}
	if g.replicas != 0 {
		cc.Metadata[metaReplicas] = strconv.Itoa(g.replicas)
	}
	cc.PauseUntil = g.pauseUntil // an update without it would resume the group
	if f := filters(g.subj, g.patterns); len(f) == 1 {
		cc.FilterSubject = f[0]
	} else {
		cc.FilterSubjects = f
	}
	return cc
}

func (e *Engine) newGroup(id string) *group {
	g := &group{e: e, id: id, consumer: encodeName(id), waiting: make(map[uint64]*broker.Message), delayed: make(map[uint64]time.Time),
		unseen: make(map[uint64]uint32), deadCount: -1}
	e.place(g, 0)
	return g
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
	var d broker.Dispatch
	d.Ordering, _ = broker.ParseOrdering(md[metaOrdering])
	d.FairBy = md[metaFairBy]
	if p, err := strconv.Atoi(md[metaMaxPriority]); err == nil && p > 0 {
		d.MaxPriority = uint8(min(p, grouping.MaxPriority))
	}
	g.policy = ci.Config.PriorityPolicy
	g.setDispatchLocked(d)
	if lj := md[metaLimits]; lj != "" {
		_ = json.Unmarshal([]byte(lj), &g.own)
	}
	if r, _ := strconv.Atoi(md[metaReplicas]); r > 0 {
		e.place(g, r)
	}
	g.limits = e.groupLimits(g.own)
	// A pause with no more than a second to go is a resume (resumeKick).
	g.paused, g.pauseUntil = ci.Paused && ci.PauseRemaining > time.Second, ci.Config.PauseUntil
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

// config is g's definition. Engine.mu or g.mu must be held.
func (g *group) config() broker.GroupConfig {
	return broker.GroupConfig{ID: g.id, Name: g.name, Patterns: g.patterns, MaxDeliveries: g.maxDeliveries, DeadLetterTopic: g.dlq, Dispatch: g.dispatch}
}

func (g *group) sameDefinition(o broker.SubscribeOptions, patterns []string) bool {
	return g.checkMember(o, patterns) == nil
}

// checkMember says why a member asking for o may not join g, or nil (CheckMember).
func (g *group) checkMember(o broker.SubscribeOptions, patterns []string) error {
	return g.config().CheckMember(&o, patterns)
}

func (g *group) memberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}
