package broker

import (
	"sync"
	"time"
)

// Mode is how a subscription shares messages.
type Mode int

const (
	// Fanout: every matching subscription gets every message, at most once, without acks.
	Fanout Mode = iota + 1
	// Balanced: the members of a consumer group share the messages; each is delivered to one
	// member and stays in flight until acked.
	Balanced
)

func (m Mode) String() string {
	switch m {
	case Fanout:
		return "fanout"
	case Balanced:
		return "balanced"
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
	AckDeadline     time.Duration // default Options.AckDeadline
	MaxDeliveries   int           // 0: unlimited; the group's first member sets it
	DeadLetterTopic string        // default "dlq.<ID>"; the group's first member sets it
}

// Settings are a subscription's options after defaults.
type Settings struct {
	ID              string
	MemberID        string
	MaxInFlight     int
	AckDeadline     time.Duration
	MaxDeliveries   int
	DeadLetterTopic string
}

// Subscription is one open subscription stream: a fanout subscription, or one member of a
// consumer group. The owner drains it with Next after Ready fires, settles balanced
// deliveries with Ack, Nack and Touch, and must Close it when the stream ends. Done is closed
// when the broker ends the subscription itself (slow consumer, shutdown); Err says why.
type Subscription struct {
	b        *Broker
	mode     Mode
	patterns []string
	settings Settings
	g        *group  // Balanced
	m        *member // Balanced

	out       outbox
	closed    bool   // under out.mu
	err       error  // under out.mu; set before done is closed
	delivered uint64 // under out.mu (fanout)
	dropped   uint64 // under out.mu (fanout)
	done      chan struct{}
	closeOnce sync.Once
}

// Settings returns the options in force.
func (s *Subscription) Settings() Settings { return s.settings }

// Mode returns the subscription's mode.
func (s *Subscription) Mode() Mode { return s.mode }

// Ready is signalled when deliveries may be waiting; call Next until it returns none.
func (s *Subscription) Ready() <-chan struct{} { return s.out.ready }

// Done is closed when the subscription has ended.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended: ErrSlowConsumer, ErrShuttingDown or
// ErrSubscriptionClosed; nil while it is open.
func (s *Subscription) Err() error {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.err
}

// Next appends to dst up to maxN waiting deliveries holding at most maxBytes of payload
// (but always at least one, if any wait).
func (s *Subscription) Next(dst []Delivery, maxN, maxBytes int) []Delivery {
	return s.out.take(dst, maxN, maxBytes)
}

// Ack settles deliveries of a balanced subscription by system_id. Ids that are unknown,
// already acked or malformed are skipped: a late or duplicate ack never ends a stream. It
// returns how many ids were skipped. Fanout subscriptions take no acks; they are ignored.
func (s *Subscription) Ack(ids []string) (skipped int) {
	if s.g == nil {
		return 0
	}
	return s.g.ack(s.m, s.b.parseIDs(ids, &skipped)) + skipped
}

// Nack gives this member's deliveries back to the group, to be redelivered after delay (at
// once if zero). It returns how many ids were skipped as unknown or not this member's.
func (s *Subscription) Nack(ids []string, delay time.Duration, reason string) (skipped int) {
	if s.g == nil {
		return 0
	}
	return s.g.nack(s.m, s.b.parseIDs(ids, &skipped), delay, reason) + skipped
}

// Touch extends the ack deadline of this member's in-flight deliveries by a full
// AckDeadline from now. It returns how many ids were skipped.
func (s *Subscription) Touch(ids []string) (skipped int) {
	if s.g == nil {
		return 0
	}
	return s.g.touch(s.m, s.b.parseIDs(ids, &skipped)) + skipped
}

// Close ends the subscription. A group member's unacked messages go at once to the other
// members. Close is idempotent.
func (s *Subscription) Close() {
	s.end(ErrSubscriptionClosed)
	s.detach()
}

// end marks the subscription ended with err unless it already was, and reports whether this
// call ended it. It takes out.mu.
func (s *Subscription) end(err error) bool {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.endLocked(err)
}

func (s *Subscription) endLocked(err error) bool {
	if s.closed {
		return false
	}
	s.closed, s.err = true, err
	close(s.done)
	return true
}

// detach removes the subscription from the broker, once. No lock may be held.
func (s *Subscription) detach() {
	s.closeOnce.Do(func() { s.b.detach(s) })
}

// admit implements target: fanout subscriptions never refuse a publish.
func (s *Subscription) admit() bool { return true }
func (s *Subscription) unadmit()    {}

// deliver implements target for a fanout subscription. A subscriber over its buffer limits
// loses the message (SlowConsumerDrop) or is disconnected (SlowConsumerDisconnect). Above half
// its limits it returns a channel closed once it has drained to a quarter: the publisher may
// wait on it (see Broker.route), which paces publishers to subscribers that are slow but alive.
func (s *Subscription) deliver(m *Message) (room <-chan struct{}) {
	s.out.mu.Lock()
	if s.closed {
		s.out.mu.Unlock()
		return nil
	}
	o := &s.b.opts
	if s.out.lenLocked() >= o.FanoutBufferMessages || s.out.bytes+len(m.Payload) > o.FanoutBufferBytes {
		s.dropped++
		if o.SlowConsumer == SlowConsumerDrop {
			s.out.mu.Unlock()
			return nil
		}
		n, bytes := s.out.lenLocked(), s.out.bytes
		s.endLocked(ErrSlowConsumer)
		s.out.mu.Unlock()
		s.b.log.Warn("disconnecting slow consumer", "subscription", s.settings.ID,
			"buffered_messages", n, "buffered_bytes", bytes, "limit_messages", o.FanoutBufferMessages, "limit_bytes", o.FanoutBufferBytes)
		s.detach()
		return nil
	}
	s.delivered++
	s.out.pushLocked(Delivery{Msg: m, Attempt: 1})
	if !s.out.stalled && o.PublisherWait > 0 && (s.out.lenLocked() >= o.FanoutBufferMessages/2 || s.out.bytes >= o.FanoutBufferBytes/2) {
		if s.out.room == nil {
			s.out.room = make(chan struct{})
			s.out.lowWater = o.FanoutBufferMessages / 4
		}
		room = s.out.room
	}
	s.out.mu.Unlock()
	return room
}

// stall marks the subscriber as not draining: publishers stop waiting for it.
func (s *Subscription) stall() {
	s.out.mu.Lock()
	s.out.stalled = true
	s.out.mu.Unlock()
}
