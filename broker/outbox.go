package broker

import "sync"

// outbox holds the deliveries waiting to be sent on one subscription's stream. Producers
// (publishers, the group dispatcher) push; the stream's sender drains in batches. ready is
// signalled when the outbox goes from empty to non-empty, so a sender that found it empty
// and then waits on ready never misses a message.
//
// Lock order: outbox.mu is a leaf, taken under group.mu.
type outbox struct {
	mu    sync.Mutex
	buf   []Delivery
	head  int
	bytes int // payload bytes buffered
	ready chan struct{}
}

func newOutbox() outbox { return outbox{ready: make(chan struct{}, 1)} }

// pushLocked appends d. o.mu must be held.
func (o *outbox) pushLocked(d Delivery) {
	o.buf = append(o.buf, d)
	o.bytes += len(d.Msg.Payload)
	if len(o.buf)-o.head == 1 {
		select {
		case o.ready <- struct{}{}:
		default:
		}
	}
}

func (o *outbox) lenLocked() int { return len(o.buf) - o.head }

// take moves up to maxN deliveries (and at least one, if any, even past maxBytes) into dst.
func (o *outbox) take(dst []Delivery, maxN, maxBytes int) []Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	size := 0
	for o.head < len(o.buf) && maxN > 0 {
		d := o.buf[o.head]
		n := len(d.Msg.Payload)
		if size > 0 && size+n > maxBytes {
			break
		}
		dst = append(dst, d)
		o.buf[o.head] = Delivery{}
		o.head++
		o.bytes -= n
		size += n
		maxN--
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

// drainLocked removes and returns everything still buffered. o.mu must be held.
func (o *outbox) drainLocked() []Delivery {
	ds := o.buf[o.head:]
	o.buf, o.head, o.bytes = nil, 0, 0
	return ds
}
