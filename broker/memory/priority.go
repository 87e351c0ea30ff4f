package memory

import (
	"math/bits"

	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// leveled is a queue by priority level (broker.Dispatch.MaxPriority): a ring per level,
// served highest level first, FIFO within a level. Level 0, the only one of a group without
// priorities, is a ring of its own; the others are made on the first message above 0, so a
// group without priorities pays one test of mask per pop. It holds a group's unkeyed queue
// (entries) and a tenant's ready lanes (keyed.go).
type leveled[T any] struct {
	base ring[T]
	hi   *[grouping.MaxPriority]ring[T] // levels 1 to 9, hi[l-1]
	mask uint16                         // bit l set: level l > 0 holds something
	n    int                            // over every level
}

func (q *leveled[T]) len() int { return q.n }

// at returns the ring of level l, making the upper levels if need be.
func (q *leveled[T]) level(l uint8) *ring[T] {
	if l == 0 {
		return &q.base
	}
	if q.hi == nil {
		q.hi = new([grouping.MaxPriority]ring[T])
	}
	q.mask |= 1 << l
	return &q.hi[l-1]
}

func (q *leveled[T]) pushBack(x T, l uint8) {
	q.level(l).pushBack(x)
	q.n++
}

func (q *leveled[T]) pushFront(x T, l uint8) {
	q.level(l).pushFront(x)
	q.n++
}

// top returns the ring popFront takes from: the highest level that holds something.
func (q *leveled[T]) top() (*ring[T], uint8) {
	if q.mask == 0 {
		return &q.base, 0
	}
	l := uint8(bits.Len16(q.mask) - 1)
	return &q.hi[l-1], l
}

// popFront takes the first of the highest level that holds something; q must not be empty.
func (q *leveled[T]) popFront() T {
	r, l := q.top()
	x := r.popFront()
	q.n--
	if l > 0 && r.len() == 0 {
		q.mask &^= 1 << l
	}
	return x
}

// popLowest takes the first of the lowest level that holds something (what a full group
// with overflow "drop_oldest" lets go of first); q must not be empty.
func (q *leveled[T]) popLowest() T {
	if q.base.len() > 0 || q.mask == 0 {
		q.n--
		return q.base.popFront()
	}
	l := uint8(bits.TrailingZeros16(q.mask))
	r := &q.hi[l-1]
	x := r.popFront()
	q.n--
	if r.len() == 0 {
		q.mask &^= 1 << l
	}
	return x
}

// levels calls f on the ring of every level that holds something, highest first.
func (q *leveled[T]) levels(f func(*ring[T])) {
	for m := q.mask; m != 0; {
		l := bits.Len16(m) - 1
		m &^= 1 << l
		f(&q.hi[l-1])
	}
	if q.base.len() > 0 {
		f(&q.base)
	}
}

// reuse empties q for another use (ring.reuse, level by level).
func (q *leveled[T]) reuse() {
	q.base.reuse()
	if q.hi != nil {
		for i := range q.hi {
			q.hi[i].reuse()
		}
	}
	q.mask, q.n = 0, 0
}
