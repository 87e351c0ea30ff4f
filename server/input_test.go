package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Every bad input gets the right status and a message that says what was wrong; none of
// them disturbs messages already accepted.
func TestBadInput(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{MaxMessageBytes: 1024}})
	watcher := tb.open(t, fanout("watch", ">"))
	member := tb.open(t, balanced("grp", "grp", 1, "jobs.*"))
	tb.publish(t, "jobs.before", "accepted")

	publish := []struct {
		name, topic string
		payload     int
		code        codes.Code
		fragment    string
	}{
		{"empty topic", "", 1, codes.InvalidArgument, "empty"},
		{"empty token", "jobs..x", 1, codes.InvalidArgument, "empty token"},
		{"trailing dot", "jobs.", 1, codes.InvalidArgument, "empty token"},
		{"wildcard", "jobs.*", 1, codes.InvalidArgument, "wildcard"},
		{"full wildcard", "jobs.>", 1, codes.InvalidArgument, "wildcard"},
		{"whitespace", "jobs. x", 1, codes.InvalidArgument, "whitespace"},
		{"too long", strings.Repeat("a", 256), 1, codes.InvalidArgument, "limit is 255"},
		{"oversize payload", "jobs.big", 1025, codes.InvalidArgument, "limit is 1024"},
	}
	for _, c := range publish {
		_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: c.topic, Payload: make([]byte, c.payload)})
		t.Run("publish "+c.name, func(t *testing.T) { wantCode(t, err, c.code, c.fragment) })
	}

	subscribe := []struct {
		name     string
		open     *pb.OpenSubscription
		code     codes.Code
		fragment string
	}{
		{"no patterns", fanout("x"), codes.InvalidArgument, "topic_patterns is empty"},
		{"bad pattern", fanout("x", "jobs.>.x"), codes.InvalidArgument, "last token"},
		{"partial wildcard", fanout("x", "jobs.th*"), codes.InvalidArgument, "whole token"},
		{"no mode", &pb.OpenSubscription{SubscriptionId: "x", TopicPatterns: []string{"a"}}, codes.InvalidArgument, "mode"},
		{"balanced without group", balanced("x", "", 1, "a"), codes.InvalidArgument, "needs a consumer_group"},
		{"group on fanout", &pb.OpenSubscription{SubscriptionId: "x", TopicPatterns: []string{"a"}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT, ConsumerGroup: "g"}, codes.InvalidArgument, "only for DELIVERY_MODE_BALANCED"},
		{"bad id", fanout("a b", "a"), codes.InvalidArgument, "subscription_id"},
		{"max_in_flight too big", balanced("x", "x", 1<<20, "a"), codes.InvalidArgument, "max_in_flight"},
		{"duplicate fanout id", fanout("watch", "a"), codes.AlreadyExists, "already"},
		{"other patterns than the group", balanced("grp", "grp", 1, "jobs.>"), codes.FailedPrecondition, "same topic_patterns"},
		{"other group name", balanced("grp", "other", 1, "jobs.*"), codes.FailedPrecondition, "consumer group \"grp\""},
		{"fanout id used by a group", fanout("grp", "a"), codes.FailedPrecondition, "balanced consumer group"},
		{"group id used by fanout", balanced("watch", "w", 1, "a"), codes.FailedPrecondition, "fanout"},
	}
	for _, c := range subscribe {
		_, err := openOn(t, tb.c, c.open)
		t.Run("subscribe "+c.name, func(t *testing.T) { wantCode(t, err, c.code, c.fragment) })
	}

	t.Run("first frame not open", func(t *testing.T) {
		stream, err := tb.c.Subscribe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{}}}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		wantCode(t, err, codes.InvalidArgument, "first frame")
	})

	acks := []struct {
		name     string
		req      *pb.Ack
		code     codes.Code
		fragment string
	}{
		{"empty", &pb.Ack{}, codes.InvalidArgument, "subscription_id and system_id"},
		{"unknown subscription", &pb.Ack{SubscriptionId: "nope", SystemId: "1"}, codes.NotFound, "nope"},
		{"malformed id", &pb.Ack{SubscriptionId: "grp", SystemId: "garbage"}, codes.NotFound, "not a system_id"},
		{"fanout", &pb.Ack{SubscriptionId: "watch", SystemId: "1"}, codes.FailedPrecondition, "not acked"},
	}
	for _, c := range acks {
		_, err := tb.c.Ack(context.Background(), c.req)
		t.Run("ack "+c.name, func(t *testing.T) { wantCode(t, err, c.code, c.fragment) })
	}

	// The accepted message is still there for both subscriptions.
	m := member.next()
	if string(m.GetPayload()) != "accepted" {
		t.Fatalf("member got %q", m.GetPayload())
	}
	if string(watcher.next().GetPayload()) != "accepted" {
		t.Fatal("watcher lost the accepted message")
	}
	// Unknown, malformed and duplicate acks on the stream never end it.
	member.ack("garbage", "00000000-1", m.GetSystemId(), m.GetSystemId())
	brokertest.Eventually(t, "stream ack applied", func() bool { return tb.group(t, "grp").GetAcked() == 1 })
	_, err := tb.c.Ack(context.Background(), &pb.Ack{SubscriptionId: "grp", SystemId: m.GetSystemId()})
	wantCode(t, err, codes.NotFound, "already acked")
	tb.publish(t, "jobs.after", "still flowing")
	if got := string(member.next().GetPayload()); got != "still flowing" {
		t.Fatalf("member got %q", got)
	}
}

// PublishStream confirms every frame in order; a bad message fails alone.
func TestPublishStream(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, fanout("ps", "ps.>"))
	stream := tb.publishStream(t)
	const frames, perFrame = 50, 20
	go func() {
		for f := range frames {
			req := &pb.PublishStreamRequest{Sequence: uint64(f)}
			for i := range perFrame {
				topic := "ps.ok"
				if f == 7 && i == 3 {
					topic = "ps.*"
				}
				req.Messages = append(req.Messages, &pb.PublishRequest{Topic: topic, Payload: []byte{byte(f), byte(i)}})
			}
			if err := stream.Send(req); err != nil {
				t.Error(err)
				return
			}
		}
		stream.CloseSend()
	}()
	for f := range frames {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetSequence() != uint64(f) || len(resp.GetResults()) != perFrame {
			t.Fatalf("frame %d: sequence %d with %d results", f, resp.GetSequence(), len(resp.GetResults()))
		}
		for i, r := range resp.GetResults() {
			bad := f == 7 && i == 3
			if bad != (r.GetCode() == int32(codes.InvalidArgument)) || bad == (r.GetSystemId() != "") {
				t.Fatalf("frame %d result %d: %v", f, i, r)
			}
			if bad && !strings.Contains(r.GetError(), "wildcard") {
				t.Fatalf("error %q", r.GetError())
			}
		}
	}
	for f := range frames {
		for i := range perFrame {
			if f == 7 && i == 3 {
				continue
			}
			if p := s.next().GetPayload(); p[0] != byte(f) || p[1] != byte(i) {
				t.Fatalf("got %v, want [%d %d]", p, f, i)
			}
		}
	}
}

// An errors_only frame is answered only when one of its messages fails; a later plain frame
// confirms the ones before it.
func TestPublishStreamErrorsOnly(t *testing.T) {
	tb := start(t, brokertest.Options{})
	s := tb.open(t, fanout("eo", "eo.>"))
	stream := tb.publishStream(t)
	send := func(seq uint64, errorsOnly bool, topics ...string) {
		req := &pb.PublishStreamRequest{Sequence: seq, ErrorsOnly: errorsOnly}
		for _, tp := range topics {
			req.Messages = append(req.Messages, &pb.PublishRequest{Topic: tp, Payload: []byte(tp)})
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	send(1, true, "eo.a", "eo.b")   // no answer
	send(2, true, "eo.c", "eo.*.x") // answered: the second fails
	send(3, true, "eo.d")           // no answer
	send(4, false)                  // answered: the flush
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSequence() != 2 || len(resp.GetResults()) != 2 || resp.GetResults()[0].GetCode() != 0 ||
		codes.Code(resp.GetResults()[1].GetCode()) != codes.InvalidArgument {
		t.Fatalf("first answer %v, want frame 2 with its second message refused", resp)
	}
	if resp, err = stream.Recv(); err != nil || resp.GetSequence() != 4 || len(resp.GetResults()) != 0 {
		t.Fatalf("second answer %v (%v), want the empty frame 4", resp, err)
	}
	for _, want := range []string{"eo.a", "eo.b", "eo.c", "eo.d"} {
		if got := string(s.next().GetPayload()); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// A fanout subscriber that cannot keep up is disconnected with RESOURCE_EXHAUSTED, or, with
// the drop policy, loses messages that are counted; the publisher is never blocked.
func TestSlowConsumer(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(map[bool]string{false: "disconnect", true: "drop"}[drop], func(t *testing.T) {
			tb := start(t, brokertest.Options{FanoutBufferMessages: 8, DropSlowConsumers: drop})
			slow, err := tb.c.Subscribe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := slow.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("slow", "firehose")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := slow.Recv(); err != nil { // subscribed; then stop reading
				t.Fatal(err)
			}
			payload := make([]byte, 64<<10)
			for range 400 { // 25 MiB: far past the transport's windows and the 8-message buffer
				if _, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "firehose", Payload: payload}); err != nil {
					t.Fatal(err)
				}
			}
			if drop {
				brokertest.Eventually(t, "drops counted", func() bool {
					ss := tb.stats(t).GetSubscriptions()
					return len(ss) == 1 && ss[0].GetDropped() > 0
				})
				return
			}
			for {
				if _, err := slow.Recv(); err != nil {
					wantCode(t, err, codes.ResourceExhausted, "slow consumer")
					return
				}
			}
		})
	}
}

// SIGTERM's path: the broker refuses new work with UNAVAILABLE, waits for in-flight acks,
// then ends every subscription with UNAVAILABLE "shutting down".
func TestGracefulShutdown(t *testing.T) {
	tb := start(t, brokertest.Options{})
	member := tb.open(t, balanced("sd", "sd", 1, "sd"))
	watcher := tb.open(t, fanout("sdw", "sd"))
	tb.publish(t, "sd", "in flight")
	m := member.next()
	watcher.next()

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- tb.srv.Shutdown(ctx)
	}()
	brokertest.Eventually(t, "publishes refused", func() bool {
		_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "sd", Payload: []byte("late")})
		return err != nil
	})
	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "sd"})
	wantCode(t, err, codes.Unavailable, "shutting down")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a message still in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	member.ack(m.GetSystemId())
	if err := brokertest.Receive(t, shut, "Shutdown to return after the last ack"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, s := range []*sub{member, watcher} {
		if st := s.ended(); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
			t.Fatalf("stream ended with %v", st)
		}
	}
}

// When the grace period runs out, Shutdown still stops everything and says so.
func TestShutdownGraceExpires(t *testing.T) {
	tb := start(t, brokertest.Options{})
	member := tb.open(t, balanced("sd", "sd", 1, "sd"))
	tb.publish(t, "sd", "never acked")
	member.next()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := tb.srv.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	if st := member.ended(); st.Code() != codes.Unavailable {
		t.Fatalf("stream ended with %v", st)
	}
}

// grpcurl works: health reports SERVING and reflection lists the service.
func TestHealthAndReflection(t *testing.T) {
	tb := start(t, brokertest.Options{})
	h, err := healthpb.NewHealthClient(tb.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "tinybroker.v1.Broker"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	stream, err := reflectpb.NewServerReflectionClient(tb.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "tinybroker.v1.Broker") {
		t.Fatalf("reflection lists %v", names)
	}
}
