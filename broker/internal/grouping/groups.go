// Package grouping holds what both engines do the same way for consumer groups and their
// dead letters, as plain functions over the engine's own values: naming a fanout
// subscription, finding who holds a delivery, settling by system_id, the headers of a dead
// letter and the paging of a dead-letter store, the cost of a held message, and the refusals
// every engine words the same. Nothing here calls back into an engine.
package grouping

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

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
		return "", fmt.Errorf("%w: a fanout subscription %q is open; choose another subscription_id or leave it empty", broker.ErrSubscriptionExists, id)
	case groups[id] != noG:
		return "", fmt.Errorf("%w: subscription_id %q belongs to a balanced consumer group; choose another id for a fanout subscription", broker.ErrGroupMismatch, id)
	}
	return id, nil
}

// DeadLetterHeaders returns the headers of m dead-lettered by group (subscription id) after
// attempts deliveries, for code (a deadletter.Code*) and reason: m's own and the
// tb-dead-letter-* ones.
func DeadLetterHeaders(m *broker.Message, code, reason, id, group string, attempts uint32) map[string]string {
	h := make(map[string]string, len(m.Headers)+7)
	for _, x := range m.Headers {
		h[x.Key] = x.Value
	}
	h[deadletter.HeaderCode] = code
	h[deadletter.HeaderReason] = deadletter.TruncateReason(reason)
	h[deadletter.HeaderTopic] = m.Topic
	h[deadletter.HeaderSystemID] = m.SystemID
	h[deadletter.HeaderSubscription] = id
	h[deadletter.HeaderGroup] = group
	h[deadletter.HeaderAttempts] = strconv.FormatUint(uint64(attempts), 10)
	return h
}

// VerdictCode is the code of a dead letter that on_redeliver's verdict v sent to dead
// letters: the verdict's (a plugin failed), or deadletter.CodeRejected (a plugin chose so).
func VerdictCode(v *broker.RedeliverVerdict) string {
	if v.Code != "" {
		return v.Code
	}
	return deadletter.CodeRejected
}

// AckTarget returns what a unary Ack or Nack of systemID to subscription id settles: g, the
// consumer group with the id, and the sequence number parse (the engine's) reads in
// systemID. Or it says why there is none: the id is a fanout subscription's (fanout), no
// group has it (g is zero), or systemID is not a message of this engine.
func AckTarget[G comparable](id, systemID string, fanout bool, g G, parse func(string) (uint64, error)) (G, uint64, error) {
	var none G
	switch {
	case fanout:
		return none, 0, fmt.Errorf("%w: subscription %q is fanout; fanout deliveries are not acked", broker.ErrGroupMismatch, id)
	case g == none:
		return none, 0, fmt.Errorf("%w %q: no consumer group has this subscription_id", broker.ErrUnknownSubscription, id)
	}
	seq, err := parse(systemID)
	return g, seq, err
}

// NotHeld refuses a unary Ack of systemID that group id does not hold.
func NotHeld(systemID, id string) error {
	return fmt.Errorf("%w %q: subscription %q does not hold it (never delivered, already acked or dead-lettered)", broker.ErrUnknownMessage, systemID, id)
}

// NotInFlight refuses a unary Nack of systemID that no member of group id holds.
func NotInFlight(systemID, id string) error {
	return fmt.Errorf("%w %q: subscription %q has no such message in flight", broker.ErrUnknownMessage, systemID, id)
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

// Seqs reads the sequence numbers of system_ids ids with parse (the engine's), for a
// member's Ack, Nack or Touch, and counts those it does not read (malformed, or not this
// engine's): they are skipped, as a late or duplicate ack never ends a stream.
func Seqs(ids []string, parse func(string) (uint64, error)) (seqs []uint64, bad int) {
	seqs = make([]uint64, 0, len(ids))
	for _, id := range ids {
		if seq, err := parse(id); err == nil {
			seqs = append(seqs, seq)
		} else {
			bad++
		}
	}
	return seqs, bad
}
