package ops_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"

	"github.com/tinybroker/tinybroker/ops"
)

// The broker keeps the dashboard's history: GET /api/history answers the last HistoryLen
// points, oldest first, each with the counters and the largest groups' backlogs, from before
// any page asked.
func TestHistory(t *testing.T) {
	s := start(t, stackOptions{history: 20 * time.Millisecond, histLen: 5})
	s.join(t, "jobs", &pb.OpenSubscription{SubscriptionId: "jobs", ConsumerGroup: "jobs", TopicPatterns: []string{"jobs.>"},
		Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED, MaxInFlight: 1})
	for range 3 {
		s.publish(t, "jobs.x", "work")
	}
	var h ops.HistoryJSON
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h = s.history(t)
		if n := len(h.Points); n == 5 && h.Points[n-1].Published == 3 && h.Points[0].Published == 3 {
			break // full, and every point after the publishes: the ring has turned
		}
		if time.Now().After(deadline) {
			t.Fatalf("history never held 5 points after the publishes: %+v", h)
		}
	}
	if h.IntervalMS != 20 {
		t.Errorf("interval_ms %d, want 20", h.IntervalMS)
	}
	for i := 1; i < len(h.Points); i++ {
		if h.Points[i].Time <= h.Points[i-1].Time {
			t.Fatalf("points out of order at %d: %+v", i, h.Points)
		}
	}
	p := h.Points[len(h.Points)-1]
	if p.Backlog.Queued+p.Backlog.InFlight != 3 || len(p.Groups) != 1 || p.Groups[0].ID != "jobs" || p.Groups[0].Queued+p.Groups[0].InFlight != 3 {
		t.Fatalf("last point's backlog %+v, groups %+v: want jobs holding 3", p.Backlog, p.Groups)
	}
}

// history reads /api/history.
func (s *stack) history(t *testing.T) ops.HistoryJSON {
	t.Helper()
	resp, err := http.Get(s.url + "/api/history")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h ops.HistoryJSON
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&h) != nil {
		t.Fatalf("/api/history: %d", resp.StatusCode)
	}
	return h
}
