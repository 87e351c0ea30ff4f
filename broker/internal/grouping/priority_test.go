package grouping

import (
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// The engines size their levels by MaxPriority; the broker refuses a group past its own
// bound. The two must agree.
func TestMaxPriority(t *testing.T) {
	if err := (broker.Dispatch{MaxPriority: MaxPriority}).Check(); err != nil {
		t.Fatalf("max_priority %d refused: %v", MaxPriority, err)
	}
	if err := (broker.Dispatch{MaxPriority: MaxPriority + 1}).Check(); err == nil {
		t.Fatalf("max_priority %d accepted", MaxPriority+1)
	}
}
