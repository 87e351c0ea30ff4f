package broker

import (
	"fmt"
	"time"
)

// Hooks let code outside the engine — the WebAssembly plugin chain — see and change messages
// before they are routed, and react to acks and redeliveries. It is an interface so that the
// engine knows nothing of Wasm; see the plugins package. Install with Engine.SetHooks.
//
// Every engine calls them at the same points: OnPublish in Publish before routing (emitted
// drafts are routed without it, so a plugin cannot loop), OnAck after an ack was applied,
// OnRedeliver before a message taken back from a member is redelivered or dead-lettered.
//
// Every method is called with no engine lock held, and may block for as long as the hook's
// own time limit.
type Hooks interface {
	// OnPublish runs before routing and may change d. An error refuses the publish and is
	// returned to the publisher (use *RejectError for a chosen status).
	OnPublish(d *Draft) (PublishVerdict, error)
	// OnPublishBatch runs OnPublish over the messages of a PublishBatch frame at once, which
	// may be cheaper than one by one (the plugin chain takes one instance of each plugin for
	// the whole frame): vs[i] and errs[i] are what OnPublish(&ds[i]) would have returned; the
	// three slices have the same length.
	OnPublishBatch(ds []Draft, vs []PublishVerdict, errs []error)
	// WantsAck and WantsRedeliver say whether a consumer group's acks and redeliveries are
	// hooked, so the engine can skip building events nobody reads.
	WantsAck(group string) bool
	WantsRedeliver(group string) bool
	// OnAck runs after an ack was applied; it returns messages to publish.
	OnAck(e *AckEvent) []Draft
	// OnRedeliver runs before a message that was taken back from a member is redelivered.
	OnRedeliver(e *RedeliverEvent) RedeliverVerdict
}

// Draft is a message being published, or emitted by a hook.
type Draft struct {
	Topic   string
	Payload []byte
	Headers Headers
	// Key is the ordering and fairness key ("" for none; ValidateKey): consumer groups with
	// ordering or fair_by "key" group messages by it. A hook may set it on publish.
	Key string
	// TTL is how long after its publish the message expires in consumer groups (0: never;
	// negative: invalid, refused).
	TTL time.Duration
	// Priority is the message's priority, 0 (the default) to 9, higher first, in
	// consumer groups with priorities (Dispatch.MaxPriority); the gate refuses a higher one.
	// A hook neither reads nor sets it.
	Priority uint8
	// DeliverAfter and DeliverAt delay the message (PublishRequest.deliver_after and
	// deliver_at): the engine holds it and publishes it DeliverAfter after accepting it, or
	// at DeliverAt (Unix nanoseconds, the engine's clock of day; one past: at once). Zero:
	// none. The gate refuses a negative DeliverAfter (not a valid duration of zero or
	// more), DeliverAt -1 (not a valid timestamp) and DeliverAt -2 (deliver_after and
	// deliver_at both given). A hook neither reads nor sets them.
	DeliverAfter time.Duration
	DeliverAt    int64
	// ID is the publisher's message id as its dedupe key (MessageKey: the user's namespace
	// and the id), or "" for none. The engine publishes a message at most once per ID within
	// Limits.DedupeWindow, before the hooks run (they never see a duplicate); a hook neither
	// reads nor sets it, and the messages hooks emit have none.
	ID string
}

// PublishVerdict is what OnPublish decided for a message it did not refuse.
type PublishVerdict struct {
	Drop   bool   // drop the message (counted); the publisher sees success, routed to 0
	Reason string // why it was dropped
	Plugin string // which plugin dropped it
	Emit   []Draft
}

// RejectError refuses a publish with a status code chosen by a hook.
type RejectError struct {
	Code   int // a gRPC status code, 1–16
	Plugin string
	Reason string
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("refused by plugin %q: %s", e.Plugin, e.Reason)
}

// AckEvent describes an applied ack.
type AckEvent struct {
	Msg            *Message
	SystemID       string
	SubscriptionID string
	Group          string
	Attempt        uint32
	InFlight       time.Duration // from the acked delivery to its ack
}

// RedeliverEvent describes a message taken back from a member.
type RedeliverEvent struct {
	Msg            *Message
	SystemID       string
	SubscriptionID string
	Group          string
	Attempt        uint32 // the attempt that failed
	Reason         string // deadletter.ReasonNack (or the nack's reason), ReasonAckDeadline, ReasonMemberLeft
}

// RedeliverAction is what becomes of a message taken back from a member.
type RedeliverAction int

const (
	// RedeliverDefault: what the broker would do without hooks (a nack's delay, then
	// max_deliveries).
	RedeliverDefault RedeliverAction = iota
	// RedeliverDelay: redeliver after RedeliverVerdict.Delay.
	RedeliverDelay
	// RedeliverDeadLetter: send to the group's dead-letter topic now.
	RedeliverDeadLetter
	// RedeliverDrop: forget the message (counted).
	RedeliverDrop
)

// RedeliverVerdict is OnRedeliver's decision.
type RedeliverVerdict struct {
	Action     RedeliverAction
	Delay      time.Duration
	Reason     string            // for a dead letter
	Code       string            // for a dead letter: deadletter.CodeRejected if empty, CodePluginError if a plugin failed
	SetHeaders map[string]string // header changes kept on the message
	DelHeaders []string
	Emit       []Draft
}
