// Package deadletter names what clients, plugins and engines read on a dead-lettered or
// redelivered message the same way: the tb-dead-letter-* headers an engine sets on a dead
// letter, the reasons it gives for a redelivery, and a consumer group's default dead-letter
// topic. It imports nothing of tinybroker, so that every layer may use it.
package deadletter

import "unicode/utf8"

// Headers an engine sets on a dead letter.
const (
	HeaderReason       = "tb-dead-letter-reason"    // free text, for a person
	HeaderCode         = "tb-dead-letter-code"      // one of the Code* constants, for tooling
	HeaderTopic        = "tb-dead-letter-topic"     // the message's original topic
	HeaderSystemID     = "tb-dead-letter-system-id" // the message's original system_id
	HeaderSubscription = "tb-dead-letter-subscription"
	HeaderGroup        = "tb-dead-letter-group"
	HeaderAttempts     = "tb-dead-letter-attempts"
	// HeaderPrefix starts every header above; a replay removes them.
	HeaderPrefix = "tb-dead-letter-"
	// HeaderReplayCount is set on a replayed dead letter: how many times it was replayed.
	HeaderReplayCount = "tb-replay-count"
)

// Reasons given for a redelivery or dead letter (broker.RedeliverEvent.Reason, HeaderReason).
// A nack gives its own reason, or ReasonNack if it has none.
const (
	ReasonNack        = "nack"
	ReasonAckDeadline = "ack deadline exceeded"
	ReasonMemberLeft  = "member left"
	ReasonExpired     = "expired" // past its ttl or its group's max_age
)

// Codes of a dead letter (HeaderCode, broker.DeadLetter.Code): which path sent it to dead
// letters, from a closed set that tooling can match, beside the reason's free text (a nack's
// or a plugin's own words). Every path that dead-letters sets exactly one:
//
//   - CodeMaxDeliveries: attempts exhausted. A message taken back after a nack, a passed ack
//     deadline or its member leaving, or redelivered by JetStream itself past the count, at
//     max_deliveries attempts, with no on_redeliver verdict other than the default. Its reason
//     is the last failure's (ReasonNack or the nack's own, ReasonAckDeadline, ReasonMemberLeft).
//   - CodeExpired: past its ttl or its group's max_age (on_expire "dead_letter"), whether it
//     waited in the group or came back from a member. Its reason is ReasonExpired.
//   - CodeRejected: an on_redeliver plugin's verdict was to dead-letter it. Its reason is the
//     plugin's, or the failure it was asked about.
//   - CodePluginError: a plugin with failure_policy "dead_letter" failed while deciding about
//     it: on_redeliver (to the group's dead-letter topic), or on_publish (to
//     "dlq.plugin.<name>", which no group keeps). Its reason names the plugin and the error.
//
// A dead letter kept from before codes existed (JetStream keeps them in a stream) has none.
const (
	CodeMaxDeliveries = "max_deliveries"
	CodeExpired       = "expired"
	CodeRejected      = "rejected"
	CodePluginError   = "plugin_error"
)

// DefaultTopic is where consumer group id (its subscription_id) dead-letters when it names no
// topic: "dlq.<subscription_id>".
func DefaultTopic(id string) string { return "dlq." + id }

// MaxReasonBytes bounds the reason HeaderReason carries: a nack's reason is the member's
// text, and one as large as a frame would push the dead letter past max_header_bytes, so that
// its publish to the dead-letter topic failed.
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
