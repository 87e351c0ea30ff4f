package memory

import (
	"container/heap"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
)

// scheduler wakes groups at the times they registered (ack deadlines, nack delays), and the
// heap of delayed publishes when its first falls due. One goroutine serves the whole
// broker: no timer or goroutine per message.
//
// Locks (lockrank): scheduler.mu is a leaf; groups are called with it released.
type scheduler struct {
	mu    lockrank.Mutex[lockrank.Scheduler]
	items wakeHeap
	kick  chan struct{}
}

type wake struct {
	at int64
	w  waker
}

// waker is what the scheduler wakes: a group, or the delayed publishes (delayQueue).
type waker interface{ onTimer() }

type wakeHeap []wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wake)) }
func (h *wakeHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = wake{}
	*h = old[:len(old)-1]
	return w
}

func newScheduler() *scheduler { return &scheduler{kick: make(chan struct{}, 1)} }

// add asks for w.onTimer to be called at (or soon after) at.
func (s *scheduler) add(at int64, w waker) {
	s.mu.Lock()
	heap.Push(&s.items, wake{at: at, w: w})
	first := s.items[0].at == at
	s.mu.Unlock()
	if first {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// run serves wake-ups until stop is closed.
func (s *scheduler) run(stop <-chan struct{}, now func() int64) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due []waker
	for {
		s.mu.Lock()
		n := now()
		due = due[:0]
		for len(s.items) > 0 && s.items[0].at <= n {
			due = append(due, heap.Pop(&s.items).(wake).w)
		}
		wait := time.Hour
		if len(s.items) > 0 {
			wait = time.Duration(s.items[0].at - n)
		}
		s.mu.Unlock()
		for _, w := range due {
			w.onTimer()
		}
		clear(due)
		if len(due) > 0 {
			continue
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-s.kick:
		case <-stop:
			return
		}
	}
}

// fakeClock is a clock for tests: time stands still until Advance, which fires what fell
// due in the caller's goroutine (a broker with a fakeClock starts no scheduler goroutine).
type fakeClock struct {
	t atomic.Int64
	b *Engine
}

// Advance moves the clock d forward and runs every wake-up that is due. It panics if they
// never run out: a group that keeps asking to be woken at a time already past (it would spin
// the real scheduler's goroutine) fails its test instead of hanging it.
func (c *fakeClock) Advance(d time.Duration) {
	n := c.t.Add(int64(d))
	s := c.b.sched
	for wakes := 0; ; wakes++ {
		if wakes == maxWakesPerAdvance {
			panic(fmt.Sprintf("fakeClock.Advance: %d wake-ups and more due at %v: a group keeps waking itself without progress", wakes, time.Duration(n)))
		}
		s.mu.Lock()
		if len(s.items) == 0 || s.items[0].at > n {
			s.mu.Unlock()
			return
		}
		w := heap.Pop(&s.items).(wake).w
		s.mu.Unlock()
		w.onTimer()
	}
}

// maxWakesPerAdvance is far more wake-ups than any test's groups ask for at one time.
const maxWakesPerAdvance = 100_000
