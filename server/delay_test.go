package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Delayed publish over gRPC, unary and PublishStream: the answer comes at once with the
// system_id and routed 0, and the message reaches a fanout subscription and a group member
// no sooner than its time, under that system_id; a deliver_at already past publishes at
// once. Both fields, a negative delay or one past max_delay are INVALID_ARGUMENT, saying
// which. On the JetStream engine the message delivered has the system_id of its store, made
// when it is published (the answer's names its schedule, as NATS's schedules do).
func TestDelayOverGRPC(t *testing.T) {
	tb := start(t, brokertest.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		req  *pb.PublishRequest
		says string
	}{
		{&pb.PublishRequest{Topic: "dl.1", DeliverAfter: durationpb.New(time.Second), DeliverAt: timestamppb.Now()}, "both set"},
		{&pb.PublishRequest{Topic: "dl.1", DeliverAfter: durationpb.New(-time.Second)}, "deliver_after must be a valid duration"},
		{&pb.PublishRequest{Topic: "dl.1", DeliverAfter: durationpb.New(25 * time.Hour)}, "limits { max_delay }"},
		{&pb.PublishRequest{Topic: "dl.1", DeliverAt: timestamppb.New(time.Now().Add(48 * time.Hour))}, "deliver_at is 48h0m0s away"},
	} {
		_, err := tb.c.Publish(ctx, c.req)
		wantCode(t, err, codes.InvalidArgument, c.says)
	}
	f := tb.open(t, fanout("dl-f", "dl.>"))
	m := tb.open(t, balanced("dl", "dl", 10, "dl.>"))
	const delay = 200 * time.Millisecond
	check := func(how string, sent time.Time, id string) {
		t.Helper()
		for _, s := range []*sub{f, m} {
			d := s.next()
			sameID := d.GetSystemId() == id || engine.Name == "jetstream" && d.GetSystemId() != ""
			if late := time.Since(sent); late < delay || !sameID || string(d.GetPayload()) != how {
				t.Fatalf("%s: %q (%s) arrived after %v; want %q (%s) after %v or more", how, d.GetPayload(), d.GetSystemId(), late, how, id, delay)
			}
		}
	}

	sent := time.Now()
	res, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dl.1", Payload: []byte("unary"), DeliverAfter: durationpb.New(delay)})
	if err != nil || res.GetSystemId() == "" || res.GetRouted() != 0 {
		t.Fatalf("publish: %v, %v; want a system_id and routed 0", res, err)
	}
	check("unary", sent, res.GetSystemId())

	sent = time.Now()
	res, err = tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dl.1", Payload: []byte("at"), DeliverAt: timestamppb.New(sent.Add(delay))})
	if err != nil {
		t.Fatal(err)
	}
	check("at", sent, res.GetSystemId())

	res, err = tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dl.1", Payload: []byte("past"), DeliverAt: timestamppb.New(time.Now().Add(-time.Minute))})
	if err != nil || res.GetRouted() != 2 {
		t.Fatalf("deliver_at in the past: %v, %v; want routed to both at once", res, err)
	}
	f.next()
	m.next()

	ps := tb.publishStream(t)
	sent = time.Now()
	if err := ps.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{{Topic: "dl.1", Payload: []byte("stream"), DeliverAfter: durationpb.New(delay)}}}); err != nil {
		t.Fatal(err)
	}
	r, err := ps.Recv()
	if err != nil || len(r.GetResults()) != 1 || r.GetResults()[0].GetCode() != 0 || r.GetResults()[0].GetRouted() != 0 {
		t.Fatalf("PublishStream answer %v, %v; want one result, routed 0", r, err)
	}
	check("stream", sent, r.GetResults()[0].GetSystemId())
}

// The bounds on what is held for later refuse with RESOURCE_EXHAUSTED naming the setting, on
// every engine, while an undelayed publish goes on.
func TestDelayBoundsOverGRPC(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{MaxDelayed: 2}})
	ctx := context.Background()
	for i := range 2 {
		if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dl.b", DeliverAfter: durationpb.New(time.Hour)}); err != nil {
			t.Fatalf("delayed publish %d: %v", i+1, err)
		}
	}
	_, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dl.b", DeliverAfter: durationpb.New(time.Hour)})
	wantCode(t, err, codes.ResourceExhausted, "limits { max_delayed }")
	if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dl.b"}); err != nil {
		t.Fatalf("an undelayed publish beside the full delays: %v", err)
	}
}
