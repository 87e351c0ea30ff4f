package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/internal/testing/pytest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
)

// TestPythonResizesEveryJobOnce runs the Python version (resizer.py, sdk/python) as
// TestRunResizesEveryJobOnce runs main.go's: every job resized once, by more than one worker.
// Debian's python3 with python3-grpcio and python3-protobuf; skipped without them, except
// under CI.
func TestPythonResizesEveryJobOnce(t *testing.T) {
	b := servertest.Start(t, servertest.Options{})
	cmd := exec.Command(pytest.Interpreter(t), "resizer.py", b.Addr)
	cmd.Env = pytest.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("resizer.py: %v\n%s", err, out)
	}
	jobsDone := map[string]int{}
	workersSeen := map[string]bool{}
	for _, m := range resized.FindAllStringSubmatch(string(out), -1) {
		workersSeen[m[1]] = true
		jobsDone[m[2]]++
	}
	if len(jobsDone) != jobs || len(workersSeen) < 2 || !strings.Contains(string(out), "all 50 jobs resized exactly once") {
		t.Errorf("%d distinct jobs resized by workers %v, want %d by at least 2; output:\n%s", len(jobsDone), workersSeen, jobs, out)
	}
	for job, n := range jobsDone {
		if n != 1 {
			t.Errorf("%s resized %d times", job, n)
		}
	}
	if g := b.Group(subscriptionID); g.Acked != jobs || g.Redelivered != 0 {
		t.Errorf("group %+v, want %d acked and none redelivered", g, jobs)
	}
}
