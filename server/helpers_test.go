package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server"
)

// engine is the engine the suite runs on: TestMain runs every test once per entry of
// brokertest.Engines.
var engine brokertest.Engine

func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.EachEngine(m, &engine)) }

// needs skips the test on an engine without a capability of brokertest.Engine, saying
// which: the difference is documented in RATIONALE.md ("The JetStream engine").
func needs(t *testing.T, has bool, capability string) {
	t.Helper()
	if !has {
		t.Skipf("engine %s has no %s", engine.Name, capability)
	}
}

// needsGroupBounds skips the test on an engine without bounds per consumer group.
func needsGroupBounds(t *testing.T) {
	t.Helper()
	needs(t, engine.GroupBounds, "bounds per consumer group (max_queued, max_queued_bytes, overflow)")
}

// testBroker is a real server on a loopback port and a client connected to it.
type testBroker struct {
	b    broker.Engine
	srv  *server.Server
	addr string
	conn *grpc.ClientConn
	c    pb.BrokerClient
}

func start(t *testing.T, opts brokertest.Options) *testBroker {
	t.Helper()
	return startWith(t, opts, server.Options{})
}

func startWith(t *testing.T, opts brokertest.Options, sopts server.Options) *testBroker {
	t.Helper()
	sb := servertest.Start(t, servertest.Options{Options: opts, Engine: engine, Server: sopts})
	conn := servertest.Dial(t, sb.Addr)
	return &testBroker{b: sb.Engine, srv: sb.Server, addr: sb.Addr, conn: conn, c: pb.NewBrokerClient(conn)}
}

func (tb *testBroker) stats(t *testing.T) *pb.StatsResponse {
	t.Helper()
	st, err := tb.c.Stats(context.Background(), &pb.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (tb *testBroker) group(t *testing.T, id string) *pb.GroupStats {
	t.Helper()
	for _, g := range tb.stats(t).GetGroups() {
		if g.GetSubscriptionId() == id {
			return g
		}
	}
	return &pb.GroupStats{}
}

// waitMemberless waits until the group of subscription_id id has no members, as the server
// sees it.
func (tb *testBroker) waitMemberless(t *testing.T, id string) {
	t.Helper()
	brokertest.Eventually(t, "member gone", func() bool { return tb.group(t, id).GetMembers() == 0 })
}

// memberless makes a consumer group without members: named id, of subscription_id id, on
// patterns. Its one member (max_in_flight 1) opens, leaves, and is seen gone.
func (tb *testBroker) memberless(t *testing.T, id string, patterns ...string) {
	t.Helper()
	tb.open(t, balanced(id, id, 1, patterns...)).close()
	tb.waitMemberless(t, id)
}

func (tb *testBroker) publish(t *testing.T, topic, payload string) string {
	t.Helper()
	return tb.publishH(t, topic, payload, nil)
}

func (tb *testBroker) publishH(t *testing.T, topic, payload string, headers map[string]string) string {
	t.Helper()
	resp, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Payload: []byte(payload), Headers: headers})
	if err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
	return resp.GetSystemId()
}

// publishStream opens a PublishStream.
func (tb *testBroker) publishStream(t *testing.T) pb.Broker_PublishStreamClient {
	t.Helper()
	stream, err := tb.c.PublishStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// sub is an open Subscribe stream whose messages a goroutine collects.
type sub struct {
	t          *testing.T
	stream     pb.Broker_SubscribeClient
	cancel     context.CancelFunc
	subscribed *pb.Subscribed
	msgs       chan *pb.Message
	events     chan *pb.SubscribeResponse // subscribed and refused frames after the first
	done       chan struct{}
	err        error // the stream's final error, once done is closed
}

func fanout(id string, patterns ...string) *pb.OpenSubscription {
	return &pb.OpenSubscription{SubscriptionId: id, TopicPatterns: patterns, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}
}

func balanced(id, group string, maxInFlight uint32, patterns ...string) *pb.OpenSubscription {
	return &pb.OpenSubscription{SubscriptionId: id, ConsumerGroup: group, TopicPatterns: patterns,
		Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED, MaxInFlight: maxInFlight}
}

func (tb *testBroker) open(t *testing.T, o *pb.OpenSubscription) *sub {
	t.Helper()
	s, err := openOn(t, tb.c, o)
	if err != nil {
		t.Fatalf("subscribe %v: %v", o, err)
	}
	return s
}

func openOn(t *testing.T, c pb.BrokerClient, o *pb.OpenSubscription) (*sub, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.Subscribe(ctx)
	if err == nil {
		err = stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: o}})
	}
	var first *pb.SubscribeResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s := &sub{t: t, stream: stream, cancel: cancel, subscribed: first.GetSubscribed(), msgs: make(chan *pb.Message, 100_000),
		events: make(chan *pb.SubscribeResponse, 1000), done: make(chan struct{})}
	if s.subscribed == nil {
		cancel()
		t.Fatalf("first server frame is %v, want subscribed", first)
	}
	go func() {
		defer close(s.done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				s.err = err
				return
			}
			if resp.GetMessages() == nil {
				s.events <- resp
			}
			for _, m := range resp.GetMessages().GetMessages() {
				s.msgs <- m
			}
		}
	}()
	t.Cleanup(s.close)
	return s, nil
}

// close cancels the stream and waits for its reader.
func (s *sub) close() {
	s.cancel()
	<-s.done
}

// next returns the next message.
func (s *sub) next() *pb.Message {
	s.t.Helper()
	return brokertest.Receive(s.t, s.msgs, "a message on subscription "+s.subscribed.GetSubscriptionId())
}

// none asserts that no message arrives for d.
func (s *sub) none(d time.Duration) {
	s.t.Helper()
	select {
	case m := <-s.msgs:
		s.t.Fatalf("subscription %s: unexpected message %s %q (attempt %d)", s.subscribed.GetSubscriptionId(), m.GetTopic(), m.GetPayload(), m.GetAttempt())
	case <-time.After(d):
	}
}

func (s *sub) ack(ids ...string) {
	s.t.Helper()
	if err := s.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids}}}); err != nil {
		s.t.Fatalf("send ack: %v", err)
	}
}

func (s *sub) send(f *pb.SubscribeRequest) {
	s.t.Helper()
	if err := s.stream.Send(f); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

// ended waits for the stream to end and returns its status.
func (s *sub) ended() *status.Status {
	s.t.Helper()
	brokertest.Receive(s.t, s.done, "the stream to end")
	return status.Convert(s.err)
}

func wantCode(t *testing.T, err error, code codes.Code, fragment string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("got %v (%q), want %v", st.Code(), st.Message(), code)
	}
	if fragment != "" && !contains(st.Message(), fragment) {
		t.Fatalf("message %q does not mention %q", st.Message(), fragment)
	}
}

func contains(s, sub string) bool {
	return strings.Contains(s, sub)
}

const codesResourceExhausted = codes.ResourceExhausted
