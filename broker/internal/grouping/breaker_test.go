package grouping

import (
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// The breaker trips on the n-th dead letter within the window, not on n spread wider, and
// starts again from nothing after it trips; off, it never does.
func TestBreaker(t *testing.T) {
	l := broker.GroupLimits{DeadLetterBreaker: 3, DeadLetterBreakerWindow: time.Second}
	var b Breaker
	s := int64(time.Second)
	for i, c := range []struct {
		at   int64
		trip bool
	}{
		{0, false}, {s, false}, {2 * s, false}, // a second apart
		{2*s + s/2, false},                                // 1s, 2s, 2.5s: 1.5s
		{2*s + s - s/4, true},                             // 2s, 2.5s, 2.75s: 0.75s
		{3 * s, false}, {3*s + 1, false}, {3*s + 2, true}, // after a trip, 3 more
	} {
		if got := b.Note(c.at, l); got != c.trip {
			t.Fatalf("dead letter %d at %v: tripped %v, want %v", i, time.Duration(c.at), got, c.trip)
		}
	}
	if b.Trips != 2 {
		t.Fatalf("%d trips, want 2", b.Trips)
	}
	var off Breaker
	for i := range 100 {
		if off.Note(int64(i), broker.GroupLimits{DeadLetterBreakerWindow: time.Second}) {
			t.Fatal("a breaker that is off tripped")
		}
	}
}
