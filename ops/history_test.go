package ops_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/ops"
)

// The broker keeps the dashboard's history: GET /api/history answers the last HistoryLen
// points, oldest first, each with the counters and the largest groups' backlogs, from before
// any page asked; on each engine (the groups' published counts are each engine's own).
func TestHistory(t *testing.T) {
	eachEngine(t, func(t *testing.T, e brokertest.Engine) { testHistory(t, e) })
}

func testHistory(t *testing.T, e brokertest.Engine) {
	s := start(t, stackOptions{on: e, history: 20 * time.Millisecond, histLen: 5})
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
	if g := p.Groups[0]; g.Published != 3 || g.Delivered != 1 {
		t.Errorf("last point's jobs: published %d, delivered %d; want 3 and 1 (max_in_flight 1): the counters the dashboard's rates come from", g.Published, g.Delivered)
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

// A history point keeps each of its groups' counters, and its historyGroups (20) groups are
// the busiest by backlog plus what they passed on since the point before: a group that
// passes every message on at once is kept beside 20 that each hold two.
func TestHistoryKeepsBusiestGroups(t *testing.T) {
	s := start(t, stackOptions{history: 20 * time.Millisecond, histLen: 50})
	for i := range 20 {
		name := fmt.Sprintf("held-%02d", i)
		if err := s.b.Declare(broker.GroupConfig{Name: name, Patterns: []string{"held." + name}}); err != nil {
			t.Fatal(err)
		}
		s.publish(t, "held."+name, "x")
		s.publish(t, "held."+name, "y")
	}
	m := s.join(t, "zfast", &pb.OpenSubscription{TopicPatterns: []string{"fast.>"}}) // last by id: ties lose
	for deadline := time.Now().Add(10 * time.Second); ; {
		for range 3 {
			s.publish(t, "fast.x", "go")
		}
		for range 3 {
			m.ack(t, m.next(t))
		}
		for _, p := range s.history(t).Points {
			for _, g := range p.Groups {
				if g.ID == "zfast" && g.Published > 0 && g.Delivered > 0 && g.Queued+g.InFlight <= 1 {
					if len(p.Groups) != 20 {
						t.Fatalf("a point of %d groups, want 20 (historyGroups)", len(p.Groups))
					}
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no history point kept zfast, which passes on 3 messages at a time, beside 20 groups holding 2: %+v", s.history(t).Points)
		}
	}
}

// GET /api/history?since=MS answers the points from then on only (the dashboard asks for its
// five minutes, not the hour); a since that is not a time is refused with how to give one.
func TestHistorySince(t *testing.T) {
	s := start(t, stackOptions{history: 20 * time.Millisecond, histLen: 100})
	var all ops.HistoryJSON
	for deadline := time.Now().Add(10 * time.Second); len(all.Points) < 10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the history never held 10 points")
		}
		all = s.history(t)
	}
	since := all.Points[5].Time
	resp, err := http.Get(fmt.Sprintf("%s/api/history?since=%d", s.url, since))
	if err != nil {
		t.Fatal(err)
	}
	var h ops.HistoryJSON
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("since=%d: %d %v", since, resp.StatusCode, err)
	}
	if len(h.Points) == 0 || h.Points[0].Time != since {
		t.Fatalf("since=%d: the first point is %+v, want the one at %d", since, h.Points[:min(1, len(h.Points))], since)
	}
	for _, bad := range []string{"yesterday", "-1"} {
		resp, err := http.Get(s.url + "/api/history?since=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, "Unix milliseconds") {
			t.Errorf("since=%s: %d %q, want 400 saying to give Unix milliseconds", bad, resp.StatusCode, e.Error)
		}
	}
}
