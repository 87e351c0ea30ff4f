package broker

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// What every engine says the same way about consumer groups: who may join one, the
// headers of a dead letter, and the refusals of a unary Ack or Nack.

// CheckMember says why a member asking for o (its patterns checked and sorted by
// Limits.CheckSubscribe) may not join the group gc defines (gc.DeadLetterTopic after its
// default), or nil: members share the group's name and patterns, and may leave
// max_deliveries and the dead-letter topic unset or repeat them, not change them.
func (gc GroupConfig) CheckMember(o *SubscribeOptions, patterns []string) error {
	switch {
	case gc.Name != o.Group:
		return fmt.Errorf("%w: subscription_id %q is consumer group %q, not %q; members must share both", ErrGroupMismatch, o.ID, gc.Name, o.Group)
	case !slices.Equal(gc.Patterns, patterns):
		return fmt.Errorf("%w: consumer group %q subscribes to %q, this member asked for %q; every member must use the same topic_patterns", ErrGroupMismatch, gc.Name, gc.Patterns, patterns)
	case o.MaxDeliveries != 0 && o.MaxDeliveries != gc.MaxDeliveries:
		return fmt.Errorf("%w: consumer group %q has max_deliveries %d, this member asked for %d; leave it 0 to take the group's", ErrGroupMismatch, gc.Name, gc.MaxDeliveries, o.MaxDeliveries)
	case o.DeadLetterTopic != "" && o.DeadLetterTopic != gc.DeadLetterTopic:
		return fmt.Errorf("%w: consumer group %q dead-letters to %q, this member asked for %q; leave it empty to take the group's", ErrGroupMismatch, gc.Name, gc.DeadLetterTopic, o.DeadLetterTopic)
	}
	return nil
}

// DefaultDeadLetterTopic is where consumer group id dead-letters when it names no topic:
// "dlq.<subscription_id>".
func DefaultDeadLetterTopic(id string) string { return "dlq." + id }

// FanoutID returns the subscription_id a fanout subscription asking for id takes: id, or
// with id empty the next "fanout-N" of the engine's *autoID. Or it says why the subscription
// may not take it: an open fanout subscription (in fanouts) or a consumer group (in groups)
// has it.
func FanoutID[F, G comparable](id string, autoID *uint64, fanouts map[string]F, groups map[string]G) (string, error) {
	if id == "" {
		*autoID++
		id = "fanout-" + strconv.FormatUint(*autoID, 10)
	}
	var noF F
	var noG G
	switch {
	case fanouts[id] != noF:
		return "", fmt.Errorf("%w: a fanout subscription %q is open; choose another subscription_id or leave it empty", ErrSubscriptionExists, id)
	case groups[id] != noG:
		return "", fmt.Errorf("%w: subscription_id %q belongs to a balanced consumer group; choose another id for a fanout subscription", ErrGroupMismatch, id)
	}
	return id, nil
}

// DeadLetterHeaders returns the headers of m dead-lettered by group (subscription id) after
// attempts deliveries, for reason: m's own and the tb-dead-letter-* ones.
func DeadLetterHeaders(m *Message, reason, id, group string, attempts uint32) map[string]string {
	h := make(map[string]string, len(m.Headers)+6)
	for _, x := range m.Headers {
		h[x.Key] = x.Value
	}
	h[HeaderDeadLetterReason] = TruncateReason(reason)
	h[HeaderDeadLetterTopic] = m.Topic
	h[HeaderDeadLetterSystemID] = m.SystemID
	h[HeaderDeadLetterSubscription] = id
	h[HeaderDeadLetterGroup] = group
	h[HeaderDeadLetterAttempts] = strconv.FormatUint(uint64(attempts), 10)
	return h
}

// MaxReasonBytes bounds the reason a dead letter's tb-dead-letter-reason header carries: a
// nack's reason is the member's text, and one as large as a frame would push the dead letter
// past max_header_bytes, so that its publish to the dead-letter topic failed.
const MaxReasonBytes = 1024

// TruncateReason cuts reason to MaxReasonBytes, on a UTF-8 boundary, marking the cut.
func TruncateReason(reason string) string {
	if len(reason) <= MaxReasonBytes {
		return reason
	}
	const mark = "…"
	cut := MaxReasonBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut] + mark
}

// AckTarget returns what a unary Ack or Nack of systemID to subscription id settles: g, the
// consumer group with the id, and the sequence number parse (the engine's) reads in
// systemID. Or it says why there is none: the id is a fanout subscription's (fanout), no
// group has it (g is zero), or systemID is not a message of this engine.
func AckTarget[G comparable](id, systemID string, fanout bool, g G, parse func(string) (uint64, error)) (G, uint64, error) {
	var none G
	switch {
	case fanout:
		return none, 0, fmt.Errorf("%w: subscription %q is fanout; fanout deliveries are not acked", ErrGroupMismatch, id)
	case g == none:
		return none, 0, fmt.Errorf("%w %q: no consumer group has this subscription_id", ErrUnknownSubscription, id)
	}
	seq, err := parse(systemID)
	return g, seq, err
}

// NotHeld refuses a unary Ack of systemID that group id does not hold.
func NotHeld(systemID, id string) error {
	return fmt.Errorf("%w %q: subscription %q does not hold it (never delivered, already acked or dead-lettered)", ErrUnknownMessage, systemID, id)
}

// NotInFlight refuses a unary Nack of systemID that no member of group id holds.
func NotInFlight(systemID, id string) error {
	return fmt.Errorf("%w %q: subscription %q has no such message in flight", ErrUnknownMessage, systemID, id)
}

// FindHeld looks for the delivery seq that a member of a consumer group holds (held returns
// a member's deliveries by sequence): among pref's alone with only set, otherwise in pref's
// first (a member settling its own), then in every member's. It returns the delivery and
// its holder, or zeros.
func FindHeld[M comparable, E any](pref M, members []M, only bool, held func(M) map[uint64]*E, seq uint64) (*E, M) {
	var none M
	if pref != none {
		if e := held(pref)[seq]; e != nil {
			return e, pref
		}
	}
	if only {
		return nil, none
	}
	for _, m := range members {
		if e := held(m)[seq]; e != nil {
			return e, m
		}
	}
	return nil, none
}

// EachHeld calls f on each of seqs that a member of a consumer group holds, found as
// FindHeld finds it, with the delivery and its holder; it returns how many of seqs no member
// held.
func EachHeld[M comparable, E any](pref M, members []M, only bool, held func(M) map[uint64]*E, seqs []uint64, f func(seq uint64, e *E, m M)) (unknown int) {
	for _, seq := range seqs {
		if e, m := FindHeld(pref, members, only, held, seq); e != nil {
			f(seq, e, m)
		} else {
			unknown++
		}
	}
	return unknown
}

// Leave removes m from a consumer group's members and returns where it stood, or -1 if it
// had left already.
func Leave[M comparable](members *[]M, m M) int {
	i := slices.Index(*members, m)
	if i >= 0 {
		*members = slices.Delete(*members, i, i+1)
	}
	return i
}
