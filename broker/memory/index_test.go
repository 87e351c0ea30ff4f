package memory

import (
	"fmt"
	"slices"
	"testing"
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

// Detaching is linear: removing the targets of one pattern costs a bounded number of entries
// read or copied per removal however many targets the pattern has (a quadratic removal took
// 15.8 s for 100,000). Counted, not timed: the machine's speed cannot fail it.
func TestIndexRemoveLinear(t *testing.T) {
	for _, n := range []int{2_000, 40_000} {
		ix := newIndex()
		ps := fillOnePattern(ix, n)
		for _, p := range ps {
			ix.remove("crowd.>", p)
		}
		perRemoval := float64(ix.removeWork) / float64(n)
		t.Logf("removing %d targets of one pattern: %d entries read or copied, %.1f a removal", n, ix.removeWork, perRemoval)
		if perRemoval > 2*maxScanEnds { // a scan of the ends is at most maxScanEnds; copies are amortised
			t.Fatalf("removing %d targets read or copied %.0f entries a removal: removal is not linear", n, perRemoval)
		}
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
