package memory

// expiry holds the entries of a group that expire (a ttl, or the group's max_age), to be let
// go of at their time, and lets one go early (acked, dead-lettered, dropped) at once.
//
// With ttls set every message of the group goes in and an ack takes it out, and a full group
// holds 100,000 of them: issue 28 asks for W2 with ttls to be no slower than without, and a
// heap alone (a sift of log n entries, each a cache miss, per ack) cost W2 a tenth of the
// broker's CPU. Most groups' messages come in the order they expire (one ttl for all, or
// max_age alone), so those wait in a queue in that order, where taking one out is O(1): its
// slot is cleared, and the queue's front moves past cleared slots. A message that expires
// before the last one queued (a shorter ttl) goes to a heap. The queue's cleared slots are
// bounded: when they outnumber the live ones (and 1,024), the queue is compacted, an O(live)
// pass paid for by as many removals. A slot is 16 bytes, at most 32 a message with the
// cleared ones: not charged apart, within the rounding of grouping.HolderOverhead's 128 bytes
// an entry is counted for (TestMessageCostCoversHeap allows a tenth under).
type expiry struct {
	fifo []expSlot // in order of at; a cleared slot (e nil) was let go of early
	base int64     // the position of fifo[0] since the group began (entry.expPos is position+1)
	live int       // the slots of fifo not cleared
	heap expHeap   // those that came out of order

	compactions int // how many times the queue was compacted (tests)
}

type expSlot struct {
	at int64 // e.expires
	e  *entry
}

// compactAbove is how many cleared slots the queue keeps before it compacts (with as many
// live ones as cleared).
const compactAbove = 1024

// push adds e, which expires at e.expires.
func (x *expiry) push(e *entry) {
	if n := len(x.fifo); n == 0 || x.fifo[n-1].at <= e.expires {
		x.fifo = append(x.fifo, expSlot{e.expires, e})
		x.live++
		e.expPos = x.base + int64(n) + 1
		return
	}
	x.heap.push(e)
}

// drop takes e out, if it is in.
func (x *expiry) drop(e *entry) {
	switch {
	case e.expIdx > 0:
		x.heap.remove(e.expIdx - 1)
	case e.expPos > 0:
		x.fifo[e.expPos-1-x.base].e = nil
		e.expPos = 0
		x.live--
		x.trim()
		if cleared := len(x.fifo) - x.live; cleared > compactAbove && cleared > x.live {
			x.compact()
		}
	}
}

// next returns when the first entry expires, if there is one.
func (x *expiry) next() (at int64, ok bool) {
	if len(x.fifo) > 0 {
		at, ok = x.fifo[0].at, true
	}
	if len(x.heap) > 0 && (!ok || x.heap[0].at < at) {
		at, ok = x.heap[0].at, true
	}
	return at, ok
}

// due takes out and returns the first entry if it expires at now or before, else nil.
func (x *expiry) due(now int64) *entry {
	at, ok := x.next()
	if !ok || at > now {
		return nil
	}
	if len(x.heap) > 0 && x.heap[0].at == at {
		return x.heap.remove(0)
	}
	e := x.fifo[0].e
	x.drop(e)
	return e
}

// trim moves the queue's front past cleared slots: fifo[0] is live, or fifo is empty.
func (x *expiry) trim() {
	i := 0
	for i < len(x.fifo) && x.fifo[i].e == nil {
		i++
	}
	if i == 0 {
		return
	}
	x.base += int64(i)
	if i == len(x.fifo) {
		x.fifo = x.fifo[:0] // empty: start again at the array's front
		return
	}
	clear(x.fifo[:i])
	x.fifo = x.fifo[i:]
}

// compact moves the live slots together, renumbering their entries.
func (x *expiry) compact() {
	live := make([]expSlot, 0, x.live+x.live/2)
	for _, s := range x.fifo {
		if s.e != nil {
			s.e.expPos = x.base + int64(len(live)) + 1
			live = append(live, s)
		}
	}
	x.fifo = live
	x.compactions++
}

// expHeap is a heap of entries, soonest first, each knowing its place (entry.expIdx, 1-based;
// 0 when not in it). Typed, with each entry's time in its slot, so that sifting compares
// within the slice and does not chase the entries.
type expHeap []expSlot

// push adds e.
func (h *expHeap) push(e *entry) {
	*h = append(*h, expSlot{e.expires, e})
	h.up(len(*h) - 1)
}

// remove takes out the entry at i (its expIdx-1) and returns it.
func (h *expHeap) remove(i int) *entry {
	old := *h
	e, last := old[i].e, len(old)-1
	if i != last {
		old[i] = old[last]
	}
	old[last] = expSlot{}
	*h = old[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	e.expIdx = 0
	return e
}

func (h expHeap) up(i int) {
	x := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= x.at {
			break
		}
		h[i] = h[p]
		h[i].e.expIdx = i + 1
		i = p
	}
	h[i] = x
	x.e.expIdx = i + 1
}

// down sifts the entry at i down; it reports whether it moved.
func (h expHeap) down(i int) bool {
	x, start, n := h[i], i, len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].at < h[c].at {
			c = r
		}
		if x.at <= h[c].at {
			break
		}
		h[i] = h[c]
		h[i].e.expIdx = i + 1
		i = c
	}
	h[i] = x
	x.e.expIdx = i + 1
	return i != start
}
