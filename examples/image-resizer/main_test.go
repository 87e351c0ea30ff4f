package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var resized = regexp.MustCompile(`(?m)^worker ([ABC]) resized (jobs\.thumb\.\d+)$`)

func TestRunResizesEveryJobOnce(t *testing.T) {
	sb := servertest.Start(t, servertest.Options{})
	addr, b := sb.Addr, sb.Engine
	for round := 1; round <= 2; round++ { // the second run finds the group the first one left
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := run(ctx, addr, &out)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v\noutput:\n%s", round, err, out.String())
		}
		jobsDone := map[string]int{}
		workersSeen := map[string]bool{}
		for _, m := range resized.FindAllStringSubmatch(out.String(), -1) {
			workersSeen[m[1]] = true
			jobsDone[m[2]]++
		}
		if len(jobsDone) != jobs {
			t.Errorf("run %d: %d distinct jobs resized, want %d", round, len(jobsDone), jobs)
		}
		for job, n := range jobsDone {
			if n != 1 {
				t.Errorf("run %d: %s resized %d times", round, job, n)
			}
		}
		if len(workersSeen) < 2 {
			t.Errorf("run %d: only workers %v took part, want the group to share the jobs", round, workersSeen)
		}
		if !strings.Contains(out.String(), "all 50 jobs resized exactly once") {
			t.Errorf("run %d: no summary line in\n%s", round, out.String())
		}
	}
	groupStats := func() broker.GroupStats {
		g, _ := b.Group(subscriptionID)
		return g.GroupStats
	}
	brokertest.Eventually(t, "the broker to see the streams end", func() bool { return groupStats().Members == 0 })
	if g := groupStats(); g.Group != group || g.Acked != 2*jobs || g.Redelivered != 0 || g.Queued != 0 || g.InFlight != 0 || g.Members != 0 {
		t.Errorf("group after two runs: %+v, want %d acked, no members and nothing left", g, 2*jobs)
	}
}

func TestRunFailsWithoutBroker(t *testing.T) {
	servertest.FailsWithoutBroker(t, func(ctx context.Context, addr string) error { return run(ctx, addr, &bytes.Buffer{}) })
}
