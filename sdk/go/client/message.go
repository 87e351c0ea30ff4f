package client

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/internal/wire"
)

// ErrAlreadySettled is returned by Message.Ack and Message.Nack for a message that was
// already acked or nacked.
var ErrAlreadySettled = errors.New("tinybroker: message already acked or nacked")

// Message is a message delivered to a subscription. Its fields must not be modified.
type Message struct {
	SystemID    string // unique in this broker process; acks and nacks name it
	Topic       string
	Payload     []byte
	Headers     Headers
	PublishedAt time.Time // when the broker accepted it
	// Attempt is 1 on the first delivery and grows with each redelivery (nack, ack deadline
	// passed, or the member holding it left). Redelivered is Attempt > 1.
	Attempt     int
	Redelivered bool
	// SubscriptionID is the subscription the delivery belongs to.
	SubscriptionID string
	// Key is the message's ordering and fairness key ([WithKey]); "" if it has none.
	Key string
	// Priority is the message's priority ([WithPriority]), 0 to 9.
	Priority int

	sub     *Subscription
	gen     uint64 // generation of the stream it came on
	settled atomic.Bool
}

func newMessage(s *Subscription, gen uint64, m *wire.Delivery) *Message {
	return &Message{
		SystemID:       m.SystemID,
		Topic:          m.Topic,
		Payload:        m.Payload,
		Headers:        Headers{raw: m.Headers},
		PublishedAt:    time.Unix(0, m.PublishTimeUnixNano),
		Attempt:        int(m.Attempt),
		Redelivered:    m.Redelivered,
		SubscriptionID: m.SubscriptionID,
		Key:            m.Key,
		Priority:       int(m.Priority),
		sub:            s,
		gen:            gen,
	}
}

// Headers are a message's headers, decoded when read: a handler that reads none pays nothing
// for them. The zero value has none.
type Headers struct{ raw string }

// Get returns the value of the header key, or "" if the message has none.
func (h Headers) Get(key string) string {
	v, _ := wire.HeaderValue(h.raw, key)
	return v
}

// Lookup returns the value of the header key and whether the message has it.
func (h Headers) Lookup(key string) (string, bool) { return wire.HeaderValue(h.raw, key) }

// Map returns the headers in a new map, nil if there are none.
func (h Headers) Map() map[string]string { return wire.HeaderMap(h.raw) }

// Ack acknowledges the message: the broker forgets it. Acks are sent asynchronously, batched
// with others. Only balanced subscriptions take acks; for a fanout delivery Ack does nothing.
// It returns ErrAlreadySettled after an earlier Ack or Nack, and ErrClosed once the
// subscription is closed (the message will be redelivered to another member).
//
// With SubscribeOptions.ManualAck the handler (or any goroutine it hands the message to)
// must call Ack or Nack; otherwise the subscription does it when the handler returns, unless
// the handler already did.
func (m *Message) Ack() error {
	return m.settle(settlement{id: m.SystemID})
}

// Nack gives the message back to its consumer group, to be redelivered (to any member) after
// delay, or at once if delay is 0. For a fanout delivery it does nothing. Errors are as for
// Ack.
func (m *Message) Nack(delay time.Duration) error {
	return m.settle(settlement{id: m.SystemID, gen: m.gen, nack: true, delay: max(delay, 0)})
}

// Touch tells the broker the handler is still working on the message: its ack deadline starts
// again (a full SubscribeOptions.AckDeadline from when the broker gets the touch), so a handler
// whose work takes longer than the deadline keeps the message by touching it more often than
// that. Touches are sent asynchronously, batched with acks. It returns ErrAlreadySettled once
// the message is acked or nacked and ErrClosed once the subscription is closed; for a fanout
// delivery it does nothing. A touch of a message that came on a stream which has since broken
// is dropped: the broker gave that message back to the group when the stream ended.
func (m *Message) Touch() error {
	if m.settled.Load() {
		return ErrAlreadySettled
	}
	if m.sub == nil || !m.sub.balanced {
		return nil
	}
	return m.sub.settle.add(settlement{id: m.SystemID, gen: m.gen, touch: true})
}

func (m *Message) settle(x settlement) error {
	if !m.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	if m.sub == nil || !m.sub.balanced {
		return nil
	}
	return m.sub.settle.add(x)
}
