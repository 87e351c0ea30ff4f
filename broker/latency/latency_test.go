package latency

import (
	"testing"
	"time"
)

// A duration goes to the first bucket whose bound it does not pass; past the last, to the
// overflow; Sum is in seconds; Add sums.
func TestLatencyBuckets(t *testing.T) {
	var l Histogram
	for _, d := range []time.Duration{-time.Second, 0, 100 * time.Microsecond, 100*time.Microsecond + 1, time.Second, time.Hour} {
		l.Observe(d)
	}
	want := map[int]uint64{0: 3, 1: 1, 8: 1, NumBounds: 1} // -1s counts as 0
	for i, n := range l.Counts {
		if n != want[i] {
			t.Errorf("bucket %d (≤ %v): %d, want %d", i, Bounds[min(i, NumBounds-1)], n, want[i])
		}
	}
	if Bounds[8] != time.Second {
		t.Fatalf("bucket 8 is %v", Bounds[8])
	}
	if s := 3600 + 1 + 0.0002; l.Sum < s-1e-9 || l.Sum > s+1e-6 {
		t.Errorf("sum %v, want %v", l.Sum, s)
	}
	var sum Histogram
	sum.Add(&l)
	sum.Add(&l)
	if sum.Count() != 12 || sum.Counts[0] != 6 {
		t.Errorf("added: %+v", sum)
	}
	for i := 1; i < NumBounds; i++ {
		if Bounds[i] <= Bounds[i-1] {
			t.Fatalf("Bounds are not increasing at %d", i)
		}
	}
}

// What a group pays per delivery or ack for its histogram (W2 does one of each per message).
func BenchmarkLatencyObserve(b *testing.B) {
	var l Histogram
	d := time.Duration(0)
	for b.Loop() {
		l.Observe(d)
		d = (d + 37*time.Microsecond) % (10 * time.Second)
	}
}
