package client_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// errLost is what a client sees when the connection breaks after the broker got a publish and
// before its answer came back.
var errLost = status.Error(codes.Unavailable, "connection lost (test)")

// loseAnswers dials addr with the answers of the first n unary Publish calls lost: each call
// reaches the broker, which publishes, and fails with UNAVAILABLE.
func loseAnswers(t *testing.T, addr string, n int64) *client.Client {
	t.Helper()
	var calls atomic.Int64
	lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && calls.Add(1) <= n {
			return errLost
		}
		return err
	}
	c, err := client.Dial(addr, client.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond),
		client.WithDialOptions(grpc.WithUnaryInterceptor(lose)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Issue 25: a publish whose answer was lost is sent again with its message id, and the broker
// publishes it once: Publish succeeds, says the retry found a duplicate, and the subscriber
// gets the message once (the marker published next is the next message it gets).
func TestPublishRetriesWithItsID(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := loseAnswers(t, ts.Addr, 2)
	var got recorder[string]
	subscribe(t, dial(t, ts.Addr), client.SubscribeOptions{Patterns: []string{"orders.>"}}, payloadsTo(&got))
	ctx := context.Background()
	res, err := c.Publish(ctx, "orders.new", []byte("once"), nil)
	if err != nil {
		t.Fatalf("Publish with its first two answers lost: %v", err)
	}
	if !res.Duplicate || res.SystemID == "" {
		t.Fatalf("Publish = %+v, want the first publish's result, Duplicate", res)
	}
	if res, err = c.Publish(ctx, "orders.new", []byte("marker"), nil); err != nil || res.Duplicate {
		t.Fatalf("the next Publish: %+v, %v", res, err)
	}
	brokertest.Eventually(t, "two messages", func() bool { return got.len() >= 2 })
	if all := got.all(); all[0] != "once" || all[1] != "marker" {
		t.Fatalf("the subscriber got %q, want [once marker]", all)
	}

	// An id of the application's: the same id twice is one message.
	for range 2 {
		if _, err := c.Publish(ctx, "orders.new", []byte("mine"), nil, client.WithMessageID("order-1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx, "orders.new", []byte("marker2"), nil); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "four messages", func() bool { return got.len() >= 4 })
	if all := got.all(); all[2] != "mine" || all[3] != "marker2" {
		t.Fatalf("the subscriber got %q, want [... mine marker2]", all)
	}
}

// A Publisher whose stream breaks after the broker answered a frame, the answer lost, opens
// a new stream and sends every unconfirmed message again with its id: Flush succeeds, and
// the subscriber gets each message once, in order.
func TestPublisherResendsAfterLostAnswers(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	var streams, answers atomic.Int64
	breakFirst := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if streams.Add(1) > 1 {
			return streamer(ctx, desc, cc, method, opts...)
		}
		sctx, cancel := context.WithCancel(ctx)
		cs, err := streamer(sctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		return &losingStream{ClientStream: cs, cancel: cancel, answers: &answers}, nil
	}
	c, err := client.Dial(ts.Addr, client.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond),
		client.WithDialOptions(grpc.WithStreamInterceptor(breakFirst)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got recorder[string]
	subscribe(t, dial(t, ts.Addr), client.SubscribeOptions{Patterns: []string{"jobs.>"}}, payloadsTo(&got))
	var dups atomic.Int64
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{MaxBatch: 4, OnResult: func(_ string, res client.PublishResult, err error) {
		if res.Duplicate {
			dups.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if err := p.Publish(context.Background(), "jobs.x", []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after the stream broke once: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if streams.Load() < 2 || dups.Load() == 0 {
		t.Fatalf("%d streams, %d duplicates: the test did not lose an answer", streams.Load(), dups.Load())
	}
	brokertest.Eventually(t, "every message", func() bool { return got.len() >= n })
	for i, m := range got.all() {
		if m != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: each message once, in order, was %q", i, m, got.all())
		}
	}
}

// losingStream is a PublishStream whose second answer is lost: the broker handled the frame,
// the client sees the connection break.
type losingStream struct {
	grpc.ClientStream
	cancel  context.CancelFunc
	answers *atomic.Int64
}

func (s *losingStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if s.answers.Add(1) == 2 {
		s.cancel()
		return errLost
	}
	return nil
}
