package ops_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
	"github.com/tinybroker/tinybroker/server/auth"
)

// A group's backlog: queued messages, their age, members, in flight, acks, and the totals
// and bytes of the broker, each moved by what should move it.
func TestMetricsGroupBacklog(t *testing.T) {
	s := start(t, stackOptions{})
	if err := s.b.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	s.waitMetric(t, "tinybroker_group_queued_messages", eq(0), "group=jobs")
	s.waitMetric(t, "tinybroker_group_oldest_queued_age_seconds", eq(0), "group=jobs")
	s.waitMetric(t, "tinybroker_groups", eq(1))
	s.waitMetric(t, "tinybroker_group_paused", eq(0), "group=jobs")
	if err := s.b.PauseGroup("jobs", true); err != nil {
		t.Fatal(err)
	}
	s.waitMetric(t, "tinybroker_group_paused", eq(1), "group=jobs")
	if err := s.b.PauseGroup("jobs", false); err != nil {
		t.Fatal(err)
	}
	s.waitMetric(t, "tinybroker_group_paused", eq(0), "group=jobs")
	for _, p := range []string{"a", "bb", "ccc"} {
		s.publish(t, "jobs.resize", p)
	}
	s.waitMetric(t, "tinybroker_group_queued_messages", eq(3), "group=jobs")
	s.waitMetric(t, "tinybroker_group_held_bytes", atLeast(6), "group=jobs")
	s.waitMetric(t, "tinybroker_published_messages_total", eq(3))
	s.waitMetric(t, "tinybroker_group_published_messages_total", eq(3), "group=jobs")
	s.waitMetric(t, "tinybroker_published_bytes_total", eq(6))
	s.waitMetric(t, "tinybroker_memory_used_bytes", atLeast(6))
	s.waitMetric(t, "tinybroker_group_oldest_queued_age_seconds", func(v float64) bool { return v > 0 && v < 60 }, "group=jobs")

	m := s.join(t, "jobs", &pb.OpenSubscription{TopicPatterns: []string{"jobs.>"}, MaxInFlight: 2})
	s.waitMetric(t, "tinybroker_group_members", eq(1), "group=jobs")
	s.waitMetric(t, "tinybroker_subscriptions", eq(1), "mode=balanced")
	s.waitMetric(t, "tinybroker_streams", eq(1), "kind=subscribe")
	s.waitMetric(t, "tinybroker_connections", eq(1))
	s.waitMetric(t, "tinybroker_group_in_flight_messages", eq(2), "group=jobs")
	s.waitMetric(t, "tinybroker_group_queued_messages", eq(1), "group=jobs")
	s.waitMetric(t, "tinybroker_group_delivered_messages_total", eq(2), "group=jobs")
	s.waitMetric(t, "tinybroker_delivered_bytes_total", eq(3)) // "a" and "bb"
	m.ack(t, m.next(t))
	s.waitMetric(t, "tinybroker_group_acked_messages_total", eq(1), "group=jobs")
	s.waitMetric(t, "tinybroker_acked_messages_total", eq(1))
	s.waitMetric(t, "tinybroker_group_queued_messages", eq(0), "group=jobs")
	s.waitMetric(t, "tinybroker_group_oldest_queued_age_seconds", eq(0), "group=jobs")
	s.waitMetric(t, "tinybroker_delivered_bytes_total", eq(6))
}

// Redeliveries by reason, and dead letters.
func TestMetricsRedelivery(t *testing.T) {
	s := start(t, stackOptions{})
	m := s.join(t, "work", &pb.OpenSubscription{TopicPatterns: []string{"work"}, MaxDeliveries: 2})
	s.publish(t, "work", "x")
	m.nack(t, m.next(t))
	s.waitMetric(t, "tinybroker_group_taken_back_messages_total", eq(1), "group=work", "reason=nack")
	s.waitMetric(t, "tinybroker_group_redelivered_messages_total", eq(1), "group=work")
	s.waitMetric(t, "tinybroker_redelivered_messages_total", eq(1))
	if msg := m.next(t); msg.GetAttempt() != 2 {
		t.Fatalf("attempt %d, want 2", msg.GetAttempt())
	} else {
		m.nack(t, msg)
	}
	s.waitMetric(t, "tinybroker_group_dead_lettered_messages_total", eq(1), "group=work")
	s.waitMetric(t, "tinybroker_dead_lettered_messages_total", eq(1))
	s.waitMetric(t, "tinybroker_unrouted_messages_total", eq(1)) // the dead letter: nobody reads dlq.work
	s.waitMetric(t, "tinybroker_group_taken_back_messages_total", eq(2), "group=work", "reason=nack")

	// Past the ack deadline.
	slow := s.join(t, "slow", &pb.OpenSubscription{TopicPatterns: []string{"slow"}, AckDeadline: durationpb.New(20 * time.Millisecond)})
	s.publish(t, "slow", "y")
	slow.next(t)
	s.waitMetric(t, "tinybroker_group_taken_back_messages_total", atLeast(1), "group=slow", "reason=ack_deadline")

	// A member that leaves holding a message.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, r, err := s.openStream(t, ctx, &pb.OpenSubscription{SubscriptionId: "left", ConsumerGroup: "left",
		TopicPatterns: []string{"left"}, Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED}); err != nil || r.GetSubscribed() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	s.publish(t, "left", "z")
	s.waitMetric(t, "tinybroker_group_in_flight_messages", eq(1), "group=left")
	cancel()
	s.waitMetric(t, "tinybroker_group_taken_back_messages_total", eq(1), "group=left", "reason=member_left")
	s.waitMetric(t, "tinybroker_group_queued_messages", eq(1), "group=left")
}

// Refusals by status code, and a full group's rejections.
func TestMetricsRefusals(t *testing.T) {
	s := start(t, stackOptions{engine: brokertest.Options{Limits: broker.Limits{GroupMaxQueued: 1}}})
	if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "bad topic"}); err == nil {
		t.Fatal("a topic with a space was published")
	}
	s.waitMetric(t, "tinybroker_publish_refusals_total", eq(1), "code=InvalidArgument")
	if err := s.b.Declare(broker.GroupConfig{Name: "full", Patterns: []string{"full"}}); err != nil {
		t.Fatal(err)
	}
	s.publish(t, "full", "1")
	if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "full"}); err == nil {
		t.Fatal("a full group took a message")
	}
	s.waitMetric(t, "tinybroker_publish_refusals_total", eq(1), "code=ResourceExhausted")
	s.waitMetric(t, "tinybroker_group_rejected_messages_total", eq(1), "group=full")

	// A balanced open without a group is refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, _, err := s.openStream(t, ctx, &pb.OpenSubscription{SubscriptionId: "x", TopicPatterns: []string{"x"},
		Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED}); err == nil {
		t.Fatal("a balanced subscription without a group was opened")
	}
	s.waitMetric(t, "tinybroker_subscribe_refusals_total", eq(1), "code=InvalidArgument")
	s.waitMetric(t, "tinybroker_publish_refusals_total", eq(0), "code=Unavailable") // every code has a series
}

// With users, authentication failures and permission denials are counted.
func TestMetricsAuth(t *testing.T) {
	h, err := bcrypt.GenerateFromPassword([]byte("a-token"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := auth.New(auth.Options{Users: []auth.User{{Name: "alice", TokenHash: string(h), Publish: auth.Rules{Allow: []string{"a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, stackOptions{auth: guard})
	as := func(token string) pb.BrokerClient {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewBrokerClient(conn)
	}
	ctx := context.Background()
	s.waitMetric(t, "tinybroker_auth_failures_total", eq(0))
	if _, err := as("alice:wrong").Publish(ctx, &pb.PublishRequest{Topic: "a"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a wrong token: %v", err)
	}
	s.waitMetric(t, "tinybroker_auth_failures_total", eq(1))
	alice := as("alice:a-token")
	if _, err := alice.Publish(ctx, &pb.PublishRequest{Topic: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Publish(ctx, &pb.PublishRequest{Topic: "b"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a topic alice may not publish to: %v", err)
	}
	s.waitMetric(t, "tinybroker_permission_denials_total", eq(1))
	s.waitMetric(t, "tinybroker_auth_failures_total", eq(1))
}

// Per plugin and hook: calls, latency, failures by kind, the breaker, instances.
func TestMetricsPlugins(t *testing.T) {
	s := start(t, stackOptions{plugins: []plugins.Spec{
		{Name: "pass", Wasm: wasm(t, "pass"), Topics: []string{"good.>"}},
		{Name: "trap", Wasm: wasm(t, "trap"), Topics: []string{"bad.>"}, BreakerFailures: 2, BreakerCooldown: time.Hour},
		{Name: "odd", Wasm: wasm(t, "badverdict"), Topics: []string{"odd.>"}},
		{Name: "loop", Wasm: wasm(t, "loop"), Topics: []string{"slow.>"}, CallTimeout: 20 * time.Millisecond},
	}})
	s.waitMetric(t, "tinybroker_plugin_calls_total", eq(0), "plugin=pass", "hook=on_publish")
	s.waitMetric(t, "tinybroker_plugin_instances", eq(1), "plugin=pass") // warmed up at load
	s.publish(t, "good.1", "x")
	s.waitMetric(t, "tinybroker_plugin_calls_total", eq(1), "plugin=pass", "hook=on_publish")
	s.waitMetric(t, "tinybroker_plugin_call_duration_seconds", eq(1), "plugin=pass", "hook=on_publish")
	s.waitMetric(t, "tinybroker_plugin_failures_total", eq(0), "plugin=pass", "hook=on_publish", "kind=trap")

	s.publish(t, "bad.1", "x") // fail_open: published anyway
	s.waitMetric(t, "tinybroker_plugin_failures_total", eq(1), "plugin=trap", "hook=on_publish", "kind=trap")
	s.waitMetric(t, "tinybroker_plugin_breaker_open", eq(0), "plugin=trap")
	s.publish(t, "bad.2", "x")
	s.waitMetric(t, "tinybroker_plugin_failures_total", eq(2), "plugin=trap", "hook=on_publish", "kind=trap")
	s.waitMetric(t, "tinybroker_plugin_breaker_open", eq(1), "plugin=trap")
	s.publish(t, "bad.3", "x")
	s.waitMetric(t, "tinybroker_plugin_skipped_calls_total", eq(1), "plugin=trap")
	s.waitMetric(t, "tinybroker_plugin_calls_total", eq(2), "plugin=trap", "hook=on_publish")
	s.waitMetric(t, "tinybroker_plugin_calls_total", eq(0), "plugin=trap", "hook=on_redeliver")

	s.publish(t, "odd.1", "x")
	s.waitMetric(t, "tinybroker_plugin_failures_total", eq(1), "plugin=odd", "hook=on_publish", "kind=malformed_verdict")
	s.publish(t, "slow.1", "x")
	s.waitMetric(t, "tinybroker_plugin_failures_total", eq(1), "plugin=loop", "hook=on_publish", "kind=timeout")
}

// Past metrics_max_groups, groups are summed under group="_other"; runtime and build
// metrics are there.
func TestMetricsBoundedGroupsAndRuntime(t *testing.T) {
	s := start(t, stackOptions{maxGroups: 2, commit: "0123abc"})
	for _, g := range []string{"a", "b", "c", "d"} {
		if err := s.b.Declare(broker.GroupConfig{Name: g, Patterns: []string{"t"}}); err != nil {
			t.Fatal(err)
		}
	}
	s.publish(t, "t", "x")
	mfs := s.scrape(t)
	for _, name := range []string{"tinybroker_group_queued_messages", "tinybroker_group_publish_to_delivery_seconds", "tinybroker_group_dead_letters_kept_messages"} {
		if n := len(mfs[name].GetMetric()); n != 3 {
			t.Errorf("%d series of %s; want 3 (a, b, _other)", n, name)
		}
	}
	for _, want := range []struct {
		group string
		v     float64
	}{{"a", 1}, {"b", 1}, {"_other", 2}} {
		if v, _ := value(mfs, "tinybroker_group_queued_messages", "group="+want.group); v != want.v {
			t.Errorf("queued{group=%s} = %v, want %v", want.group, v, want.v)
		}
	}
	if v, _ := value(mfs, "tinybroker_metrics_labelled_groups"); v != 2 {
		t.Errorf("tinybroker_metrics_labelled_groups = %v", v)
	}
	if v, ok := value(mfs, "tinybroker_build_info", "version=v1.2.3", "revision=0123abc"); !ok || v != 1 {
		t.Errorf("tinybroker_build_info{version=v1.2.3, revision=0123abc} = %v %v", v, ok)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "go_build_info", "tinybroker_build_info"} {
		if _, ok := value(mfs, name); !ok {
			t.Errorf("no %s", name)
		}
	}
	for name := range mfs {
		if strings.HasPrefix(name, "tinybroker_") && mfs[name].GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
}

// A plugin's versions are named by their hashes, and its shadow's calls and differences
// counted.
func TestMetricsPluginCandidate(t *testing.T) {
	cur, cand := wasm(t, "pass"), wasm(t, "v2payload")
	s := start(t, stackOptions{plugins: []plugins.Spec{{Name: "pass", Wasm: cur, Topics: []string{"good.>"},
		Candidate: &plugins.Candidate{Mode: plugins.Shadow, Wasm: cand}}}})
	sum := func(b []byte) string { h := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(h[:]) }
	s.waitMetric(t, "tinybroker_plugin_info", eq(1), "plugin=pass", "hash="+sum(cur), "version=current")
	s.waitMetric(t, "tinybroker_plugin_info", eq(1), "plugin=pass", "hash="+sum(cand), "version=shadow")
	s.publish(t, "good.1", "x")
	s.waitMetric(t, "tinybroker_plugin_candidate_calls_total", eq(1), "plugin=pass", "mode=shadow")
	s.waitMetric(t, "tinybroker_plugin_candidate_differences_total", eq(1), "plugin=pass", "mode=shadow")
	s.waitMetric(t, "tinybroker_plugin_candidate_failures_total", eq(0), "plugin=pass", "mode=shadow")
	s.waitMetric(t, "tinybroker_plugin_candidate_rolled_back", eq(0), "plugin=pass", "mode=shadow")
}

// A plugin's ticks skipped behind a slow tick are counted, and its on_tick calls.
func TestMetricsTicks(t *testing.T) {
	s := start(t, stackOptions{plugins: []plugins.Spec{
		{Name: "slowtick", Wasm: wasm(t, "tick"), Config: map[string]string{"mode": "slow"}, TickInterval: 10 * time.Millisecond},
	}})
	s.waitMetric(t, "tinybroker_plugin_skipped_ticks_total", atLeast(1), "plugin=slowtick")
	s.waitMetric(t, "tinybroker_plugin_calls_total", atLeast(1), "plugin=slowtick", "hook=on_tick")
}
