package broker

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRedeliveryDelay(t *testing.T) {
	l := GroupLimits{RedeliveryDelayMin: 100 * time.Millisecond, RedeliveryDelayMax: time.Second}
	for _, tc := range []struct {
		requested time.Duration
		attempt   uint32
		want      time.Duration
	}{
		{0, 1, 100 * time.Millisecond}, {0, 2, 200 * time.Millisecond}, {0, 4, 800 * time.Millisecond},
		{0, 5, time.Second}, {0, 1 << 31, time.Second}, {50 * time.Millisecond, 1, 100 * time.Millisecond},
		{5 * time.Second, 1, 5 * time.Second}, {0, 0, 100 * time.Millisecond},
	} {
		if got := l.RedeliveryDelay(tc.requested, tc.attempt, 7); got != tc.want {
			t.Errorf("RedeliveryDelay(%v, %d) = %v, want %v", tc.requested, tc.attempt, got, tc.want)
		}
	}
	off := GroupLimits{RedeliveryDelayMin: -1, RedeliveryDelayMax: time.Second}
	if got := off.RedeliveryDelay(0, 3, 7); got != 0 {
		t.Errorf("back-off off: %v", got)
	}
	if err := (GroupLimits{RedeliveryDelayMin: time.Second, RedeliveryDelayMax: time.Millisecond}).CheckRedelivery(); err == nil {
		t.Error("max under min accepted")
	}
}

// An explicit list: attempt n waits entry n, the last repeats; a longer request is
// honoured; it wins over a min and max filled in by Or. A group with a shape of its own
// takes no list from the defaults.
func TestRedeliveryBackoffList(t *testing.T) {
	s := time.Second
	l := GroupLimits{RedeliveryBackoff: []time.Duration{s, 5 * s, 30 * s}}.Or(GroupLimits{RedeliveryDelayMin: 100 * time.Millisecond, RedeliveryDelayMax: 10 * s})
	for attempt, want := range []time.Duration{s, s, 5 * s, 30 * s, 30 * s, 30 * s} {
		if got := l.RedeliveryDelay(0, uint32(attempt), 1); got != want {
			t.Errorf("attempt %d: %v, want %v", attempt, got, want)
		}
	}
	if got := l.RedeliveryDelay(time.Minute, 2, 1); got != time.Minute {
		t.Errorf("a longer nack: %v", got)
	}
	def := GroupLimits{RedeliveryDelayMin: 100 * time.Millisecond, RedeliveryDelayMax: 10 * s, RedeliveryBackoff: []time.Duration{s}, RedeliveryJitter: 0.5}
	if got := (GroupLimits{}).Or(def); len(got.RedeliveryBackoff) != 1 || got.RedeliveryJitter != 0.5 {
		t.Errorf("no shape of its own: %+v", got)
	}
	if got := (GroupLimits{RedeliveryDelayMax: 2 * s}).Or(def); got.RedeliveryBackoff != nil || got.RedeliveryDelay(0, 9, 1) != 2*s-time.Duration(float64(2*s)*0.5*draw(1, 9)) {
		t.Errorf("a max of its own keeps the doubling: %+v", got)
	}
	if got := (GroupLimits{RedeliveryJitter: NoJitter}).Or(def); got.RedeliveryDelay(0, 1, 1) != s {
		t.Errorf("NoJitter: %v", got.RedeliveryDelay(0, 1, 1))
	}
}

// Jitter shortens each back-off by up to its fraction, the same for the same message and
// attempt, spread over messages: 10,000 of them cover (d(1-j), d] as evenly as random draws would.
func TestRedeliveryJitter(t *testing.T) {
	d := time.Second
	l := GroupLimits{RedeliveryBackoff: []time.Duration{d}, RedeliveryJitter: 0.2}
	var buckets [10]int
	for seq := range uint64(10_000) {
		got := l.RedeliveryDelay(0, 3, seq)
		if got != l.RedeliveryDelay(0, 3, seq) {
			t.Fatal("not the same twice")
		}
		if got <= 800*time.Millisecond || got > d {
			t.Fatalf("seq %d: %v outside (800ms, 1s]", seq, got)
		}
		buckets[(d-got)*10/(200*time.Millisecond)]++
	}
	for i, n := range buckets {
		if n < 900 || n > 1100 {
			t.Errorf("bucket %d of the jitter's range: %d of 10,000, want 1,000 ± 100 (a random draw's 3σ): %v", i, n, buckets)
		}
	}
	if l.RedeliveryDelay(0, 3, 1) == l.RedeliveryDelay(0, 4, 1) {
		t.Error("attempts of one message drew the same")
	}
}

// The bounds refuse with the setting named and the fix said.
func TestCheckRedeliveryBounds(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		l    GroupLimits
		want string
	}{
		{GroupLimits{RedeliveryDelayMin: s, RedeliveryDelayMax: time.Millisecond}, "redelivery_delay_max 1ms is under redelivery_delay_min 1s"},
		{GroupLimits{RedeliveryBackoff: make([]time.Duration, 33)}, "redelivery_backoff has 33 entries; the most is 32"},
		{GroupLimits{RedeliveryBackoff: []time.Duration{s, 0}}, "redelivery_backoff[1] is 0s; every entry must be a delay greater than zero"},
		{GroupLimits{RedeliveryBackoff: []time.Duration{s}, RedeliveryDelayMax: s}, "set one or the other"},
		{GroupLimits{RedeliveryJitter: 1}, "redelivery_jitter 1 is out of range"},
		{GroupLimits{RedeliveryJitter: -0.1}, "redelivery_jitter -0.1 is out of range"},
		{GroupLimits{RedeliveryJitter: math.NaN()}, "redelivery_jitter NaN is out of range"},
	} {
		err := tc.l.CheckRedelivery()
		if !errors.Is(err, ErrInvalidSubscription) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.l, err, tc.want)
		}
	}
	list := make([]time.Duration, MaxRedeliveryBackoff)
	for i := range list {
		list[i] = s
	}
	for _, l := range []GroupLimits{{RedeliveryBackoff: list}, {RedeliveryJitter: 0.999}, {RedeliveryJitter: NoJitter}, {RedeliveryDelayMin: -1}} {
		if err := l.CheckRedelivery(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	gc := GroupConfig{Name: "g", Patterns: []string{"a"}, Limits: GroupLimits{RedeliveryBackoff: []time.Duration{-s}}}
	if err := gc.Check(); err == nil || !strings.Contains(err.Error(), "redelivery_backoff[0]") {
		t.Errorf("a declaration's list is checked: %v", err)
	}
}

// max_deliveries above the cap is refused, naming the setting; 0 (unlimited) and the cap
// itself are not.
func TestMaxDeliveriesCap(t *testing.T) {
	l := Limits{}.WithDefaults()
	for _, n := range []int{0, 1, Limits{}.WithDefaults().MaxDeliveriesCap} {
		o := SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"a"}, Mode: Balanced, MaxDeliveries: n}
		if _, err := l.CheckSubscribe(&o); err != nil {
			t.Errorf("max_deliveries %d: %v", n, err)
		}
	}
	o := SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"a"}, Mode: Balanced, MaxDeliveries: 4294967295}
	_, err := l.CheckSubscribe(&o)
	if !errors.Is(err, ErrInvalidSubscription) || !strings.Contains(err.Error(), "groups { max_deliveries_cap }") {
		t.Fatalf("max_deliveries 4294967295: %v", err)
	}
	if err := (GroupConfig{Name: "g", Patterns: []string{"a"}, MaxDeliveries: 5000}).Check(); err != nil {
		t.Fatalf("a declaration is held to the configuration's cap, not the default: %v", err)
	}
}

// ack_deadline above groups { max_ack_deadline } (12h) is refused, naming the setting; the
// limit itself is not; the limit is never under the default ack deadline.
func TestMaxAckDeadline(t *testing.T) {
	l := Limits{}.WithDefaults()
	if l.MaxAckDeadline != 12*time.Hour {
		t.Fatalf("default max_ack_deadline %v, want 12h", l.MaxAckDeadline)
	}
	open := func(l Limits, d time.Duration) error {
		o := SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"a"}, Mode: Balanced, AckDeadline: d}
		_, err := l.CheckSubscribe(&o)
		return err
	}
	for _, d := range []time.Duration{0, time.Millisecond, 12 * time.Hour} {
		if err := open(l, d); err != nil {
			t.Errorf("ack_deadline %v: %v", d, err)
		}
	}
	for _, d := range []time.Duration{12*time.Hour + time.Millisecond, math.MaxInt64} {
		err := open(l, d)
		if !errors.Is(err, ErrInvalidSubscription) || !strings.Contains(err.Error(), "over the limit of 12h0m0s (groups { max_ack_deadline })") {
			t.Errorf("ack_deadline %v: %v, want refused naming groups { max_ack_deadline }", d, err)
		}
	}
	l = Limits{AckDeadline: 24 * time.Hour}.WithDefaults()
	if l.MaxAckDeadline != 24*time.Hour || open(l, 0) != nil {
		t.Fatalf("with groups { ack_deadline = \"24h\" }: max_ack_deadline %v, the default refused: %v", l.MaxAckDeadline, open(l, 0))
	}
}
