package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server"
)

// canary is a publisher and a fanout subscriber on a connection of their own: each test of
// a limit checks that they keep being served while another client is refused.
type canary struct {
	t *testing.T
	c pb.BrokerClient
	s *sub
	n int
}

func newCanary(t *testing.T, tb *testBroker) *canary {
	t.Helper()
	c := pb.NewBrokerClient(servertest.Dial(t, tb.addr))
	s, err := openOn(t, c, fanout("canary", "canary.>"))
	if err != nil {
		t.Fatalf("canary subscribe: %v", err)
	}
	k := &canary{t: t, c: c, s: s}
	k.check()
	return k
}

// check publishes one message and waits for the canary subscriber to get it.
func (k *canary) check() {
	k.t.Helper()
	k.n++
	want := fmt.Sprint("canary ", k.n)
	if _, err := k.c.Publish(context.Background(), &pb.PublishRequest{Topic: "canary.x", Payload: []byte(want)}); err != nil {
		k.t.Fatalf("canary publish: %v", err)
	}
	if m := k.s.next(); string(m.GetPayload()) != want {
		k.t.Fatalf("canary got %q, want %q", m.GetPayload(), want)
	}
}

// A unary publish larger than the receive limit (derived from the message limits) is
// refused by gRPC before the broker allocates for it.
func TestLimitReceiveUnary(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{MaxMessageBytes: 1024, MaxHeaderBytes: 256}})
	k := newCanary(t, tb)
	limit := server.ReceiveLimit(1024, 256)
	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "big", Payload: make([]byte, limit+1)})
	wantCode(t, err, codes.ResourceExhausted, "larger than max")
	_, err = tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "big", Payload: make([]byte, 1025)})
	wantCode(t, err, codes.InvalidArgument, "max_message_bytes")
	k.check()
}

// PublishStream frames: more than max_publish_batch messages, or more bytes than the
// receive limit, end the stream with RESOURCE_EXHAUSTED naming the setting; nothing of the
// frame is published.
func TestLimitPublishFrame(t *testing.T) {
	tb := startWith(t, brokertest.Options{Limits: broker.Limits{MaxMessageBytes: 1024, MaxHeaderBytes: 256}}, server.Options{MaxPublishBatch: 8})
	k := newCanary(t, tb)
	spy := tb.open(t, fanout("spy", "frame.>"))

	frame := func(n, size int) *pb.PublishStreamRequest {
		f := &pb.PublishStreamRequest{Sequence: 1}
		for range n {
			f.Messages = append(f.Messages, &pb.PublishRequest{Topic: "frame.x", Payload: make([]byte, size)})
		}
		return f
	}
	send := func(f *pb.PublishStreamRequest) (*pb.PublishStreamResponse, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := tb.c.PublishStream(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(f); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return stream.Recv()
	}
	resp, err := send(frame(8, 10))
	if err != nil || len(resp.GetResults()) != 8 {
		t.Fatalf("a frame at the limit: %v, %d results", err, len(resp.GetResults()))
	}
	for range 8 {
		spy.next()
	}
	_, err = send(frame(9, 10))
	wantCode(t, err, codes.ResourceExhausted, "limits { max_publish_batch }")
	_, err = send(frame(2, server.ReceiveLimit(1024, 256)/2+1)) // gRPC refuses it, and names the sizes
	wantCode(t, err, codes.ResourceExhausted, fmt.Sprintf("larger than max (%d vs. %d)", proto.Size(frame(2, server.ReceiveLimit(1024, 256)/2+1)), server.ReceiveLimit(1024, 256)))
	spy.none(20 * time.Millisecond)
	k.check()
}

// The answer to a frame is bounded by a constant plus a multiple of the frame: a frame of
// empty (invalid) messages earns short errors once its answer's budget is spent.
func TestLimitPublishAnswerBounded(t *testing.T) {
	tb := start(t, brokertest.Options{})
	k := newCanary(t, tb)
	const n = 4096 // the default max_publish_batch
	f := &pb.PublishStreamRequest{Sequence: 1}
	for range n {
		f.Messages = append(f.Messages, &pb.PublishRequest{})
	}
	stream := tb.publishStream(t)
	if err := stream.Send(f); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	req, got := proto.Size(f), proto.Size(resp)
	if len(resp.GetResults()) != n || resp.GetResults()[0].GetCode() != int32(codes.InvalidArgument) ||
		!strings.Contains(resp.GetResults()[0].GetError(), "empty") || resp.GetResults()[n-1].GetCode() != int32(codes.InvalidArgument) {
		t.Fatalf("answer: %d results, first %v, last %v", len(resp.GetResults()), resp.GetResults()[0], resp.GetResults()[n-1])
	}
	if bound := 64<<10 + 2*req + n*64; got > bound {
		t.Fatalf("a frame of %d bytes got an answer of %d bytes, over %d", req, got, bound)
	}
	t.Logf("frame %d bytes, answer %d bytes", req, got)
	_ = stream.CloseSend()
	k.check()
}

// Streams per connection: gRPC clients wait for a stream to end before they open one past
// the limit; other connections are served meanwhile.
func TestLimitStreamsPerConnection(t *testing.T) {
	tb := startWith(t, brokertest.Options{}, server.Options{MaxStreamsPerConnection: 2})
	k := newCanary(t, tb)
	c := pb.NewBrokerClient(servertest.Dial(t, tb.addr))
	a, err := openOn(t, c, fanout("a", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openOn(t, c, fanout("b", "b")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Stats(ctx, &pb.StatsRequest{})
	wantCode(t, err, codes.DeadlineExceeded, "")
	k.check()
	a.close()
	if _, err := c.Stats(context.Background(), &pb.StatsRequest{}); err != nil {
		t.Fatalf("after a stream ended: %v", err)
	}
}

// Connections past max_connections are told why and closed; those open keep being served,
// and a slot that frees up is used again.
func TestLimitConnections(t *testing.T) {
	tb := startWith(t, brokertest.Options{}, server.Options{MaxConnections: 2})
	tb.stats(t)                          // connection 1
	k := newCanary(t, tb)                // connection 2
	third := servertest.Dial(t, tb.addr) // over the limit
	_, err := pb.NewBrokerClient(third).Stats(context.Background(), &pb.StatsRequest{})
	wantCode(t, err, codes.ResourceExhausted, "too many connections: the broker serves at most 2 at once (limits { max_connections })")
	third.Close()
	k.check()
	if open, refused := tb.srv.Connections(); open != 2 || refused == 0 {
		t.Fatalf("Connections() = %d open, %d refused; want 2 and some", open, refused)
	}
	tb.conn.Close()
	brokertest.Eventually(t, "a free connection slot", func() bool {
		open, _ := tb.srv.Connections()
		return open == 1
	})
	fourth := servertest.Dial(t, tb.addr)
	if _, err := pb.NewBrokerClient(fourth).Stats(context.Background(), &pb.StatsRequest{}); err != nil {
		t.Fatalf("after a connection closed: %v", err)
	}
	k.check()
}

// A connection that sends nothing, or only the HTTP/2 preface, is closed after the handshake
// timeout.
func TestLimitHandshakeTimeout(t *testing.T) {
	tb := startWith(t, brokertest.Options{}, server.Options{HandshakeTimeout: 100 * time.Millisecond})
	k := newCanary(t, tb)
	for _, hello := range []string{"", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"} {
		c, err := net.Dial("tcp", tb.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, hello); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, err = io.Copy(io.Discard, c) // the server's settings, then the close
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("hello %q: connection still open after %v", hello, time.Since(start))
		}
		c.Close()
	}
	k.check()
}

// Subscriptions per stream: the open past the limit is refused with RESOURCE_EXHAUSTED; the
// stream and its subscriptions stay.
func TestLimitSubscriptionsPerStream(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{MaxSubscriptionsPerStream: 2}})
	k := newCanary(t, tb)
	s := tb.open(t, fanout("s1", "s.1"))
	s.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("s2", "s.2")}})
	s.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("s3", "s.3")}})
	if ev := <-s.events; ev.GetSubscribed().GetSubscriptionId() != "s2" {
		t.Fatalf("second open: %v", ev)
	}
	ev := <-s.events
	if r := ev.GetRefused(); r == nil || codes.Code(r.GetCode()) != codes.ResourceExhausted || !contains(r.GetError(), "max_subscriptions_per_stream") {
		t.Fatalf("third open: %v, want refused RESOURCE_EXHAUSTED naming max_subscriptions_per_stream", ev)
	}
	tb.publish(t, "s.2", "x")
	if m := s.next(); m.GetSubscriptionId() != "s2" {
		t.Fatalf("got %v", m)
	}
	k.check()
}

// Patterns per subscription: an open with more is refused with INVALID_ARGUMENT; a Subscribe
// frame over the receive limit by gRPC, with RESOURCE_EXHAUSTED.
func TestLimitPatternsPerSubscription(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{MaxPatternsPerSubscription: 3, MaxMessageBytes: 1024, MaxHeaderBytes: 256}})
	k := newCanary(t, tb)
	_, err := openOn(t, tb.c, fanout("many", "a", "b", "c", "d"))
	wantCode(t, err, codes.InvalidArgument, "max_patterns_per_subscription")
	big := strings.Repeat("x", 250)
	var pats []string
	for range server.ReceiveLimit(1024, 256)/250 + 1 {
		pats = append(pats, big)
	}
	_, err = openOn(t, tb.c, fanout("huge", pats...))
	wantCode(t, err, codes.ResourceExhausted, "larger than max")
	tb.open(t, fanout("few", "a", "b", "c"))
	k.check()
}

// Consumer groups in all: the group past max_groups is refused with RESOURCE_EXHAUSTED;
// members of existing groups still join.
func TestLimitGroups(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{MaxGroups: 2}})
	k := newCanary(t, tb)
	tb.open(t, balanced("g1", "g1", 1, "g.1"))
	tb.open(t, balanced("g2", "g2", 1, "g.2"))
	_, err := openOn(t, tb.c, balanced("g3", "g3", 1, "g.3"))
	wantCode(t, err, codes.ResourceExhausted, "max_groups")
	tb.open(t, balanced("g1", "g1", 1, "g.1")) // a second member of an existing group
	k.check()
}

// Stats lists a page at a time, by id, with totals, and every page stays near 1 MiB
// however large the subscriptions' patterns.
func TestStatsPaging(t *testing.T) {
	tb := start(t, brokertest.Options{})
	k := newCanary(t, tb)
	var pats []string
	for i := range 100 {
		pats = append(pats, fmt.Sprintf("%03d.%s", i, strings.Repeat("p", 240)))
	}
	s := tb.open(t, fanout("big-00", pats...))
	const subs = 60
	for i := 1; i < subs; i++ {
		s.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout(fmt.Sprintf("big-%02d", i), pats...)}})
	}
	for range subs - 1 {
		if ev := <-s.events; ev.GetSubscribed() == nil {
			t.Fatalf("open: %v", ev)
		}
	}
	for i := range 5 {
		tb.open(t, balanced(fmt.Sprint("g", i), fmt.Sprint("g", i), 1, "g"))
	}
	list := func(size uint32) (subIDs, groupIDs []string, pages int) {
		token := ""
		for {
			st, err := tb.c.Stats(context.Background(), &pb.StatsRequest{PageSize: size, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if n := proto.Size(st); n > 1<<20+64<<10 {
				t.Fatalf("page %d is %d bytes", pages, n)
			}
			if st.GetSubscriptionsTotal() != subs+1 || st.GetGroupsTotal() != 5 {
				t.Fatalf("totals %d subscriptions, %d groups; want %d, 5", st.GetSubscriptionsTotal(), st.GetGroupsTotal(), subs+1)
			}
			if size > 0 && (len(st.GetSubscriptions()) > int(size) || len(st.GetGroups()) > int(size)) {
				t.Fatalf("page of %d subscriptions and %d groups, size %d", len(st.GetSubscriptions()), len(st.GetGroups()), size)
			}
			for _, x := range st.GetSubscriptions() {
				subIDs = append(subIDs, x.GetSubscriptionId())
			}
			for _, x := range st.GetGroups() {
				groupIDs = append(groupIDs, x.GetSubscriptionId())
			}
			if token = st.GetNextPageToken(); token == "" {
				return subIDs, groupIDs, pages
			}
			if pages > 100 {
				t.Fatal("paging does not end")
			}
		}
	}
	for _, size := range []uint32{0, 7} {
		subIDs, groupIDs, pages := list(size)
		if len(subIDs) != subs+1 || len(groupIDs) != 5 || pages < 2 {
			t.Fatalf("page size %d: listed %d subscriptions and %d groups in %d pages", size, len(subIDs), len(groupIDs), pages)
		}
		for i := 1; i < len(subIDs); i++ {
			if subIDs[i-1] >= subIDs[i] {
				t.Fatalf("subscriptions out of order or repeated: %v", subIDs)
			}
		}
	}
	_, err := tb.c.Stats(context.Background(), &pb.StatsRequest{PageToken: "nonsense"})
	wantCode(t, err, codes.InvalidArgument, "page_token")
	k.check()
}

// A client that sends opens without reading their answers is held by flow control: the
// stream stops reading past MaxUnansweredOpens (each answer is larger than the open that
// earned it), and goes on once the client reads.
func TestLimitUnansweredOpens(t *testing.T) {
	tb := startWith(t, brokertest.Options{}, server.Options{MaxUnansweredOpens: 16})
	k := newCanary(t, tb)
	conn, err := grpc.NewClient(tb.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10)) // a fixed window: what the server can send unread is bounded
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := pb.NewBrokerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const opens = 3000
	id := func(i int) string { return fmt.Sprintf("%0128d", i) } // long ids make long answers
	for i := range opens {
		if err := stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout(id(i), "p")}}); err != nil {
			t.Fatal(err)
		}
	}
	total := func() uint32 { return tb.stats(t).GetSubscriptionsTotal() }
	// The stream takes opens until 16 are unanswered beyond what the client's window holds,
	// then stops: wait until the count settles, and check it is far from all.
	prev := total()
	for {
		time.Sleep(100 * time.Millisecond)
		n := total()
		if n == prev {
			break
		}
		prev = n
	}
	t.Logf("%d of %d opens taken while their answers were not read", prev, opens)
	if prev > 1000 {
		t.Fatalf("%d of %d opens were taken without their answers being read", prev, opens)
	}
	k.check()
	for answered := 0; answered < opens; {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", answered, err)
		}
		if resp.GetSubscribed() == nil {
			t.Fatalf("answer %d: %v", answered, resp)
		}
		answered++
	}
	if n := total(); n != opens+1 {
		t.Fatalf("%d subscriptions, want %d", n, opens+1)
	}
}
