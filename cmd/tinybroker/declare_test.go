package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
)

// declaringEngine answers Declare with the errors in refusals, one a call, then nil.
type declaringEngine struct {
	broker.Engine
	refusals []error
	calls    int
}

func (e *declaringEngine) Declare(broker.GroupConfig) error {
	e.calls++
	if len(e.refusals) == 0 {
		return nil
	}
	err := e.refusals[0]
	e.refusals = e.refusals[1:]
	return err
}

// A group from the configuration that the engine could not declare because it was
// unavailable (a JetStream cluster just formed) is declared again; any other refusal stops
// the start at once, and so does an engine that stays unavailable past declareAgainFor.
func TestDeclareGroupsAsksAgainWhileUnavailable(t *testing.T) {
	defer func(d time.Duration) { declareAgainFor = d }(declareAgainFor)
	declareAgainFor = time.Second
	cfg := config.Config{Groups: []broker.GroupConfig{{Name: "work", Patterns: []string{"w.>"}}}}
	unavailable := fmt.Errorf("%w: reading consumer group %q from JetStream: context deadline exceeded", broker.ErrUnavailable, "work")
	log := hclog.NewNullLogger()

	e := &declaringEngine{refusals: []error{unavailable, unavailable}}
	if err := declareGroups(e, cfg, "node.hcl", log); err != nil || e.calls != 3 {
		t.Fatalf("unavailable twice: %v after %d calls, want nil after 3", err, e.calls)
	}

	e = &declaringEngine{refusals: []error{fmt.Errorf("%w: other settings", broker.ErrGroupMismatch), nil}}
	if err := declareGroups(e, cfg, "node.hcl", log); !errors.Is(err, broker.ErrGroupMismatch) || e.calls != 1 {
		t.Fatalf("a mismatch: %v after %d calls, want ErrGroupMismatch after 1", err, e.calls)
	}

	always := make([]error, 100)
	for i := range always {
		always[i] = unavailable
	}
	e = &declaringEngine{refusals: always}
	// Pauses of 0.1, 0.2, 0.4 s fit in the second, 0.8 s more would not: four calls at most
	// (fewer on a machine slow enough to stretch the pauses).
	if err := declareGroups(e, cfg, "node.hcl", log); !errors.Is(err, broker.ErrUnavailable) || e.calls < 2 || e.calls > 4 {
		t.Fatalf("always unavailable: %v after %d calls, want ErrUnavailable after 2 to 4", err, e.calls)
	}
}
