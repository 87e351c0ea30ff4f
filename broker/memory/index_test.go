package memory

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// fillOnePattern registers n targets on one pattern, the crowd of the finding "detaching
// 100,000 subscriptions on one pattern took 15.8 s".
func fillOnePattern(ix *index, n int) []*probe {
	ps := make([]*probe, n)
	for i := range ps {
		ps[i] = &probe{name: fmt.Sprint("p", i)}
		ix.add("crowd.>", ps[i])
	}
	return ps
}

// Removing the targets of one pattern in any order leaves the others matched and the index
// empty at the end, across the switch from scanning to the position map and back.
func TestIndexRemoveCrowd(t *testing.T) {
	ix := newIndex()
	ps := fillOnePattern(ix, 3*maxScanEnds)
	order := slices.Clone(ps)
	for i := range order { // a fixed shuffle: every third from the middle, then the rest
		j := (i*7 + len(order)/2) % len(order)
		order[i], order[j] = order[j], order[i]
	}
	left := len(ps)
	for _, p := range order {
		ix.remove("crowd.>", p)
		left--
		if got := len(ix.match("crowd.x")); got != left {
			t.Fatalf("after a removal %d targets match, want %d", got, left)
		}
	}
	if !ix.root.empty() {
		t.Fatalf("index not empty after removing everything: %+v", ix.root)
	}
}

// Detaching is linear: removing twenty times as many targets of one pattern takes about twenty
// times as long, not four hundred (a quadratic removal took 15.8 s for 100,000).
func TestIndexRemoveLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	timeRemoval := func(n int) time.Duration {
		best := time.Duration(1 << 62)
		for range 3 {
			ix := newIndex()
			ps := fillOnePattern(ix, n)
			start := time.Now()
			for _, p := range ps {
				ix.remove("crowd.>", p)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	small, large := timeRemoval(2_000), timeRemoval(40_000)
	t.Logf("removing 2,000: %v; 40,000: %v (%.1fx)", small, large, float64(large)/float64(small))
	if large > 100*small { // linear: ~20x; quadratic: ~400x
		t.Fatalf("removing 40,000 targets of one pattern took %v, %.0fx the time for 2,000 (%v): removal is not linear",
			large, float64(large)/float64(small), small)
	}
}

// BenchmarkDetachOnePattern: the cost of one removal from a pattern held by n targets stays
// flat as n grows.
func BenchmarkDetachOnePattern(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint("subs=", n), func(b *testing.B) {
			ix := newIndex()
			ps := fillOnePattern(ix, n)
			i := 0
			for b.Loop() {
				p := ps[i%n]
				ix.remove("crowd.>", p)
				ix.add("crowd.>", p)
				i++
			}
		})
	}
}
