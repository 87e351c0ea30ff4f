package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// event returns the next subscribed or refused frame.
func (s *sub) event() *pb.SubscribeResponse {
	s.t.Helper()
	return brokertest.Receive(s.t, s.events, "a subscribed or refused frame")
}

func openFrame(o *pb.OpenSubscription) *pb.SubscribeRequest {
	return &pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: o}}
}

func closeFrame(id string) *pb.SubscribeRequest {
	return &pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Close{Close: &pb.CloseSubscription{SubscriptionId: id}}}
}

// Many subscriptions on one stream: every open is answered in order, each message carries the
// subscription it is for, and a message matching two subscriptions of the stream comes once
// for each.
func TestStreamCarriesManySubscriptions(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, fanout("orders", "orders.*"))
	s.send(openFrame(fanout("all", ">")))
	s.send(openFrame(fanout("bad", "a..b")))    // refused, the stream goes on
	s.send(openFrame(fanout("orders", "x")))    // refused: the id is taken
	s.send(openFrame(fanout("", "payments.>"))) // the broker names it
	if e := s.event().GetSubscribed(); e.GetSubscriptionId() != "all" {
		t.Fatalf("first answer %v, want subscribed all", e)
	}
	if r := s.event().GetRefused(); r.GetSubscriptionId() != "bad" || codes.Code(r.GetCode()) != codes.InvalidArgument || !contains(r.GetError(), "a..b") {
		t.Fatalf("second answer %v, want refused bad with INVALID_ARGUMENT naming the pattern", r)
	}
	if r := s.event().GetRefused(); r.GetSubscriptionId() != "orders" || codes.Code(r.GetCode()) != codes.AlreadyExists {
		t.Fatalf("third answer %v, want refused orders with ALREADY_EXISTS", r)
	}
	auto := s.event().GetSubscribed().GetSubscriptionId()
	if auto == "" {
		t.Fatal("fourth answer is not subscribed with a made-up id")
	}

	tb.publish(t, "orders.new", "o1")
	tb.publish(t, "payments.eu.card", "p1")
	got := map[string]string{}
	for range 4 { // o1 to orders and all, p1 to all and auto
		m := s.next()
		got[m.GetSubscriptionId()+"/"+string(m.GetPayload())] = m.GetTopic()
	}
	for _, k := range []string{"orders/o1", "all/o1", "all/p1", auto + "/p1"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("deliveries %v lack %s", got, k)
		}
	}
	s.none(50 * time.Millisecond)
	if n := len(tb.stats(t).GetSubscriptions()); n != 3 {
		t.Fatalf("stats list %d subscriptions, want 3", n)
	}
}

// Closing one subscription stops its deliveries and no other's; the stream stays open even
// with no subscription left.
func TestCloseOneSubscription(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, fanout("a", "t.>"))
	s.send(openFrame(fanout("b", "t.>")))
	s.event()
	s.send(closeFrame("a"))
	s.send(closeFrame("nope")) // unknown ids are ignored
	brokertest.Eventually(t, "a closed", func() bool { return len(tb.stats(t).GetSubscriptions()) == 1 })
	tb.publish(t, "t.1", "one")
	if m := s.next(); m.GetSubscriptionId() != "b" {
		t.Fatalf("got a message for %q, want b only", m.GetSubscriptionId())
	}
	s.none(50 * time.Millisecond)
	s.send(closeFrame("b"))
	brokertest.Eventually(t, "b closed", func() bool { return len(tb.stats(t).GetSubscriptions()) == 0 })
	s.send(openFrame(fanout("c", "t.>")))
	if e := s.event().GetSubscribed(); e.GetSubscriptionId() != "c" {
		t.Fatalf("answer %v, want subscribed c", e)
	}
	tb.publish(t, "t.2", "two")
	if m := s.next(); m.GetSubscriptionId() != "c" || string(m.GetPayload()) != "two" {
		t.Fatalf("got %v, want two for c", m)
	}
}

// A group member sharing a stream with other subscriptions: acks name the subscription; an
// ack frame without one is refused; closing the member hands its unacked message to another
// member at once.
func TestGroupMemberOnSharedStream(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, fanout("watch", "jobs.>"))
	s.send(openFrame(balanced("", "workers", 1, "jobs.>")))
	if e := s.event().GetSubscribed(); e.GetSubscriptionId() != "workers" || e.GetMemberId() == "" {
		t.Fatalf("answer %v, want subscribed workers with a member id", e)
	}
	id := tb.publish(t, "jobs.1", "j1")
	seen := map[string]bool{}
	for range 2 {
		seen[s.next().GetSubscriptionId()] = true
	}
	if !seen["watch"] || !seen["workers"] {
		t.Fatalf("deliveries went to %v, want watch and workers", seen)
	}
	s.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: []string{id}, SubscriptionId: "workers"}}})
	brokertest.Eventually(t, "ack applied", func() bool { return tb.group(t, "workers").GetAcked() == 1 })

	// Member loss on a shared stream: what the member holds goes to the other member at once.
	id2 := tb.publish(t, "jobs.2", "j2")
	for range 2 {
		if m := s.next(); m.GetSubscriptionId() == "workers" && m.GetSystemId() != id2 {
			t.Fatalf("member got %s, want %s", m.GetSystemId(), id2)
		}
	}
	other := tb.open(t, balanced("", "workers", 1, "jobs.>"))
	other.none(50 * time.Millisecond) // the shared stream's member holds j2
	s.send(closeFrame("workers"))
	if m := other.next(); m.GetSystemId() != id2 || m.GetAttempt() != 2 {
		t.Fatalf("other member got %s attempt %d, want %s attempt 2", m.GetSystemId(), m.GetAttempt(), id2)
	}

	// Two subscriptions on a stream: an ack that names none is ambiguous.
	s.send(openFrame(fanout("watch2", "jobs.>")))
	s.event()
	s.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: []string{id}}}})
	st := s.ended()
	if st.Code() != codes.InvalidArgument || !contains(st.Message(), "subscription_id") {
		t.Fatalf("ambiguous ack ended the stream with %v %q, want INVALID_ARGUMENT naming subscription_id", st.Code(), st.Message())
	}
}

// Closing the send side of a stream with a group member and a fanout subscription: the member
// leaves, the fanout subscription keeps receiving.
func TestHalfCloseMixedStream(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, balanced("", "g", 1, "m.>"))
	s.send(openFrame(fanout("f", "m.>")))
	s.event()
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "member left", func() bool { return tb.group(t, "g").GetMembers() == 0 })
	tb.publish(t, "m.1", "x")
	if m := s.next(); m.GetSubscriptionId() != "f" {
		t.Fatalf("got a message for %q, want f", m.GetSubscriptionId())
	}
	s.none(50 * time.Millisecond)
}

// A stream can be one member of a group at most: a second open for the same group on the same
// stream is refused, and the first member keeps working.
func TestStreamOneMemberPerGroup(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, balanced("", "g1", 1, "w.>"))
	s.send(openFrame(balanced("", "g1", 1, "w.>")))
	r := s.event().GetRefused()
	if r.GetSubscriptionId() != "g1" || codes.Code(r.GetCode()) != codes.AlreadyExists || !contains(r.GetError(), "one member") {
		t.Fatalf("second member on one stream: %v, want refused ALREADY_EXISTS", r)
	}
	if n := tb.group(t, "g1").GetMembers(); n != 1 {
		t.Fatalf("group has %d members, want 1", n)
	}
	tb.publish(t, "w.1", "x")
	if m := s.next(); m.GetSubscriptionId() != "g1" || string(m.GetPayload()) != "x" {
		t.Fatalf("got %v, want x for g1", m)
	}
}
