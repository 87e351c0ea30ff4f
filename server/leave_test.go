package server_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// A balanced member that closes its send side leaves cleanly: the acks it sent first are
// applied, the stream ends with OK, and what it still held goes to the other members.
func TestBalancedCloseSendLeaves(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("cs", "cs", 2, "cs")
	a := tb.open(t, open)
	tb.publish(t, "cs", "1")
	tb.publish(t, "cs", "2")
	m1, m2 := a.next(), a.next()
	b := tb.open(t, open)
	a.ack(m1.GetSystemId())
	if err := a.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	a.ended()
	if a.err != io.EOF { // io.EOF: the server ended the stream with OK
		t.Fatalf("stream ended with %v, want a clean end", a.err)
	}
	got := b.next()
	if got.GetSystemId() != m2.GetSystemId() || got.GetAttempt() != 2 {
		t.Fatalf("b got %v, want the unacked %s", got, m2.GetSystemId())
	}
	b.none(50 * time.Millisecond) // m1 was acked before the close: never redelivered
	if g := tb.group(t, "cs"); g.GetAcked() != 1 || g.GetMembers() != 1 {
		t.Fatalf("group %v", g)
	}
}

// Nacks and touches on a stream apply only to that member's own deliveries: a late nack
// cannot take back a message that was redelivered to another member.
func TestStreamNackOnlyOwnDeliveries(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("own", "own", 1, "own")
	open.AckDeadline = durationpb.New(time.Hour)
	a := tb.open(t, open)
	b := tb.open(t, open)
	tb.publish(t, "own", "for a")
	tb.publish(t, "own", "for b")
	ma, mb := a.next(), b.next()
	a.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{mb.GetSystemId()}}}})
	a.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{ma.GetSystemId()}}}})
	if m := a.next(); m.GetSystemId() != ma.GetSystemId() { // a's own nack took effect
		t.Fatalf("a got %v", m)
	}
	b.none(30 * time.Millisecond)
	if g := tb.group(t, "own"); g.GetRedelivered() != 1 || g.GetInFlight() != 2 {
		t.Fatalf("group %v: b's message must still be b's", g)
	}
	// The unary Nack names no member, so it may give back any delivery.
	if _, err := tb.c.Nack(context.Background(), &pb.Nack{SubscriptionId: "own", SystemId: mb.GetSystemId()}); err != nil {
		t.Fatal(err)
	}
	if m := b.next(); m.GetSystemId() != mb.GetSystemId() || m.GetAttempt() != 2 {
		t.Fatalf("b got %v", m)
	}
}

// Shutdown ends open publish streams with UNAVAILABLE at once.
func TestPublishStreamShutdown(t *testing.T) {
	tb := start(t, brokertest.Options{})
	stream := tb.publishStream(t)
	if err := stream.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{{Topic: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tb.srv.Shutdown(context.Background()) }()
	_, err := stream.Recv()
	wantCode(t, err, codes.Unavailable, "shutting down")
	if err := brokertest.Receive(t, done, "Shutdown to return"); err != nil {
		t.Fatal(err)
	}
}

// Balanced-only settings on a fanout subscription are refused rather than ignored.
func TestFanoutRefusesBalancedSettings(t *testing.T) {
	tb := start(t, brokertest.Options{})
	o := fanout("f", "a")
	o.MaxInFlight = 10
	_, err := openOn(t, tb.c, o)
	wantCode(t, err, codes.InvalidArgument, "for DELIVERY_MODE_BALANCED")
}
