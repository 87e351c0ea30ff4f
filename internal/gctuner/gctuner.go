// Package gctuner gives the garbage collector a heap floor: while the live heap is small, it
// raises GOGC so that a collection starts only once the heap reaches the floor, and leaves
// GOGC at its base value once the live heap is large enough to set a higher target itself.
//
// A broker's live heap is often a few megabytes (a handful of streams, messages in flight),
// and Go's default then collects every few megabytes allocated: at 20,000 messages a second
// that was about ten collections a second, each slowing every goroutine for a millisecond or
// so, which set W3's tail latency (BENCHMARKS.md). A floor of a few tens of megabytes makes
// that one collection every second or two, for at most the floor in extra memory; a broker
// holding 100,000 subscriptions has a live heap past the floor and collects as before.
// This is the "GC tuner" that large Go services use; setting GOGC in the environment turns it
// off, leaving the operator in charge.
package gctuner

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales with GOGC, so the
// tuner never sets a GOGC whose minimum goal alone passes the floor.
const heapMinimum = 4 << 20

type tuner struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	percent int // what the tuner last set
	sample  []metrics.Sample
}

// sentinel is made unreachable on purpose: its finalizer runs once per collection.
type sentinel struct{ t *tuner }

// Start keeps the heap target at floor bytes or above until stop is called, which restores
// GOGC. It does nothing if GOGC is set in the environment or floor is 0. It starts no
// goroutine: it runs in the runtime's finalizer goroutine, once after each collection.
func Start(floor uint64) (stop func()) {
	if floor == 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 {
		return func() {} // collection is off: nothing to tune
	}
	t := &tuner{floor: floor, base: base, percent: base,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.tune()
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.stopped = true
		debug.SetGCPercent(t.base)
	}
}

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t: t}, func(s *sentinel) {
		if s.t.tune() {
			s.t.arm()
		}
	})
}

// tune sets GOGC for the live heap, and reports whether the tuner is still running.
func (t *tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return false // an unknown runtime: leave GOGC alone
	}
	p := Percent(t.sample[0].Value.Uint64(), t.floor, t.base)
	if d := p - t.percent; d > t.percent/20 || -d > t.percent/20 { // skip changes under 5%
		debug.SetGCPercent(p)
		t.percent = p
	}
	return true
}

// Percent is the GOGC that puts the next collection at floor bytes for a live heap of live
// bytes (the goal is live × (1 + GOGC/100), and at least 4 MiB × GOGC/100), never under base.
func Percent(live, floor uint64, base int) int {
	limit := max(floor*100/heapMinimum, uint64(base)) // its minimum goal is the floor
	if live >= floor {
		return base
	}
	p := limit
	if live > 0 {
		p = min((floor-live)*100/live, limit)
	}
	return int(max(p, uint64(base)))
}
