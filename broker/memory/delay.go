package memory

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
)

// Delayed publish (Draft.DeliverAfter, DeliverAt). A delayed message has passed the gate —
// permissions, limits, plugins — when it is published; the engine gives it its sequence
// number (and so its system_id) then, and holds it here, in one heap by due time, until the
// scheduler's goroutine routes it as if it were published at that moment: to the fanout
// subscriptions and groups that match then. It is charged to the memory budget while held,
// and lost if the process ends (README.md, "Delayed publish"). See RATIONALE.md, "Why is a
// delayed message published at its time?".
//
// Locks (lockrank): delayed.mu is taken with no other lock held; it registers its wake-up
// with the scheduler under it. Due messages are routed with it released.
type delayQueue struct {
	b     *Engine
	mu    lockrank.Mutex[lockrank.MemoryDelayed]
	items heldHeap
	bytes int64 // what items cost (heldCost each), charged to the memory budget
	wake  int64 // earliest time registered with the scheduler; 0 if none
	// failed counts the messages every target refused when due (full groups: no publisher
	// is left to tell, so it is logged).
	failed uint64
}

// held is a delayed message: what routing it takes, and when.
type held struct {
	due     int64 // Engine.now clock
	seq     uint64
	topic   string
	key     string
	payload []byte
	headers broker.Headers
	hb      int
	ttl     time.Duration
	prio    uint8
	cost    int64
}

type heldHeap []held

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	return h[i].due < h[j].due || h[i].due == h[j].due && h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = held{}
	*h = old[:len(old)-1]
	return x
}

// hold keeps m, which passed the gate with m.Delay > 0, to be routed when due; its answer is
// the system_id it will have. It refuses m with ErrLimit past limits { max_delayed,
// max_delayed_bytes } or the consumer groups' share of the memory budget.
func (d *delayQueue) hold(m *publishing.Msg) (broker.PublishResult, error) {
	b := d.b
	// MessageCost's fixed overhead covers the heap's slot (120 bytes; up to twice that
	// while the slice grows): TestDelayedCost measures it.
	cost := grouping.MessageCost(m.Topic, m.Key, "", m.Payload, len(m.Headers), m.HB, 0)
	d.mu.Lock()
	defer d.mu.Unlock()
	if over := d.overLocked(cost); over != "" {
		return broker.PublishResult{}, fmt.Errorf("%w: the broker holds %d delayed messages of %d bytes, and this one would take it past %s; publish it later, or with a shorter delay",
			broker.ErrLimit, len(d.items), d.bytes, over)
	}
	seq := b.seq.Add(1)
	due := b.now() + int64(m.Delay)
	heap.Push(&d.items, held{due: due, seq: seq, topic: m.Topic, key: m.Key, payload: m.Payload, headers: m.Headers, hb: m.HB, ttl: m.TTL, prio: m.Prio, cost: cost})
	d.bytes += cost
	b.mem.add(cost)
	if d.wake == 0 || due < d.wake {
		d.wake = due
		b.sched.add(due, d)
	}
	return broker.PublishResult{Seq: seq, SystemID: b.ids.format(seq)}, nil
}

// overLocked says which bound holding one more message of cost bytes would pass, or "".
func (d *delayQueue) overLocked(cost int64) string {
	l := &d.b.opts.Limits
	switch {
	case len(d.items) >= l.MaxDelayed:
		return fmt.Sprintf("its limit of %d delayed messages (limits { max_delayed })", l.MaxDelayed)
	case d.bytes+cost > l.MaxDelayedBytes:
		return fmt.Sprintf("its limit of %d bytes of delayed messages (limits { max_delayed_bytes })", l.MaxDelayedBytes)
	case d.b.mem.used.Load()+cost > d.b.mem.groupsLimit:
		return fmt.Sprintf("the broker's memory budget for what it holds for later (%d bytes, 3/4 of memory { max_bytes })", d.b.mem.groupsLimit)
	}
	return ""
}

// onTimer routes the messages that fell due, in due order, with d.mu released; the scheduler
// calls it.
func (d *delayQueue) onTimer() {
	b := d.b
	for {
		d.mu.Lock()
		d.wake = 0
		if len(d.items) == 0 {
			d.mu.Unlock()
			return
		}
		if at := d.items[0].due; at > b.now() || b.closing.Load() {
			if !b.closing.Load() {
				d.wake = at
				b.sched.add(at, d)
			}
			d.mu.Unlock()
			return
		}
		h := heap.Pop(&d.items).(held)
		d.bytes -= h.cost
		d.mu.Unlock()
		b.mem.add(-h.cost)
		_, err := b.routeSeq(h.seq, h.topic, h.key, h.ttl, h.prio, h.payload, h.headers, h.hb, false)
		if err != nil {
			d.mu.Lock()
			d.failed++
			d.mu.Unlock()
			b.log.Warn("delayed message refused when due", "topic", h.topic, "system_id", b.ids.format(h.seq), "error", err)
		}
	}
}

// drop lets go of every delayed message (the broker is shutting down: they are lost, by
// design) and returns how many there were.
func (d *delayQueue) drop() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.items)
	d.b.mem.add(-d.bytes)
	d.items, d.bytes = nil, 0
	return n
}

// stats returns how many messages are held, their bytes, and how many were refused when due.
func (d *delayQueue) stats() (n int, bytes int64, failed uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.items), d.bytes, d.failed
}
