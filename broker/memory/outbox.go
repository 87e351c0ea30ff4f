package memory

import (
	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
)

// outbox holds the deliveries waiting to be sent on one subscription's stream. Producers
// (publishers, the group dispatcher) push; the stream's sender drains in batches. ready is
// signalled when the outbox goes from empty to non-empty, so a sender that found it empty
// and then waits on ready never misses a message.
//
// Locks (lockrank): outbox.mu is taken under b.mu, group.mu or Stream.subs.mu. It guards the
// outbox and, on purpose, the state that decides whether a push may happen (Stream.closed,
// Subscription.closed and a fanout subscription's counters), so that a publish takes one
// lock per subscriber. Only outbox, Stream and Subscription methods take it.
type outbox struct {
	mu    lockrank.Mutex[lockrank.Outbox]
	buf   []delivery
	head  int
	bytes int // what the buffered messages cost (broker.Message.cost)
	mem   *memBudget
	ready chan struct{}

	// Backpressure (fanout): room is made when a publisher finds the outbox above its high
	// water mark, and closed by take once it is back under the low water mark. stalled marks
	// a subscriber that did not drain within the publisher's wait: publishers stop waiting for
	// it until it drains.
	room     chan struct{}
	lowWater int
	stalled  bool
}

func newOutbox(mem *memBudget) outbox { return outbox{ready: make(chan struct{}, 1), mem: mem} }

// pushLocked appends d. o.mu must be held.
func (o *outbox) pushLocked(d delivery) {
	o.buf = append(o.buf, d)
	if d.m != nil {
		o.bytes += int(d.m.cost)
	}
	if len(o.buf)-o.head == 1 {
		select {
		case o.ready <- struct{}{}:
		default:
		}
	}
}

func (o *outbox) lenLocked() int { return len(o.buf) - o.head }

// take moves up to maxN deliveries, of at most maxBytes as size measures them (and at least
// one, if any), into dst. size is the transport's (broker.Engine.NewStream).
func (o *outbox) take(dst []broker.Delivery, maxN, maxBytes int, size func(*broker.Message) int) []broker.Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	total := 0
	var freed int64
	for o.head < len(o.buf) && maxN > 0 {
		d := o.buf[o.head]
		var sz int
		var m *broker.Message
		if d.m != nil {
			m = &d.m.Message
			sz = size(m)
		}
		if total > 0 && total+sz > maxBytes {
			break
		}
		if m == nil && d.attempt == endedEvent {
			dst = append(dst, broker.Delivery{Sub: d.sub, Ended: d.sub.m.ended})
		} else {
			dst = append(dst, broker.Delivery{Msg: m, Sub: d.sub, Attempt: d.attempt})
		}
		o.buf[o.head] = delivery{}
		o.head++
		if d.m != nil {
			o.bytes -= int(d.m.cost)
			freed += fanoutFreed(d)
		}
		total += sz
		maxN--
	}
	if freed != 0 { // one atomic add for the batch
		o.mem.add(-freed)
	}
	if o.room != nil && o.lenLocked() <= o.lowWater {
		close(o.room)
		o.room, o.stalled = nil, false
	}
	if o.head == len(o.buf) {
		o.buf, o.head = o.buf[:0], 0
		if cap(o.buf) > 4096 { // a burst grew the buffer: give the memory back
			o.buf = nil
		}
	} else if o.head >= 1024 && o.head*2 >= len(o.buf) { // a sender that never catches up
		n := copy(o.buf, o.buf[o.head:])
		clear(o.buf[n:])
		o.buf, o.head = o.buf[:n], 0
	}
	return dst
}

// removeLocked removes what is buffered for s, calling f (if not nil) on each removed
// message. o.mu must be held.
func (o *outbox) removeLocked(s *Subscription, f func(delivery)) {
	kept := o.buf[:o.head]
	for _, d := range o.buf[o.head:] {
		if d.sub != s || d.m == nil {
			kept = append(kept, d)
			continue
		}
		o.bytes -= int(d.m.cost)
		o.mem.add(-fanoutFreed(d))
		if f != nil {
			f(d)
		}
	}
	clear(o.buf[len(kept):])
	o.buf = kept
}

// fanoutFreed lets go of the hold of fanout delivery d, which leaves the buffer, and returns
// what the budget gets back; a group member's deliveries are held by the group until settled.
func fanoutFreed(d delivery) int64 {
	if d.m == nil || d.sub.g != nil {
		return 0
	}
	return holderOverhead + unheld(d.m)
}

// clearLocked drops everything buffered, once the stream has ended and its subscriptions
// are detached. o.mu must be held.
func (o *outbox) clearLocked() {
	var freed int64
	for _, d := range o.buf[o.head:] {
		freed += fanoutFreed(d)
	}
	o.mem.add(-freed)
	clear(o.buf)
	o.buf, o.head, o.bytes = nil, 0, 0
}
