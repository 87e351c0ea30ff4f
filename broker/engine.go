// Package broker is the contract between tinybroker's gRPC server and its engines, and
// nothing else: the interfaces an engine implements (Engine with its Admin part, Stream,
// Subscription), the values that cross them (Message, Delivery, SubscribeOptions, Stats...),
// the rules every engine applies the same way (the topic and pattern grammar, Limits and
// their defaults), the errors (errors.go), and the Hooks through which the WebAssembly plugins
// see messages. It knows nothing of gRPC or Wasm.
//
// The engines live below it: broker/memory, the embedded in-memory default, and
// broker/jetstream, on NATS JetStream. What both do the same way they share through
// broker/internal (publishing, grouping, streaming), which they call and which never calls
// them back. broker/deadletter names the headers of a dead letter. See RATIONALE.md,
// "Architecture".
package broker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/broker/latency"
)

// Engine is what the server needs from a message engine: the data path (Publish,
// PublishBatch, NewStream, Ack, Nack), its Admin part, and its lifecycle (SetHooks,
// Shutdown). Its methods are safe for concurrent use. Every engine runs the plugins' Hooks at
// the same points (see Hooks), so a plugin behaves the same whatever the engine.
type Engine interface {
	// Publish validates (Limits.CheckMessage), runs the OnPublish hook and routes one
	// message. The engine keeps payload and headers: the caller must not modify them.
	Publish(topic string, payload []byte, headers map[string]string) (PublishResult, error)
	// PublishBatch publishes frame in order as Publish would one message at a time (a
	// PublishStream frame, or one message with an id: only PublishBatch takes Draft.ID), writing each one's result to res[i] and error to errs[i];
	// len(res) == len(errs) == len(frame). Each message's Headers must be sorted, each key
	// once (MakeHeaders, Headers.Sorted). It lets an engine and the hooks amortise per-message
	// costs over the frame (Hooks.OnPublishBatch); the messages the hooks emit are routed
	// after the frame.
	PublishBatch(frame []Draft, res []PublishResult, errs []error)
	// NewStream opens a stream to carry subscriptions; see Stream. size bounds what one
	// delivery of a message adds to a frame of the transport, so that Next can fill frames
	// up to a size without knowing the encoding.
	NewStream(size func(*Message) int) Stream
	// Ack and Nack settle one delivered message of a consumer group by its system_id, from
	// outside the stream it was delivered on.
	Ack(subscriptionID, systemID string) error
	Nack(subscriptionID, systemID string, delay time.Duration, reason string) error

	Admin

	// SetHooks installs the plugin chain (nil removes it). A swap never runs one message
	// through two chains.
	SetHooks(h Hooks)
	// Shutdown refuses new work, waits until ctx is done for in-flight acks, then ends every
	// stream with ErrShuttingDown. Idempotent.
	Shutdown(ctx context.Context) error
}

// Admin is the part of an Engine the administration API and the configuration use:
// consumer groups declared, described, purged and deleted, the open streams, the dead-letter
// stores, and the counters.
type Admin interface {
	// Declare creates the consumer group gc describes, or checks that the existing group of
	// that id matches it.
	Declare(gc GroupConfig) error
	// Group describes one consumer group by subscription_id (ErrUnknownSubscription if
	// none): its counters, settings and members.
	Group(id string) (GroupInfo, error)
	// PurgeGroup drops the messages a group holds that wait for a member (queued and
	// delayed; in-flight ones stay with their members) and returns how many it dropped.
	PurgeGroup(id string) (int, error)
	// PauseGroup pauses consumer group id (paused true) or resumes it. Paused, a group takes
	// publishes as ever (within its bounds) and hands nothing to its members: what they hold
	// stays theirs to ack or nack, and what they give back waits with the queue. Resumed, it
	// delivers what it kept. Pausing a paused group, or resuming a running one, does nothing.
	// The JetStream engine keeps the pause in the group's consumer (NATS's consumer pause),
	// on every node and across restarts; the memory engine forgets it with everything else.
	PauseGroup(id string, paused bool) error
	// DeleteGroup removes a consumer group, the messages it holds and its dead letters. Its
	// members' subscriptions end with ErrGroupDeleted (their unacked messages are dropped
	// with the group); a stream that carries other subscriptions keeps them.
	DeleteGroup(id string) error
	// Streams lists the open streams that carry at least one subscription, with their
	// subscriptions, sorted by stream id.
	Streams() []StreamInfo

	// Dead letters. Every consumer group keeps the messages it dead-letters (besides
	// publishing them to its dead-letter topic) in a bounded store, oldest first, until they
	// are replayed or purged, whether or not anyone subscribes to the dead-letter topic. A
	// dead letter is named by its original system_id (DeadLetter.ID).

	// DeadLetters returns up to limit dead letters of group id, oldest first, from the
	// position token (empty: the oldest), and the token of the rest (empty: no more).
	DeadLetters(id, token string, limit int) (dls []DeadLetter, next string, err error)
	// ReplayDeadLetters publishes the dead letters of group id named by ids (every one kept
	// now, if ids is empty) again to their original topic through Publish (so the plugins
	// see them), with their original headers and deadletter.HeaderReplayCount one higher. One replayed
	// leaves the store; one refused stays in it. A result per id, in order; an id the store
	// does not hold gets ErrUnknownMessage.
	ReplayDeadLetters(id string, ids []string) ([]Replayed, error)
	// PurgeDeadLetters drops the dead letters of group id named by ids (every one, if ids is
	// empty) and returns how many it dropped.
	PurgeDeadLetters(id string, ids []string) (int, error)
	// Stats returns a snapshot of the counters, subscriptions and groups sorted by id.
	Stats() Stats
	// Ready says whether the engine serves: nil, or why not (ErrShuttingDown, or
	// ErrUnavailable while the JetStream engine cannot reach its NATS server). Readiness
	// probes (the HTTP listener's /readyz) ask it.
	Ready() error
}

// Stream is one subscriber connection (a Subscribe stream of the protocol) carrying any
// number of subscriptions, as a NATS connection carries many SUBs. Their deliveries share the
// stream's buffer, its order and its limits. The owner drains it with Next after Ready fires
// and must Close it when the connection ends; Done is closed when the engine ends the stream
// itself (slow consumer, shutdown) and Err says why.
//
// Besides messages, Next returns one event per Subscribe call, in the stream's order and
// before any message of the new subscription: a Delivery with Msg nil whose Sub opened, or
// was refused (Sub.Refused() says why); and one for a subscription the engine ended while
// the stream goes on (Delivery.Ended says why).
type Stream interface {
	// Subscribe opens a subscription on the stream. Its outcome also comes as an event.
	Subscribe(o SubscribeOptions) (Subscription, error)
	// Refuse queues the event of an open refused before it reached the engine (by the
	// server's permissions), in the stream's order of events.
	Refuse(o SubscribeOptions, err error)
	// Lookup returns the open subscription with this id; with id empty, the stream's only
	// subscription if it has exactly one. n is how many it has.
	Lookup(id string) (s Subscription, n int)
	// Subscriptions returns the open subscriptions, in no order.
	Subscriptions() []Subscription
	// Next appends to dst up to maxN waiting deliveries and events of at most maxBytes in
	// all, as measured by NewStream's size (but always one, if any wait).
	Next(dst []Delivery, maxN, maxBytes int) []Delivery
	// Ready is signalled when deliveries may be waiting; call Next until it returns none.
	Ready() <-chan struct{}
	// Done is closed when the stream has ended; Err then says why (ErrSlowConsumer,
	// ErrShuttingDown, ErrSubscriptionClosed).
	Done() <-chan struct{}
	Err() error
	// Close ends the stream and its subscriptions: group members' unacked messages go at
	// once to the other members. Idempotent.
	Close()
}

// Subscription is one open subscription of a Stream: a fanout subscription, or one member of
// a consumer group.
type Subscription interface {
	ID() string
	Mode() Mode
	// Settings returns the options in force, after defaults.
	Settings() Settings
	// Refused is non-nil for the subscription of a refused-open event: why it was refused.
	Refused() error
	// Ack, Nack and Touch settle a member's deliveries by system_id. Ids that are unknown,
	// already settled or malformed are skipped and counted: a late or duplicate ack never
	// ends a stream. Fanout subscriptions take none.
	Ack(ids []string) (skipped int)
	Nack(ids []string, delay time.Duration, reason string) (skipped int)
	Touch(ids []string) (skipped int)
	// Close ends the subscription; a member's unacked messages go at once to the others.
	Close()
}

// Message is a published message. It is immutable once published: the same *Message is
// shared by every subscription and group it is routed to.
type Message struct {
	ID       uint64 // sequence number in the engine
	SystemID string // ID as the protocol's system_id, formatted once
	Topic    string
	Payload  []byte
	Headers  Headers
	Key      string // the ordering and fairness key (Draft.Key); "" for none
	Priority uint8  // Draft.Priority
	// TTL is how long after PublishedAt it expires in consumer groups (Draft.TTL; 0: never).
	TTL time.Duration
	// PublishedAt is when the engine accepted the message, in Unix nanoseconds.
	PublishedAt int64
	// Targets is how many fanout subscriptions and groups the message was routed to.
	Targets int
	// HeaderBytes is the sum of the lengths of the header keys and values.
	HeaderBytes int

	// Wire belongs to the transport: the server caches the message's encoding here, to
	// share it between the subscriptions the message goes to. Engines never read it.
	Wire atomic.Pointer[[]byte]
}

// Delivery is a message handed to one subscription of a stream, or, with Msg nil, an event
// of the stream: Sub opened, or was refused (see Stream), or, with Ended set, was ended by
// the engine while the stream goes on (its consumer group was deleted: ErrGroupDeleted).
type Delivery struct {
	Msg     *Message
	Sub     Subscription
	Attempt uint32 // 1 on the first delivery
	Ended   error
}

// PublishResult says what became of a published message.
type PublishResult struct {
	Seq      uint64
	SystemID string // Seq as the protocol's system_id
	Routed   int    // fanout subscriptions and consumer groups it went to
	// DroppedBy names the plugin whose verdict dropped the message, DropReason its reason.
	DroppedBy, DropReason string
	// Duplicate: the message's Draft.ID was published already within the dedupe window;
	// nothing was published, and the rest is the first publish's result.
	Duplicate bool
}

// Mode is how a subscription shares messages.
type Mode uint8

const (
	// Fanout: every matching subscription gets every message, at most once, without acks.
	Fanout Mode = iota + 1
	// Balanced: the members of a consumer group share the messages; each is delivered to one
	// member and stays in flight until acked.
	Balanced
)

var modeNames = [...]string{Fanout: "fanout", Balanced: "balanced"}

func (m Mode) String() string {
	if int(m) < len(modeNames) && modeNames[m] != "" {
		return modeNames[m]
	}
	return "unspecified"
}

// SubscribeOptions opens a subscription; see the OpenSubscription message of the protocol.
type SubscribeOptions struct {
	ID       string // shared by the members of a group; optional for fanout
	Patterns []string
	Mode     Mode
	Group    string // required for Balanced

	// Balanced only; zero values take the defaults.
	MaxInFlight     int           // unacked messages this member may hold (default 1)
	AckDeadline     time.Duration // default Limits.AckDeadline
	MaxDeliveries   int           // 0: unlimited (at most Limits.MaxDeliveriesCap); the group's first member sets it
	DeadLetterTopic string        // default "dlq.<ID>"; the group's first member sets it
	// Dispatch orders the group's deliveries and shares them fairly; the group's first
	// member sets it, later ones must leave it zero or ask for the same.
	Dispatch Dispatch
	// Priority is the member's priority, 0 (the default) to 9: a message goes to a
	// member of the highest priority that has room, round-robin among those; a member of a
	// lower priority gets work only while every higher one is full (or gone).
	Priority uint8
	// Quota, if not nil, is the quota of the member's owner: a group this member creates
	// is counted against it, and so is everything the group holds (see Quota).
	Quota *Quota

	// Peer is the client's network address, as the transport sees it ("" if unknown), for
	// the admin API's listings.
	Peer string
}

// Settings are a subscription's options after defaults: what Subscription.Settings
// returns, and how StreamInfo lists a stream's subscriptions.
type Settings struct {
	ID       string
	MemberID string // balanced: the member's id
	Mode     Mode
	Group    string // balanced: the consumer group
	Patterns []string

	// Balanced only.
	MaxInFlight     int
	AckDeadline     time.Duration
	MaxDeliveries   int
	DeadLetterTopic string
	Dispatch        Dispatch
	Priority        uint8 // the member's
}

// GroupConfig declares a consumer group, as the configuration file's group blocks do, or
// as its first member does implicitly. A declared group exists from the start: it queues
// what is published to its patterns before any member joins (as a durable queue does after
// a restart elsewhere), never expires, and members must match it.
type GroupConfig struct {
	ID              string   // subscription_id; default Name
	Name            string   // consumer_group
	Patterns        []string // topic_patterns
	MaxDeliveries   int      // 0: unlimited
	DeadLetterTopic string   // default "dlq.<ID>"
	Dispatch        Dispatch // ordering and fairness
	Limits          GroupLimits
	// Replicas is how many copies of the group's messages the JetStream engine keeps (1 to
	// 5; 3 survives the loss of a node), where it differs from the engine's own replicas;
	// 0: the engine's. Only a declared group has one (a member cannot ask for storage). The
	// memory engine keeps one copy, in the process, and refuses more.
	Replicas int
}

// SubscribeOptions is the OpenSubscription a member matching gc would send.
func (gc GroupConfig) SubscribeOptions() SubscribeOptions {
	id := gc.ID
	if id == "" {
		id = gc.Name
	}
	return SubscribeOptions{ID: id, Group: gc.Name, Patterns: gc.Patterns, Mode: Balanced,
		MaxDeliveries: gc.MaxDeliveries, DeadLetterTopic: gc.DeadLetterTopic, Dispatch: gc.Dispatch}
}

// GroupLimits bound what one consumer group holds. Zero values take the engine's defaults.
type GroupLimits struct {
	MaxQueued      int      // messages waiting for a member
	MaxQueuedBytes int64    // bytes the group holds: queued, in flight and delayed
	Overflow       Overflow // what a full group does with a publish
	// DeadLetterMax and DeadLetterMaxBytes bound the dead letters the group keeps; past
	// either, the oldest kept is dropped to make room (counted).
	DeadLetterMax      int
	DeadLetterMaxBytes int64
	// RedeliveryDelayMin and RedeliveryDelayMax are the group's redelivery back-off (see
	// RedeliveryDelay); a negative min turns it off.
	RedeliveryDelayMin time.Duration
	RedeliveryDelayMax time.Duration
	// RedeliveryBackoff, if set, replaces the doubling with an explicit list, as JetStream's
	// consumer BackOff: attempt n waits entry n, the last entry repeats (at most
	// MaxRedeliveryBackoff entries, each positive). A group that sets its own min, max or
	// list takes none of the others from the engine's defaults.
	RedeliveryBackoff []time.Duration
	// RedeliveryJitter, in [0, 1), shortens each back-off by up to that fraction, by a draw
	// of the message and its attempt (see RedeliveryDelay); 0 takes the engine's default,
	// NoJitter turns it off.
	RedeliveryJitter float64
	// MaxAge expires a message this long after its publish, as a ttl would (0: never);
	// OnExpire is what becomes of an expired message: "dead_letter" (the default), with
	// reason "expired", or "drop", counted.
	MaxAge   time.Duration
	OnExpire string
	// DeadLetterBreaker pauses the group (Admin.PauseGroup) when it dead-letters this many
	// messages within DeadLetterBreakerWindow (1m), until an operator resumes it: a flood of
	// dead letters is more often a broken consumer or dependency than bad messages, and each
	// message it burns is work to replay. 0: off (the default); at most 10,000.
	DeadLetterBreaker       int
	DeadLetterBreakerWindow time.Duration
}

// Overflow is what a consumer group does with a publish when its queue is at its bound.
type Overflow int

// The zero Overflow takes the engine's default (itself OverflowReject by default).
const (
	// OverflowReject refuses the publish with ErrGroupFull.
	OverflowReject Overflow = iota + 1
	// OverflowDropOldest accepts it and drops the group's oldest queued message (counted).
	OverflowDropOldest
)

// Stats is a snapshot of an engine's counters.
type Stats struct {
	Published, Delivered, Acked, Redelivered, DeadLettered, Unrouted uint64
	Dropped                                                          uint64 // by a plugin's verdict
	Refused                                                          uint64 // publishes refused by every target they matched
	MemoryUsed, MemoryBudget                                         int64  // bytes held for later, and the budget
	// Delayed publishes (Draft.DeliverAfter): how many the engine holds now and their bytes,
	// and how many were refused by every target they matched when due.
	Delayed        int
	DelayedBytes   int64
	DelayedRefused uint64
	Subscriptions  []SubscriptionStats
	Groups         []GroupStats
}

// SubscriptionStats describes one fanout subscription.
type SubscriptionStats struct {
	ID                 string
	Patterns           []string
	Delivered, Dropped uint64
	Buffered           int
}

// GroupStats describes one consumer group.
type GroupStats struct {
	ID, Group                                            string
	Patterns                                             []string
	Members, Queued, InFlight, Delayed                   int
	Bytes                                                int64 // what the group holds, counted against its max_queued_bytes
	Delivered, Acked, Redelivered, DeadLettered, Dropped uint64
	Rejected                                             uint64 // publishes refused while the group was full
	// Expired counts the messages it let go of past their ttl or its max_age (dead-lettered
	// or, with on_expire "drop", dropped: counted in DeadLettered or Dropped too).
	Expired uint64
	// Published counts the messages the group took (a publish it refused is Rejected); in a
	// cluster, those published through this node.
	Published uint64
	Declared  bool // declared in the configuration
	Paused    bool // by Admin.PauseGroup: it hands nothing to its members until resumed
	// BreakerTrips counts the times its dead-letter breaker paused it
	// (GroupLimits.DeadLetterBreaker; on JetStream, this node's).
	BreakerTrips uint64
	// Deliveries taken back from members for another attempt (or the dead-letter topic), by
	// reason: nacked, past their ack deadline, held by a member that left.
	Nacked, TimedOut, LeftBehind uint64
	// OldestQueued is when the message at the head of the queue was published (Unix ns; 0:
	// nothing queued).
	OldestQueued int64
	// Oldest is when the oldest message the group holds (queued, in flight or delayed) was
	// published, in Unix nanoseconds; 0 if it holds none.
	Oldest int64
	// Liveness (issue 29). OldestUnacked is when the oldest message its members hold unacked
	// was published (Unix ns; 0: none). Room is how many more messages its members could take
	// now: the sum of their max_in_flight less what they hold. Stalled is since when the group
	// has had messages queued and members with room and has delivered nothing (Unix ns; 0:
	// it has not; see Stuck). On JetStream the first two are this node's members', and Stalled
	// is since this node first saw it so (Stats, Group) with no delivery since, the
	// consumer's or this node's.
	OldestUnacked int64
	Room          int
	Stalled       int64
	// DeadLetters and DeadLetterBytes are what the group's dead-letter store keeps now;
	// DeadLettersDropped counts those it let go of to stay within its bounds.
	DeadLetters        int
	DeadLetterBytes    int64
	DeadLettersDropped uint64
	// DeliveryLatency times each message from its publish (Message.PublishedAt) to its
	// first delivery to a member (handed to the member's stream); AckLatency, each ack of a
	// delivery a member still held, from that delivery to the ack. Both count this engine's
	// (in a cluster, this node's) deliveries since it started.
	DeliveryLatency, AckLatency latency.Histogram
	// Keys is how many keys (or tenants, with fair_by) the group holds messages of, in a
	// group with ordering or fair_by; Busiest the ones that hold the most (at most 5), most
	// first. What counts as held is what the group tracks by key: a group with ordering and
	// neither fair_by nor priorities tracks a key while a message of it is out or waits
	// behind one (the memory engine), or is in the node's window (JetStream), and its
	// other queued messages wait as in a group without keys.
	Keys    int
	Busiest []KeyLoad
}

// KeyLoad is what a consumer group holds of one key or tenant.
type KeyLoad struct {
	Key   string
	Held  int  // messages queued, in flight and delayed
	Noisy bool // over a tenth of what the group holds (and at least 100 messages)
}

// GroupInfo describes one consumer group in full (Engine.Group).
type GroupInfo struct {
	GroupStats
	MaxDeliveries   int
	DeadLetterTopic string
	Dispatch        Dispatch
	Limits          GroupLimits  // after defaults
	MemberList      []MemberInfo // GroupStats.Members counts them
	// Replicas is how many copies of its messages the engine keeps (GroupConfig.Replicas):
	// 1 on the memory engine.
	Replicas int
}

// Stuck says whether the group is stuck at now (Unix ns): stalled (messages queued, members
// with room, nothing delivered) for after or longer, and not paused. Messages queued behind
// a key whose message a member holds and does not settle, or behind JetStream's limits, are
// what it catches: present, deliverable by the look of it, and not delivered.
func (g *GroupStats) Stuck(now int64, after time.Duration) bool {
	return g.Stalled != 0 && !g.Paused && now-g.Stalled >= int64(after)
}

// MemberInfo describes one member of a consumer group.
type MemberInfo struct {
	ID          string // the member id (Settings.MemberID)
	Peer        string // SubscribeOptions.Peer
	InFlight    int
	MaxInFlight int
	AckDeadline time.Duration
	Joined      int64 // Unix nanoseconds
	Priority    uint8 // SubscribeOptions.Priority
}

// StreamInfo describes one open stream (Engine.Streams).
type StreamInfo struct {
	ID            string // chosen by the engine, unique while it runs
	Peer          string // the Peer of its subscriptions' SubscribeOptions
	Buffered      int    // deliveries waiting to be sent
	Subscriptions []Settings
}

// DeadLetter is a message a consumer group dead-lettered, as its store keeps it.
type DeadLetter struct {
	ID       string // the message's system_id when it was dead-lettered
	Topic    string // its original topic
	Payload  []byte
	Headers  map[string]string // as published to the dead-letter topic: the original's and tb-dead-letter-*
	Key      string            // its key: the dead letter carries it, and a replay publishes with it
	Code     string            // which path dead-lettered it: a deadletter.Code* ("" if kept from before codes)
	Reason   string
	Attempts int
	DeadAt   int64 // when it was dead-lettered, Unix nanoseconds
}

// Replayed is the outcome of replaying one dead letter.
type Replayed struct {
	ID       string // the dead letter's
	SystemID string // the new message's, if published
	Routed   int
	Err      error
}
