package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Message and member priorities over gRPC (issue 29), on every engine: bad values are
// refused with what is allowed; a group with max_priority hands out its highest level
// first with each message's priority on it; a member of a lower priority gets work only
// while the higher one is full.
func TestPriorityOverGRPC(t *testing.T) {
	tb := start(t, brokertest.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		req  *pb.PublishRequest
		says string
	}{
		{&pb.PublishRequest{Topic: "pr.1", Priority: 10}, "priority 10: a message's priority is 0 (the default) to 9"},
		{&pb.PublishRequest{Topic: "pr.1", Priority: 1 << 31}, "priority 255 or more"},
	} {
		_, err := tb.c.Publish(ctx, c.req)
		wantCode(t, err, codes.InvalidArgument, c.says)
	}
	for _, c := range []struct {
		open *pb.OpenSubscription
		says string
	}{
		{withPriority(balanced("pr-bad", "pr-bad", 1, "pr.>"), 10, 0), "max_priority 10: at most 9"},
		{withPriority(balanced("pr-bad", "pr-bad", 1, "pr.>"), 0, 12), "priority 12: a member's priority is 0 (the default) to 9"},
		{withPriority(fanout("pr-bad", "pr.>"), 0, 3), "max_priority and priority are for DELIVERY_MODE_BALANCED"},
	} {
		_, err := openOn(t, tb.c, c.open)
		wantCode(t, err, codes.InvalidArgument, c.says)
	}

	// Queued while the group has no member, then handed out one at a time by priority.
	first := tb.open(t, withPriority(balanced("pr", "pr", 1, "pr.>"), 5, 0))
	if s := first.subscribed; s.GetMaxPriority() != 5 {
		t.Fatalf("subscribed %v, want max_priority 5", s)
	}
	first.close()
	tb.waitMemberless(t, "pr")
	for _, p := range []struct {
		payload string
		prio    uint32
	}{{"a", 0}, {"b", 9}, {"c", 3}, {"d", 5}, {"e", 0}} {
		if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "pr.1", Payload: []byte(p.payload), Priority: p.prio}); err != nil {
			t.Fatal(err)
		}
	}
	m := tb.open(t, withPriority(balanced("pr", "pr", 1, "pr.>"), 5, 0))
	for _, w := range []struct {
		payload string
		prio    uint32
	}{{"b", 9}, {"d", 5}, {"c", 3}, {"a", 0}, {"e", 0}} {
		d := m.next()
		if string(d.GetPayload()) != w.payload || d.GetPriority() != w.prio {
			t.Fatalf("got %q of priority %d; want %q of priority %d", d.GetPayload(), d.GetPriority(), w.payload, w.prio)
		}
		m.ack(d.GetSystemId())
	}
	m.close()

	// Member priorities: hi has room, so lo gets nothing; hi full, lo takes the rest.
	hi := tb.open(t, withPriority(balanced("mp", "mp", 1, "mp.>"), 0, 5))
	lo := tb.open(t, withPriority(balanced("mp", "mp", 10, "mp.>"), 0, 0))
	if s := hi.subscribed; s.GetPriority() != 5 {
		t.Fatalf("subscribed %v, want priority 5", s)
	}
	if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "mp.1", Payload: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	h := hi.next()
	lo.none(200 * time.Millisecond)
	for _, p := range []string{"2", "3"} {
		if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "mp.1", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := string(lo.next().GetPayload()), string(lo.next().GetPayload()); a+b != "23" {
		t.Fatalf("lo got %q then %q, want 2 then 3 while hi is full", a, b)
	}
	hi.ack(h.GetSystemId())
	brokertest.Eventually(t, "hi's ack", func() bool { return tb.group(t, "mp").GetInFlight() == 2 })
	if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "mp.1", Payload: []byte("4")}); err != nil {
		t.Fatal(err)
	}
	if p := string(hi.next().GetPayload()); p != "4" {
		t.Fatalf("hi got %q, want 4 once it has room again", p)
	}
}

// withPriority sets o's max_priority and priority.
func withPriority(o *pb.OpenSubscription, maxPriority, priority uint32) *pb.OpenSubscription {
	o.MaxPriority, o.Priority = maxPriority, priority
	return o
}

// A later member may leave max_priority unset or repeat the group's; another value is refused
// with what the group has (on every engine).
func TestMaxPriorityMismatch(t *testing.T) {
	tb := start(t, brokertest.Options{})
	tb.open(t, withPriority(balanced("mm", "mm", 1, "mm.>"), 3, 0))
	tb.open(t, withPriority(balanced("mm", "mm", 1, "mm.>"), 0, 0))
	tb.open(t, withPriority(balanced("mm", "mm", 1, "mm.>"), 3, 0))
	_, err := openOn(t, tb.c, withPriority(balanced("mm", "mm", 1, "mm.>"), 4, 0))
	wantCode(t, err, codes.FailedPrecondition, `consumer group "mm" has max_priority 3, this member asked for 4`)
}
