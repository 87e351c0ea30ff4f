package grouping

import "github.com/tinybroker/tinybroker/broker"

// Breaker is a consumer group's dead-letter breaker (broker.GroupLimits.DeadLetterBreaker):
// it trips when the group dead-letters DeadLetterBreaker messages within
// DeadLetterBreakerWindow, and the engine then pauses the group until an operator resumes
// it. It keeps the times of the last DeadLetterBreaker dead letters, in a ring. The zero
// Breaker is ready; its user's lock guards it.
type Breaker struct {
	times  []int64
	next   int
	filled int
	Trips  uint64 // times it tripped (broker.GroupStats.BreakerTrips)
}

// Note records a dead letter at now (Unix ns) under the group's limits l, and reports
// whether the breaker trips: the last n dead letters (n = l.DeadLetterBreaker), this one
// included, came within the window. Tripped, it starts again from nothing, so that the dead letters
// of what members still held when the group paused do not trip it again at once.
func (b *Breaker) Note(now int64, l broker.GroupLimits) bool {
	n := l.DeadLetterBreaker // at most 10,000 (GroupLimits.Or)
	if n <= 0 {
		b.times, b.next, b.filled = nil, 0, 0
		return false
	}
	if len(b.times) != n {
		b.times, b.next, b.filled = make([]int64, n), 0, 0
	}
	b.times[b.next] = now
	b.next = (b.next + 1) % n
	b.filled = min(b.filled+1, n)
	// With the ring full, the next slot holds the first of the last n, this one included.
	if b.filled < n || now-b.times[b.next] >= int64(l.DeadLetterBreakerWindow) {
		return false
	}
	b.Trips++
	b.next, b.filled = 0, 0
	return true
}
