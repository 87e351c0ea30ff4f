package memory

import (
	"fmt"
	"sync"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/internal/streaming"
)

// Stream is one subscriber connection (a Subscribe stream of the protocol) carrying any
// number of subscriptions, as a NATS connection carries many SUBs. Their deliveries share the
// stream's buffer, its order and its limits: a stream that falls past its fanout buffer
// limits is a slow consumer as a whole. The owner drains it with Next after Ready fires and
// must Close it when the connection ends; Done is closed when the broker ends the stream
// itself (slow consumer, shutdown) and Err says why.
//
// Besides messages, Next returns one event per Subscribe call, in the stream's order and
// before any message of the new subscription: a Delivery with Msg nil whose Sub opened, or
// was refused (Sub.Refused() says why).
type Stream struct {
	b      *Engine
	id     uint64                    // for Engine.Streams
	events bool                      // Subscribe calls are reported in Next
	size   func(*broker.Message) int // what a delivery adds to a batch, for Next's maxBytes

	// out is the stream's buffer. out.mu also guards closed and err, and fields of the
	// stream's subscriptions (see Subscription): a deliver checks them and pushes under one
	// lock. Only the stream's, its subscriptions' and the outbox's methods take it.
	out outbox
	// fin, under out.mu: whether and why it ended; nothing more is pushed after but group
	// deliveries, taken back as members leave.
	fin       streaming.End
	closeOnce sync.Once

	// subs are the open subscriptions by id. Their lock may be taken before out.mu, never
	// after: register checks fin and queues the opening event under both.
	subs streaming.Subs[*Subscription, lockrank.MemoryStreamSubs]
}

// NewStream opens a stream to carry subscriptions (broker.Engine). size measures what a
// delivery adds to a batch of Next; nil measures payload bytes.
func (b *Engine) NewStream(size func(*broker.Message) int) broker.Stream {
	st := b.newStream(size)
	st.events = true
	return st
}

func (b *Engine) newStream(size func(*broker.Message) int) *Stream {
	if size == nil {
		size = payloadSize
	}
	return &Stream{b: b, id: b.streamSeq.Add(1), size: size, out: newOutbox(b.mem), fin: streaming.NewEnd()}
}

// payloadSize is the size of a stream that has no transport: its batches are bounded in
// payload bytes.
func payloadSize(m *broker.Message) int { return len(m.Payload) }

// Subscribe opens a subscription on the stream. A stream may carry a consumer group once:
// a second member of the same group on one stream is refused.
func (st *Stream) Subscribe(o broker.SubscribeOptions) (broker.Subscription, error) {
	s, err := st.b.subscribe(o, st)
	if err != nil {
		st.refuse(o, err)
		return nil, err // not a nil *Subscription in an interface
	}
	return s, nil
}

// Refuse queues the event of an open refused before it reached the engine.
func (st *Stream) Refuse(o broker.SubscribeOptions, err error) { st.refuse(o, err) }

// refuse queues the event of an open that failed, on a stream that reports them.
func (st *Stream) refuse(o broker.SubscribeOptions, err error) {
	if st.events {
		ref := &Subscription{b: st.b, st: st, mode: o.Mode, refused: err}
		ref.id = o.ID
		if o.ID == "" && o.Mode == broker.Balanced {
			ref.id = o.Group
		}
		st.out.mu.Lock()
		if !st.fin.Ended() {
			st.out.pushLocked(delivery{sub: ref})
		}
		st.out.mu.Unlock()
	}
}

// register adds s to the stream and queues its opening event; it fails if the stream has
// ended or already carries s's id. It is called before s is routed to; live, if not nil, is
// run just before the event is queued, under the stream's outbox lock, to make s routed to:
// what is published once the subscriber has its event (which it cannot take before the lock
// is let go of) reaches s. Without it, a fanout subscriber that published at once on hearing
// "subscribed" could miss its own message (TestStreamCarriesManySubscriptions, once in
// hundreds of runs on a loaded machine).
func (st *Stream) register(s *Subscription, peer string, live func()) error {
	return st.subs.Add(s.id, s, peer, st.b.opts.MaxSubscriptionsPerStream, func() error {
		st.out.mu.Lock()
		defer st.out.mu.Unlock()
		if st.fin.Ended() {
			return fmt.Errorf("%w: the stream has ended", broker.ErrSubscriptionClosed)
		}
		if live != nil {
			live()
		}
		if st.events {
			st.out.pushLocked(delivery{sub: s})
		}
		return nil
	})
}

// Lookup returns the stream's open subscription with this id. With id empty it returns the
// stream's only subscription, if it has exactly one; n is how many it has.
func (st *Stream) Lookup(id string) (broker.Subscription, int) { return st.subs.Lookup(id) }

// Subscriptions returns the stream's open subscriptions, in no order.
func (st *Stream) Subscriptions() []broker.Subscription { return st.subs.List() }

// Ready is signalled when deliveries may be waiting; call Next until it returns none.
func (st *Stream) Ready() <-chan struct{} { return st.out.ready }

// Done is closed when the stream has ended.
func (st *Stream) Done() <-chan struct{} { return st.fin.Done() }

// Err says why the stream ended: ErrSlowConsumer, ErrShuttingDown or ErrSubscriptionClosed;
// nil while it is open.
func (st *Stream) Err() error {
	st.out.mu.Lock()
	defer st.out.mu.Unlock()
	return st.fin.Err()
}

// Next appends to dst up to maxN waiting deliveries and events of at most maxBytes in all,
// as the stream's size measures them (but always at least one, if any wait).
func (st *Stream) Next(dst []broker.Delivery, maxN, maxBytes int) []broker.Delivery {
	return st.out.take(dst, maxN, maxBytes, st.size)
}

// Close ends the stream and every subscription on it: group members' unacked messages go at
// once to the other members. Close is idempotent.
func (st *Stream) Close() {
	st.end(broker.ErrSubscriptionClosed)
	st.detachAll()
}

// end marks the stream ended with err unless it already was, and reports whether this call
// ended it.
func (st *Stream) end(err error) bool {
	st.out.mu.Lock()
	defer st.out.mu.Unlock()
	return st.endLocked(err)
}

func (st *Stream) endLocked(err error) bool { return st.fin.End(err) }

// detachAll removes every subscription of an ended stream from routing, once. No lock may be
// held.
func (st *Stream) detachAll() {
	st.closeOnce.Do(func() {
		for _, s := range st.subs.Take() {
			s.detach()
		}
		// Group members took their deliveries back as they left; what is left is fanout
		// deliveries nobody will send.
		st.out.mu.Lock()
		st.out.clearLocked()
		st.out.mu.Unlock()
	})
}
