package broker

import (
	"errors"
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
		if got := l.RedeliveryDelay(tc.requested, tc.attempt); got != tc.want {
			t.Errorf("RedeliveryDelay(%v, %d) = %v, want %v", tc.requested, tc.attempt, got, tc.want)
		}
	}
	off := GroupLimits{RedeliveryDelayMin: -1, RedeliveryDelayMax: time.Second}
	if got := off.RedeliveryDelay(0, 3); got != 0 {
		t.Errorf("back-off off: %v", got)
	}
	if err := (GroupLimits{RedeliveryDelayMin: time.Second, RedeliveryDelayMax: time.Millisecond}).CheckRedelivery(); err == nil {
		t.Error("max under min accepted")
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
