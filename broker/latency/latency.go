package latency

import (
	"slices"
	"time"
)

// Bounds are the upper bounds of the buckets of the engines' latency histograms
// (Histogram): from 100µs, where a message waits for nobody, to 5 minutes, past any ack
// deadline's default. Fourteen, so that a group's two histograms stay at 17 series each.
var Bounds = [NumBounds]time.Duration{
	100 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
}

// NumBounds is len(Bounds).
const NumBounds = 14

// Histogram is a histogram of durations in the buckets of Bounds. Counts[i] is how many
// took at most Bounds[i] and more than the bound before it (the counts are not
// cumulative); Counts[NumBounds] is how many took longer than the largest bound. Sum
// is their total, in seconds. An engine keeps one under the lock that guards what it
// measures, so Observe is not safe for concurrent use.
type Histogram struct {
	Counts [NumBounds + 1]uint64
	Sum    float64
}

// Observe counts one duration (a negative one, from a clock that stepped back, as 0).
func (l *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	i, _ := slices.BinarySearch(Bounds[:], d) // d equal to a bound belongs to its bucket
	l.Counts[i]++
	l.Sum += d.Seconds()
}

// Add adds o's observations to l's.
func (l *Histogram) Add(o *Histogram) {
	for i, n := range o.Counts {
		l.Counts[i] += n
	}
	l.Sum += o.Sum
}

// Count is how many durations l has counted.
func (l *Histogram) Count() (n uint64) {
	for _, c := range l.Counts {
		n += c
	}
	return n
}
