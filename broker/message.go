package broker

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Message is a published message. It is immutable once published: the same *Message is
// shared by every subscription and group it is routed to.
type Message struct {
	ID       uint64 // sequence number in this broker process
	SystemID string // ID as the protocol's system_id, formatted once
	Topic    string
	Payload  []byte
	Headers  map[string]string
	// PublishedAt is when the broker accepted the message, in Unix nanoseconds.
	PublishedAt int64
	// Targets is how many fanout subscriptions and groups the message was routed to.
	Targets int
	// HeaderBytes is the sum of the lengths of the header keys and values.
	HeaderBytes int
	// Wire is for the transport: the server caches the message's encoding here, to share it
	// between the subscriptions the message goes to. The broker never reads it.
	Wire atomic.Pointer[[]byte]
}

// withHeaders returns a copy of m with headers set and deleted; m itself is shared and
// never changes. Headers that are not UTF-8 are not set (subscribers decode them as strings).
func (m *Message) withHeaders(set map[string]string, del []string) *Message {
	h := make(map[string]string, len(m.Headers)+len(set))
	for k, v := range m.Headers {
		h[k] = v
	}
	for _, k := range del {
		delete(h, k)
	}
	for k, v := range set {
		if utf8.ValidString(k) && utf8.ValidString(v) {
			h[k] = v
		}
	}
	hb := 0
	for k, v := range h {
		hb += len(k) + len(v)
	}
	return &Message{ID: m.ID, SystemID: m.SystemID, Topic: m.Topic, Payload: m.Payload, Headers: h, PublishedAt: m.PublishedAt, HeaderBytes: hb}
}

// Delivery is a message handed to one subscription of a stream, or, with Msg nil, an event
// of the stream: Sub opened, or was refused (see Stream).
type Delivery struct {
	Msg     *Message
	Sub     *Subscription
	Attempt uint32 // 1 on the first delivery
}

// Headers the broker sets on a dead letter.
const (
	HeaderDeadLetterReason       = "tb-dead-letter-reason"
	HeaderDeadLetterTopic        = "tb-dead-letter-topic"     // the message's original topic
	HeaderDeadLetterSystemID     = "tb-dead-letter-system-id" // the message's original system_id
	HeaderDeadLetterSubscription = "tb-dead-letter-subscription"
	HeaderDeadLetterGroup        = "tb-dead-letter-group"
	HeaderDeadLetterAttempts     = "tb-dead-letter-attempts"
)

// Reasons given for a redelivery or dead letter.
const (
	ReasonNack        = "nack"
	ReasonAckDeadline = "ack deadline exceeded"
	ReasonMemberLeft  = "member left"
)

// idCodec turns message sequence numbers into system_ids and back. A system_id is
// "<epoch>-<seq>": the epoch is random per broker process, so an id from an earlier process
// is refused instead of acking an unrelated message that reused its number.
type idCodec struct{ prefix string }

func newIDCodec() idCodec {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return idCodec{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (c idCodec) format(seq uint64) string {
	buf := make([]byte, 0, len(c.prefix)+20)
	buf = append(buf, c.prefix...)
	return string(strconv.AppendUint(buf, seq, 10))
}

func (c idCodec) parse(id string) (uint64, error) {
	rest, ok := strings.CutPrefix(id, c.prefix)
	if !ok {
		return 0, fmt.Errorf("%w %q: not a system_id of this broker process (ids look like %q; the broker may have restarted)", ErrUnknownMessage, id, c.prefix+"42")
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w %q: malformed system_id", ErrUnknownMessage, id)
	}
	return seq, nil
}
