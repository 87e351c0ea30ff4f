package memory

import (
	"fmt"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// Subscription is one open subscription: a fanout subscription, or one member of a consumer
// group, carried by a Stream. Broker.Subscribe gives it a stream of its own, drained through
// the Subscription's Next, Ready, Done and Err; Stream.Subscribe shares the caller's stream.
// Balanced deliveries are settled with Ack, Nack and Touch. Close ends the
// subscription (and a stream of its own).
//
// A broker holding 100,000 subscriptions holds 100,000 of these, so it is kept small: a
// fanout subscription's settings are its id; a member's live in bal.
type Subscription struct {
	b        *Engine
	st       *Stream
	id       string
	patterns []string
	g        *group           // broker.Balanced
	m        *member          // broker.Balanced
	bal      *broker.Settings // broker.Balanced
	refused  error            // an event for an open that failed: the subscription never existed

	// Under st.out.mu, the stream's lock, on purpose: a fanout deliver checks that stream and
	// subscription are open, checks room, pushes and counts in one critical section, so that
	// a publish takes one lock per subscriber (see deliver). Only the stream's own methods and
	// the Subscription's take it; the broker and groups call them (stats, handOver,
	// takeUnsent).
	delivered uint64 // under st.out.mu: fanout deliveries taken
	dropped   uint64 // under st.out.mu: fanout deliveries lost as a slow consumer
	mode      broker.Mode
	own       bool // st was made for this subscription alone
	closed    bool // under st.out.mu: unsubscribed; deliver pushes nothing for s once Close removed its buffer
}

// Settings returns the options in force.
func (s *Subscription) Settings() broker.Settings {
	if s.bal != nil {
		return *s.bal
	}
	return broker.Settings{ID: s.id, MemberID: s.id, Mode: broker.Fanout, Patterns: s.patterns}
}

// Ack settles deliveries by system_id: the member's, or another member's of its group (a
// message redelivered elsewhere that this member processed after all). Ids the group does
// not hold (unknown, malformed, already acked, redelivered to another member) are skipped
// and counted: a late or duplicate ack never ends a stream. A fanout subscription takes none.
func (s *Subscription) Ack(ids []string) (skipped int) {
	if s.m == nil {
		return 0
	}
	seqs, bad := grouping.Seqs(ids, s.b.ids.parse)
	return s.g.ack(s.m, seqs) + bad
}

// Nack gives the member's deliveries back to the group, to be redelivered after delay (at
// once if zero, the group's back-off permitting); skipped as Ack.
func (s *Subscription) Nack(ids []string, delay time.Duration, reason string) (skipped int) {
	if s.m == nil {
		return 0
	}
	seqs, bad := grouping.Seqs(ids, s.b.ids.parse)
	return s.g.nack(s.m, seqs, delay, reason) + bad
}

// Touch restarts the ack deadline of the member's deliveries: a full AckDeadline from now.
func (s *Subscription) Touch(ids []string) (skipped int) {
	if s.m == nil {
		return 0
	}
	seqs, bad := grouping.Seqs(ids, s.b.ids.parse)
	return s.g.touch(s.m, seqs) + bad
}

// ID returns the subscription's id (Settings().ID, without copying the settings).
func (s *Subscription) ID() string { return s.id }

// Mode returns the subscription's mode.
func (s *Subscription) Mode() broker.Mode { return s.mode }

// Refused is non-nil for the subscription of a refused-open event (see Stream): why it was
// refused.
func (s *Subscription) Refused() error { return s.refused }

// Ready is signalled when deliveries may be waiting on the subscription's stream; call Next
// until it returns none.
func (s *Subscription) Ready() <-chan struct{} { return s.st.Ready() }

// Done is closed when the subscription's stream has ended.
func (s *Subscription) Done() <-chan struct{} { return s.st.Done() }

// Err says why the subscription's stream ended: ErrSlowConsumer, ErrShuttingDown or
// ErrSubscriptionClosed; nil while it is open.
func (s *Subscription) Err() error { return s.st.Err() }

// Next appends to dst up to maxN deliveries waiting on the subscription's stream, holding at
// most maxBytes of payload (but always at least one, if any wait).
func (s *Subscription) Next(dst []broker.Delivery, maxN, maxBytes int) []broker.Delivery {
	return s.st.Next(dst, maxN, maxBytes)
}

// Close ends the subscription: nothing more is delivered for it, and what its stream still
// buffers for it is dropped. A group member's unacked messages go at once to the other
// members. Close is idempotent.
func (s *Subscription) Close() {
	if s.refused != nil {
		return
	}
	if s.own {
		s.st.Close()
		return
	}
	st := s.st
	st.subs.Remove(s.id, s)
	st.out.mu.Lock()
	s.closed = true
	if s.g == nil { // a leaving member's deliveries are taken back by group.leave
		st.out.removeLocked(s, nil)
	}
	st.out.mu.Unlock()
	s.detach()
}

// evict ends a group member's subscription for the engine (its group was deleted): it leaves
// its stream with an Ended event, and a stream left with no subscription ends with err. The
// group has already let go of the member and what it held. No lock may be held.
func (s *Subscription) evict(err error) {
	st := s.st
	if s.own {
		st.end(err)
		return
	}
	left := st.subs.Remove(s.id, s)
	st.out.mu.Lock()
	s.closed = true
	if !st.fin.Ended() {
		s.m.ended = err
		st.out.pushLocked(delivery{sub: s, attempt: endedEvent})
	}
	st.out.mu.Unlock()
	if left == 0 {
		st.end(err)
	}
}

// end ends the subscription's stream with err unless it already ended, and reports whether
// this call ended it.
func (s *Subscription) end(err error) bool { return s.st.end(err) }

// detach removes the subscription from the broker; later calls do nothing. No lock may be
// held.
func (s *Subscription) detach() { s.b.detach(s) }

// deliver implements target for a fanout subscription. A subscriber over its buffer limits
// loses the message (SlowConsumerDrop) or is disconnected (SlowConsumerDisconnect); so does
// one that already has messages buffered when the broker's memory budget is used up (one
// that keeps up still gets the message: see RATIONALE.md). Above half
// its limits it returns a channel closed once it has drained to a quarter: the publisher may
// wait on it (see Broker.route), which paces publishers to subscribers that are slow but alive.
func (s *Subscription) deliver(m *message) (room <-chan struct{}, _ error) {
	st := s.st
	st.out.mu.Lock()
	if st.fin.Ended() || s.closed {
		st.out.mu.Unlock()
		return nil, errNotTaken
	}
	o := &s.b.opts
	overBudget := st.out.lenLocked() > 0 && s.b.mem.used.Load() > s.b.mem.limit
	if st.out.lenLocked() >= o.FanoutBufferMessages || st.out.bytes+int(m.cost) > o.FanoutBufferBytes || overBudget {
		s.dropped++
		if o.SlowConsumer == SlowConsumerDrop {
			st.out.mu.Unlock()
			return nil, errNotTaken
		}
		n, bytes := st.out.lenLocked(), st.out.bytes
		st.endLocked(fmt.Errorf("%w: %s", broker.ErrSlowConsumer, slowReason(overBudget)))
		st.out.mu.Unlock()
		s.b.log.Warn("disconnecting slow consumer", "subscription", s.id, "broker_memory_budget_used_up", overBudget,
			"buffered_messages", n, "buffered_bytes", bytes, "limit_messages", o.FanoutBufferMessages, "limit_bytes", o.FanoutBufferBytes)
		st.detachAll()
		return nil, errNotTaken
	}
	s.delivered++ // the publish holds m for this subscriber
	st.out.pushLocked(delivery{m: m, sub: s, attempt: 1})
	if !st.out.stalled && o.PublisherWait > 0 && (st.out.lenLocked() >= o.FanoutBufferMessages/2 || st.out.bytes >= o.FanoutBufferBytes/2) {
		if st.out.room == nil {
			st.out.room = make(chan struct{})
			st.out.lowWater = o.FanoutBufferMessages / 4
		}
		room = st.out.room
	}
	st.out.mu.Unlock()
	return room, nil
}

func slowReason(overBudget bool) string {
	if overBudget {
		return "the broker's memory budget (memory { max_bytes }) is used up and this subscriber has messages waiting; it must read faster, or the broker needs more memory"
	}
	return "the subscriber fell behind by more than its buffer (fanout { buffer_messages, buffer_bytes }); read faster, or raise the limits"
}

// stats returns s's counters (a fanout subscription's) and what its stream buffers.
func (s *Subscription) stats() broker.SubscriptionStats {
	o := &s.st.out
	o.mu.Lock()
	defer o.mu.Unlock()
	return broker.SubscriptionStats{ID: s.id, Patterns: s.patterns, Delivered: s.delivered, Dropped: s.dropped, Buffered: o.lenLocked()}
}

// handOver queues a consumer group's delivery of m to its member s, on s's stream. The group
// holds m until it is settled. Called under group.mu.
func (s *Subscription) handOver(m *message, attempt uint32) {
	o := &s.st.out
	o.mu.Lock()
	o.pushLocked(delivery{m: m, sub: s, attempt: attempt})
	o.mu.Unlock()
}

// takeUnsent removes what s's stream still buffers for s, a leaving member, calling f on each
// delivery: those never reached it. Called under group.mu.
func (s *Subscription) takeUnsent(f func(delivery)) {
	o := &s.st.out
	o.mu.Lock()
	o.removeLocked(s, f)
	o.mu.Unlock()
}

// stall marks the subscriber as not draining: publishers stop waiting for it.
func (s *Subscription) stall() {
	s.st.out.mu.Lock()
	s.st.out.stalled = true
	s.st.out.mu.Unlock()
}
