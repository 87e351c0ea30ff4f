package ops_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/latency"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// A group's publish-to-delivery and delivery-to-ack histograms count real deliveries and
// acks through the server, on every engine: a first delivery once (not its redelivery), an
// ack once, a nack never.
func TestMetricsGroupLatency(t *testing.T) {
	eachEngine(t, func(t *testing.T, e brokertest.Engine) {
		s := start(t, stackOptions{on: e})
		m := s.join(t, "lat", &pb.OpenSubscription{TopicPatterns: []string{"lat"}})
		s.publish(t, "lat", "a")
		m.ack(t, m.next(t))
		s.waitMetric(t, "tinybroker_group_publish_to_delivery_seconds", eq(1), "group=lat")
		s.waitMetric(t, "tinybroker_group_delivery_to_ack_seconds", eq(1), "group=lat")

		s.publish(t, "lat", "b")
		m.nack(t, m.next(t))
		m.ack(t, m.next(t)) // its redelivery
		s.waitMetric(t, "tinybroker_group_acked_messages_total", eq(2), "group=lat")
		s.waitMetric(t, "tinybroker_group_delivery_to_ack_seconds", eq(2), "group=lat")
		s.waitMetric(t, "tinybroker_group_publish_to_delivery_seconds", eq(2), "group=lat")

		mfs := s.scrape(t)
		for _, name := range []string{"tinybroker_group_publish_to_delivery_seconds", "tinybroker_group_delivery_to_ack_seconds"} {
			h := histogram(mfs, name, "group=lat")
			if h == nil {
				t.Fatalf("no %s{group=lat}", name)
			}
			if got := len(h.GetBucket()); got != latency.NumBounds+1 { // and +Inf
				t.Errorf("%s has %d buckets, want %d", name, got, latency.NumBounds+1)
			}
			// Loopback and a test's ack take well under 10s, and some time.
			if sum := h.GetSampleSum(); sum <= 0 || sum > 20 {
				t.Errorf("%s: sum %vs of 2 observations", name, sum)
			}
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() >= 10 && b.GetCumulativeCount() != 2 {
					t.Errorf("%s: %d at most %vs, want 2", name, b.GetCumulativeCount(), b.GetUpperBound())
				}
			}
		}
	})
}

// The dead letters a group keeps now: up when one is dead-lettered, down when it is replayed
// or purged, on every engine.
func TestMetricsDeadLettersKept(t *testing.T) {
	eachEngine(t, func(t *testing.T, e brokertest.Engine) {
		s := start(t, stackOptions{on: e})
		m := s.join(t, "dl", &pb.OpenSubscription{TopicPatterns: []string{"dl"}, MaxDeliveries: 1})
		s.waitMetric(t, "tinybroker_group_dead_letters_kept_messages", eq(0), "group=dl")
		for _, p := range []string{"a", "b"} {
			s.publish(t, "dl", p)
			m.nack(t, m.next(t)) // max_deliveries 1: dead at once
		}
		s.waitMetric(t, "tinybroker_group_dead_lettered_messages_total", eq(2), "group=dl")
		s.waitMetric(t, "tinybroker_group_dead_letters_kept_messages", eq(2), "group=dl")
		s.waitMetric(t, "tinybroker_group_dead_letters_kept_bytes", atLeast(2), "group=dl")

		dls, _, err := s.b.DeadLetters("dl", "", 10)
		if err != nil || len(dls) != 2 {
			t.Fatalf("dead letters: %d, %v", len(dls), err)
		}
		if res, err := s.b.ReplayDeadLetters("dl", []string{dls[0].ID}); err != nil || res[0].Err != nil {
			t.Fatalf("replay: %+v %v", res, err)
		}
		s.waitMetric(t, "tinybroker_group_dead_letters_kept_messages", eq(1), "group=dl")
		m.ack(t, m.next(t)) // the replayed one

		if n, err := s.b.PurgeDeadLetters("dl", nil); err != nil || n != 1 {
			t.Fatalf("purge: %d, %v", n, err)
		}
		s.waitMetric(t, "tinybroker_group_dead_letters_kept_messages", eq(0), "group=dl")
		s.waitMetric(t, "tinybroker_group_dead_letters_kept_bytes", eq(0), "group=dl")
		s.waitMetric(t, "tinybroker_group_dead_lettered_messages_total", eq(2), "group=dl") // ever: unmoved
	})
}

// A message let go of past its ttl is counted per group, on every engine: held by a member
// past its ttl and nacked, it is dead-lettered (reason expired) instead of redelivered.
func TestMetricsGroupExpired(t *testing.T) {
	eachEngine(t, func(t *testing.T, e brokertest.Engine) {
		s := start(t, stackOptions{on: e})
		m := s.join(t, "exp", &pb.OpenSubscription{TopicPatterns: []string{"exp"}})
		const ttl = time.Second // the delivery comes well before it, even on a loaded machine
		if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "exp", Payload: []byte("a"), Ttl: durationpb.New(ttl)}); err != nil {
			t.Fatal(err)
		}
		past := time.Now().Add(ttl) // the broker stamped it before this
		d := m.next(t)
		time.Sleep(time.Until(past) + 10*time.Millisecond) // the engines expire by the wall clock
		m.nack(t, d)
		s.waitMetric(t, "tinybroker_group_expired_messages_total", eq(1), "group=exp")
		s.waitMetric(t, "tinybroker_group_dead_lettered_messages_total", eq(1), "group=exp")
	})
}

// The per-group counters renamed to *_messages_total (and group_bytes, group_series_groups)
// are still there under their old names for one release, with the same values, and say so.
func TestMetricsDeprecatedNames(t *testing.T) {
	s := start(t, stackOptions{})
	m := s.join(t, "old", &pb.OpenSubscription{TopicPatterns: []string{"old"}})
	s.publish(t, "old", "x")
	m.ack(t, m.next(t))
	s.waitMetric(t, "tinybroker_group_acked_messages_total", eq(1), "group=old")
	mfs := s.scrape(t)
	for old, renamed := range map[string]string{
		"tinybroker_group_bytes":               "tinybroker_group_held_bytes",
		"tinybroker_group_delivered_total":     "tinybroker_group_delivered_messages_total",
		"tinybroker_group_acked_total":         "tinybroker_group_acked_messages_total",
		"tinybroker_group_redelivered_total":   "tinybroker_group_redelivered_messages_total",
		"tinybroker_group_taken_back_total":    "tinybroker_group_taken_back_messages_total",
		"tinybroker_group_dead_lettered_total": "tinybroker_group_dead_lettered_messages_total",
		"tinybroker_group_dropped_total":       "tinybroker_group_dropped_messages_total",
		"tinybroker_group_rejected_total":      "tinybroker_group_rejected_messages_total",
		"tinybroker_group_series_groups":       "tinybroker_metrics_labelled_groups",
	} {
		if mfs[old] == nil || mfs[renamed] == nil {
			t.Errorf("%s: %v, %s: %v", old, mfs[old] != nil, renamed, mfs[renamed] != nil)
			continue
		}
		if help := mfs[old].GetHelp(); !strings.HasPrefix(help, "Deprecated, renamed to "+renamed+";") {
			t.Errorf("%s's help: %q", old, help)
		}
		if len(mfs[old].GetMetric()) != len(mfs[renamed].GetMetric()) {
			t.Errorf("%s has %d series, %s %d", old, len(mfs[old].GetMetric()), renamed, len(mfs[renamed].GetMetric()))
		}
		ov, _ := value(mfs, old)
		nv, _ := value(mfs, renamed)
		if ov != nv {
			t.Errorf("%s = %v, %s = %v", old, ov, renamed, nv)
		}
	}
}

// /metrics, with every family of tinybroker's present, passes promtool's lint (promlint).
func TestMetricsLint(t *testing.T) {
	s := richStack(t)
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// richStack is a broker whose /metrics has every family of tinybroker's: a plugin, one
// with ticks (which never come in the test's time) and a log_topic, and a consumer group.
func richStack(t *testing.T) *stack {
	t.Helper()
	s := start(t, stackOptions{plugins: []plugins.Spec{{Name: "pass", Wasm: wasm(t, "pass"),
		Candidate: &plugins.Candidate{Mode: plugins.Shadow, Wasm: wasm(t, "v2payload")}},
		{Name: "tick", Wasm: wasm(t, "tick"), Hooks: []string{plugins.HookTick}, TickInterval: time.Hour,
			LogTopic: "logs.tick"}}})
	if err := s.b.Declare(broker.GroupConfig{Name: "g", Patterns: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.b.Declare(broker.GroupConfig{Name: "fair", Patterns: []string{"fair"}, Dispatch: broker.Dispatch{FairBy: "key"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "fair", Payload: []byte("x"), Key: "tenant-1"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// A group with fair_by lists the keys it holds and its busiest, with the noisy one marked:
// a tenant past a tenth of what the group holds, and at least 100 messages.
func TestMetricsBusiestKeys(t *testing.T) {
	s := start(t, stackOptions{})
	if err := s.b.Declare(broker.GroupConfig{Name: "fair", Patterns: []string{"fair"}, Dispatch: broker.Dispatch{FairBy: "key"}}); err != nil {
		t.Fatal(err)
	}
	pub := func(key string, n int) {
		for range n {
			if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "fair", Payload: []byte("x"), Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 7 {
		pub(fmt.Sprintf("quiet-%d", i), 1+i)
	}
	pub("flood", 150)
	s.waitMetric(t, "tinybroker_group_keys", eq(8), "group=fair")
	s.waitMetric(t, "tinybroker_group_key_held_messages", eq(150), "group=fair", "key=flood", "noisy=true")
	s.waitMetric(t, "tinybroker_group_key_held_messages", eq(7), "group=fair", "key=quiet-6", "noisy=false")
	mfs := s.scrape(t)
	if n := len(mfs["tinybroker_group_key_held_messages"].GetMetric()); n != 5 {
		t.Fatalf("%d series of tinybroker_group_key_held_messages, want the 5 busiest", n)
	}
}
