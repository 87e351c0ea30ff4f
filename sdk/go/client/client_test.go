package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

func TestPublishUnary(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	ctx := context.Background()

	res, err := c.Publish(ctx, "orders.created", []byte("nobody listens"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.SystemID == "" || res.Routed != 0 {
		t.Fatalf("Publish with no subscription = %+v, want a system id and Routed 0", res)
	}

	var got recorder[*client.Message]
	subscribe(t, c, client.SubscribeOptions{Patterns: []string{"orders.>"}}, func(_ context.Context, m *client.Message) error {
		got.add(m)
		return nil
	})
	before := time.Now()
	res, err = c.Publish(ctx, "orders.created", []byte("hello"), map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Routed != 1 {
		t.Fatalf("Routed = %d, want 1", res.Routed)
	}
	brokertest.Eventually(t, "the message", func() bool { return got.len() == 1 })
	m := got.all()[0]
	if m.SystemID != res.SystemID || m.Topic != "orders.created" || string(m.Payload) != "hello" ||
		m.Headers.Get("k") != "v" || m.Attempt != 1 || m.Redelivered {
		t.Fatalf("got %+v, want the published message (system id %s)", m, res.SystemID)
	}
	if v, ok := m.Headers.Lookup("k"); !ok || v != "v" {
		t.Errorf("Headers.Lookup(k) = %q, %v", v, ok)
	}
	if _, ok := m.Headers.Lookup("absent"); ok {
		t.Error("Headers.Lookup found a header that was not sent")
	}
	if h := m.Headers.Map(); len(h) != 1 || h["k"] != "v" {
		t.Errorf("Headers.Map() = %v, want map[k:v]", h)
	}
	if h := (client.Headers{}).Map(); h != nil {
		t.Errorf("zero Headers.Map() = %v, want nil", h)
	}
	if m.PublishedAt.Before(before.Add(-time.Minute)) || m.PublishedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("PublishedAt = %v, want about %v", m.PublishedAt, before)
	}

	_, err = c.Publish(ctx, "bad topic", nil, nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bad topic") {
		t.Fatalf("Publish to an invalid topic: %v, want InvalidArgument naming the topic", err)
	}
}

func TestPublishUnreachable(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	addr := ts.Addr
	ts.Stop()
	c := dial(t, addr)
	_, err := c.Publish(context.Background(), "a.b", nil, nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Publish to a stopped broker: %v, want Unavailable mentioning %s", err, addr)
	}
	_, err = c.Subscribe(context.Background(), client.SubscribeOptions{Patterns: []string{"a.>"}}, func(context.Context, *client.Message) error { return nil })
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Subscribe to a stopped broker: %v, want Unavailable", err)
	}
}

func TestPublisherInOrder(t *testing.T) {
	const n = 10_000
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var got recorder[string]
	subscribe(t, c, client.SubscribeOptions{Patterns: []string{"seq.*"}}, payloadsTo(&got))

	var confirmed, routed atomic.Int64
	var lastID atomic.Value
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{MaxPending: 256, MaxBatch: 64,
		OnResult: func(topic string, res client.PublishResult, err error) {
			if err == nil {
				confirmed.Add(1)
				routed.Add(int64(res.Routed))
				lastID.Store(res.SystemID)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := p.Publish(context.Background(), "seq."+strconv.Itoa(i%7), []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.Patience)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if confirmed.Load() != n || routed.Load() != n {
		t.Fatalf("after Flush: %d confirmed, %d routed; want %d each", confirmed.Load(), routed.Load(), n)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Publish(context.Background(), "seq.1", nil, nil); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}

	brokertest.Eventually(t, fmt.Sprintf("%d messages", n), func() bool { return got.len() >= n })
	for i, v := range got.all() {
		if v != strconv.Itoa(i) {
			t.Fatalf("message %d has payload %q, want %d: out of order or lost (got %d messages)", i, v, i, got.len())
		}
	}
	if got.len() != n {
		t.Fatalf("got %d messages, want %d", got.len(), n)
	}
}

func TestPublisherReportsFailures(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var results recorder[string]
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{
		OnResult: func(topic string, res client.PublishResult, err error) {
			results.add(fmt.Sprintf("%s %v", topic, status.Code(err)))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for _, topic := range []string{"ok.1", "bad topic", "ok.2", "ok.>"} {
		if err := p.Publish(ctx, topic, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	err = p.Flush(ctx)
	var pe *client.PublishError
	if !errors.As(err, &pe) || pe.Failed != 2 || pe.Topic != "bad topic" || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Flush = %v, want a PublishError with 2 failures, the first to \"bad topic\", InvalidArgument", err)
	}
	want := "ok.1 OK,bad topic InvalidArgument,ok.2 OK,ok.> InvalidArgument"
	if got := strings.Join(results.all(), ","); got != want {
		t.Fatalf("results %q, want %q", got, want)
	}
	if err := p.Publish(ctx, "ok.3", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("second Flush = %v, want nil: failures are reported once", err)
	}
}

// With ErrorsOnly the broker answers only frames with a failure: failures are still reported,
// in order, and the rest are confirmed in bulk, by the frame the Publisher sends every
// MaxPending/2 messages (a small window must not stall), by Flush and by Close.
func TestPublisherErrorsOnly(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var got recorder[string]
	subscribe(t, c, client.SubscribeOptions{Patterns: []string{"eo.*"}}, payloadsTo(&got))
	var results recorder[string]
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{ErrorsOnly: true, MaxPending: 8, MaxBatch: 2,
		OnResult: func(topic string, res client.PublishResult, err error) {
			results.add(fmt.Sprintf("%s %v", topic, status.Code(err)))
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.Patience)
	defer cancel()
	const n = 500 // far more than MaxPending: Publish blocks unless quiet frames get confirmed
	for i := range n {
		topic := "eo.ok"
		if i == 100 {
			topic = "eo.*" // refused
		}
		if err := p.Publish(ctx, topic, []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
	}
	err = p.Flush(ctx)
	var pe *client.PublishError
	if !errors.As(err, &pe) || pe.Failed != 1 || pe.Topic != "eo.*" {
		t.Fatalf("Flush = %v, want one failure, to eo.*", err)
	}
	rs := results.all()
	if len(rs) != n || rs[100] != "eo.* InvalidArgument" || rs[99] != "eo.ok OK" || rs[n-1] != "eo.ok OK" {
		t.Fatalf("%d results (want %d), [99..100] %q, last %q", len(rs), n, rs[99:101], rs[len(rs)-1])
	}
	// A message already sent in a quiet frame: Flush confirms it with an empty frame.
	if err := p.Publish(ctx, "eo.ok", []byte("sent"), nil); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the sent message", func() bool { return got.len() >= n })
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush after a quiet frame = %v", err)
	}
	if rs := results.all(); len(rs) != n+1 {
		t.Fatalf("after the second Flush: %d results, want %d", len(rs), n+1)
	}
	if err := p.Publish(ctx, "eo.ok", []byte("last"), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil { // confirms the last quiet frame by the stream's clean end
		t.Fatalf("Close = %v", err)
	}
	if rs := results.all(); len(rs) != n+2 || rs[n+1] != "eo.ok OK" {
		t.Fatalf("after Close: %d results, last %q; want %d, eo.ok OK", len(rs), rs[len(rs)-1], n+2)
	}
	brokertest.Eventually(t, "every published message", func() bool { return got.len() >= n+1 })
	if got.len() != n+1 { // n-1 published, "sent" and "last"
		t.Fatalf("subscriber got %d messages, want %d", got.len(), n+1)
	}
}

func TestPublisherStreamBreaks(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(context.Background(), "a.b", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts.Stop()
	brokertest.Eventually(t, "Publish to fail after the broker stopped", func() bool {
		return p.Publish(context.Background(), "a.b", nil, nil) != nil
	})
	if err := p.Flush(context.Background()); err == nil {
		t.Fatal("Flush after the stream broke = nil, want an error")
	}
}

func TestBalancedExactlyOnce(t *testing.T) {
	const n, members = 300, 3
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)

	var mu sync.Mutex
	seen := map[string]int{} // payload → times handled
	byMember := map[int]int{}
	for i := range members {
		subscribe(t, c, client.SubscribeOptions{ID: "thumbs", Group: "resizers", Mode: client.Balanced,
			Patterns: []string{"jobs.thumb.*"}, Concurrency: 4},
			func(_ context.Context, m *client.Message) error {
				mu.Lock()
				seen[string(m.Payload)]++
				byMember[i]++
				mu.Unlock()
				return nil
			})
	}
	if g := ts.Group("thumbs"); g.Members != members {
		t.Fatalf("group has %d members, want %d", g.Members, members)
	}
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := p.Publish(context.Background(), fmt.Sprintf("jobs.thumb.%d", i), []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "every message acked", func() bool {
		g := ts.Group("thumbs")
		return g.Acked == n && g.InFlight == 0 && g.Queued == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Errorf("message %d handled %d times, want exactly once", i, k)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct messages handled, want %d", len(seen), n)
	}
	if len(byMember) < 2 {
		t.Errorf("messages by member %v: want the group's members to share the work", byMember)
	}
	if g := ts.Group("thumbs"); g.Redelivered != 0 {
		t.Errorf("%d redeliveries, want none", g.Redelivered)
	}
}

func TestConcurrencyRunsHandlersInParallel(t *testing.T) {
	const workers = 4
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var running atomic.Int32
	all := make(chan struct{})
	var handled recorder[string]
	subscribe(t, c, client.SubscribeOptions{Group: "par", Mode: client.Balanced, Patterns: []string{"par.*"}, Concurrency: workers},
		func(ctx context.Context, m *client.Message) error {
			if running.Add(1) == workers {
				close(all)
			}
			select { // only a subscription with 4 handlers running at once gets past this
			case <-all:
			case <-time.After(brokertest.Patience):
				return errors.New("the other handlers never ran concurrently")
			}
			handled.add(m.Topic)
			return nil
		})
	for i := range workers {
		if _, err := c.Publish(context.Background(), fmt.Sprintf("par.%d", i), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, "4 messages handled together", func() bool { return handled.len() == workers })
	brokertest.Eventually(t, "acks", func() bool { return ts.Group("par").Acked == workers })
}

func TestHandlerErrorRedelivers(t *testing.T) {
	const nackDelay = 50 * time.Millisecond
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	type seen struct {
		attempt     int
		redelivered bool
		at          time.Time
	}
	var got recorder[seen]
	subscribe(t, c, client.SubscribeOptions{Group: "flaky", Mode: client.Balanced, Patterns: []string{"work.*"}, NackDelay: nackDelay},
		func(_ context.Context, m *client.Message) error {
			got.add(seen{m.Attempt, m.Redelivered, time.Now()})
			if m.Attempt == 1 {
				return errors.New("transient failure")
			}
			return nil
		})
	if _, err := c.Publish(context.Background(), "work.1", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the redelivery to be acked", func() bool { return ts.Group("flaky").Acked == 1 })
	s := got.all()
	if len(s) != 2 || s[0].attempt != 1 || s[0].redelivered || s[1].attempt != 2 || !s[1].redelivered {
		t.Fatalf("deliveries %+v, want attempt 1 then attempt 2 (redelivered)", s)
	}
	if gap := s[1].at.Sub(s[0].at); gap < nackDelay {
		t.Errorf("redelivered %v after the failure, want at least the NackDelay %v", gap, nackDelay)
	}
	if g := ts.Group("flaky"); g.Redelivered != 1 || g.InFlight != 0 {
		t.Errorf("group stats %+v, want 1 redelivery and nothing in flight", g)
	}
}

func TestManualAck(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	msgs := make(chan *client.Message, 10)
	subscribe(t, c, client.SubscribeOptions{ID: "manual", Group: "manual", Mode: client.Balanced, Patterns: []string{"m.*"},
		ManualAck: true, MaxInFlight: 1},
		func(_ context.Context, m *client.Message) error {
			msgs <- m
			return errors.New("ignored with ManualAck")
		})
	next := func() *client.Message {
		t.Helper()
		return brokertest.Receive(t, msgs, "a message")
	}
	for _, topic := range []string{"m.1", "m.2"} {
		if _, err := c.Publish(context.Background(), topic, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	m1 := next()
	if m1.Topic != "m.1" {
		t.Fatalf("first message %s, want m.1", m1.Topic)
	}
	brokertest.Eventually(t, "m.1 in flight and m.2 queued", func() bool {
		g := ts.Group("manual")
		return g.InFlight == 1 && g.Queued == 1
	})
	if len(msgs) != 0 {
		t.Fatal("a second message arrived before the first was acked, with MaxInFlight 1")
	}
	if err := m1.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := m1.Ack(); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("second Ack = %v, want ErrAlreadySettled", err)
	}
	m2 := next()
	if m2.Topic != "m.2" || m2.Attempt != 1 {
		t.Fatalf("got %s attempt %d, want m.2 attempt 1", m2.Topic, m2.Attempt)
	}
	if err := m2.Nack(0); err != nil {
		t.Fatal(err)
	}
	again := next()
	if again.SystemID != m2.SystemID || again.Attempt != 2 || !again.Redelivered {
		t.Fatalf("after Nack got %s attempt %d, want %s attempt 2", again.SystemID, again.Attempt, m2.SystemID)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "both acked", func() bool {
		g := ts.Group("manual")
		return g.Acked == 2 && g.InFlight == 0 && g.Queued == 0
	})
}

func TestCloseSendsLastAcks(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	handled := make(chan struct{})
	s, err := c.Subscribe(context.Background(), client.SubscribeOptions{Group: "closer", Mode: client.Balanced, Patterns: []string{"c.*"}},
		func(context.Context, *client.Message) error {
			close(handled)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), "c.1", nil, nil); err != nil {
		t.Fatal(err)
	}
	<-handled
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if g := ts.Group("closer"); g.Acked != 1 || g.InFlight != 0 || g.Queued != 0 {
		t.Fatalf("after Close: group %+v, want the message acked", g)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
}

func TestCloseHandsBackInFlight(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	opts := client.SubscribeOptions{ID: "handoff", Group: "handoff", Mode: client.Balanced, Patterns: []string{"h.*"}}
	started := make(chan struct{})
	a, err := c.Subscribe(context.Background(), opts, func(ctx context.Context, m *client.Message) error {
		close(started)
		<-ctx.Done() // a long job, interrupted by Close
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), "h.1", nil, nil); err != nil {
		t.Fatal(err)
	}
	<-started
	var got recorder[int]
	subscribe(t, c, opts, func(_ context.Context, m *client.Message) error {
		got.add(m.Attempt)
		return nil
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the other member to get the message", func() bool { return got.len() == 1 })
	if at := got.all()[0]; at != 2 {
		t.Errorf("attempt %d, want 2", at)
	}
}

// TestCloseNacksAFailedHandler: a handler that fails for a reason of its own while the
// subscription closes gets its message nacked with that reason (here: dead-lettered with it,
// MaxDeliveries 1), not handed back as if the member had merely left.
func TestCloseNacksAFailedHandler(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	dead := make(chan *client.Message, 1)
	subscribe(t, c, client.SubscribeOptions{Patterns: []string{"dlq.failing"}}, func(_ context.Context, m *client.Message) error {
		dead <- m
		return nil
	})
	started := make(chan struct{})
	s, err := c.Subscribe(context.Background(), client.SubscribeOptions{ID: "failing", Group: "failing", Mode: client.Balanced,
		Patterns: []string{"f.*"}, MaxDeliveries: 1, DeadLetterTopic: "dlq.failing"},
		func(ctx context.Context, m *client.Message) error {
			close(started)
			<-ctx.Done() // the handler is still working when Close is called
			return errors.New("bad payload")
		})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), "f.1", nil, nil); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := brokertest.Receive(t, dead, "the dead letter")
	if why := m.Headers.Get(deadletter.HeaderReason); !strings.Contains(why, "bad payload") {
		t.Fatalf("dead-letter reason %q, want the handler's error", why)
	}
}

func TestReconnect(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var fan, bal recorder[string]
	fs := subscribe(t, c, client.SubscribeOptions{ID: "watcher", Patterns: []string{"r.*"}}, payloadsTo(&fan))
	bs := subscribe(t, c, client.SubscribeOptions{Group: "rg", Mode: client.Balanced, Patterns: []string{"r.*"}}, payloadsTo(&bal))
	if _, err := c.Publish(context.Background(), "r.1", []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "the first message", func() bool { return fan.len() == 1 && bal.len() == 1 })
	brokertest.Eventually(t, "the first ack", func() bool { return ts.Group("rg").Acked == 1 })

	ts.Stop()
	ts2 := servertest.Start(t, servertest.Options{Addr: ts.Addr})
	brokertest.Eventually(t, "both subscriptions back", func() bool {
		res, err := c.Publish(context.Background(), "r.2", []byte("after"), nil)
		return err == nil && res.Routed == 2
	})
	brokertest.Eventually(t, "the message published after the restart", func() bool {
		f, b := fan.all(), bal.all()
		return f[len(f)-1] == "after" && b[len(b)-1] == "after"
	})
	brokertest.Eventually(t, "its ack, on the new stream", func() bool {
		g := ts2.Group("rg")
		return g.Acked >= 1 && g.InFlight == 0 && g.Queued == 0
	})
	if fs.Err() != nil || bs.Err() != nil {
		t.Fatalf("Err() = %v, %v after a reconnect, want nil", fs.Err(), bs.Err())
	}
	if id := fs.Settings().ID; id != "watcher" {
		t.Errorf("fanout id after reconnect %q, want watcher", id)
	}
}

func TestSubscribeErrors(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	h := func(context.Context, *client.Message) error { return nil }

	_, err := c.Subscribe(context.Background(), client.SubscribeOptions{Patterns: []string{"jobs.>.thumb"}}, h)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "jobs.>.thumb") {
		t.Fatalf("bad pattern: %v, want InvalidArgument naming the pattern", err)
	}
	_, err = c.Subscribe(context.Background(), client.SubscribeOptions{Group: "g", Patterns: []string{"a.*"}}, h)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("fanout with a group: %v, want InvalidArgument", err)
	}
	subscribe(t, c, client.SubscribeOptions{Group: "g", Mode: client.Balanced, Patterns: []string{"a.*"}}, h)
	_, err = c.Subscribe(context.Background(), client.SubscribeOptions{Group: "g", Mode: client.Balanced, Patterns: []string{"b.*"}}, h)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("member with other patterns: %v, want FailedPrecondition", err)
	}
	_, err = c.Subscribe(context.Background(), client.SubscribeOptions{Patterns: []string{"a.*"}, MaxInFlight: 3}, h)
	if err == nil || !strings.Contains(err.Error(), "Balanced") {
		t.Fatalf("fanout with MaxInFlight: %v, want an error pointing at Balanced", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Subscribe(ctx, client.SubscribeOptions{Patterns: []string{"a.*"}}, h); err == nil {
		t.Fatal("Subscribe with a cancelled context succeeded")
	}
}

func TestContextEndsSubscription(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Subscribe(ctx, client.SubscribeOptions{Patterns: []string{"a.*"}}, func(context.Context, *client.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	brokertest.Receive(t, s.Done(), "the subscription to end after its context was cancelled")
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v after cancel, want nil", err)
	}
	brokertest.Eventually(t, "the broker to drop the subscription", func() bool { return len(ts.Engine.Stats().Subscriptions) == 0 })
}

func TestSlowFanoutConsumerEnds(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{Options: brokertest.Options{FanoutBufferMessages: 8}})
	c := dial(t, ts.Addr)
	release := make(chan struct{})
	s, err := c.Subscribe(context.Background(), client.SubscribeOptions{Patterns: []string{"firehose"}}, func(context.Context, *client.Message) error {
		<-release // a consumer that cannot keep up
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 16<<10)
	for range 200 { // far more than the buffer and gRPC's flow-control windows hold
		if _, err := c.Publish(context.Background(), "firehose", payload, nil); err != nil {
			t.Fatal(err)
		}
		if len(ts.Engine.Stats().Subscriptions) == 0 {
			break
		}
	}
	close(release)
	brokertest.Receive(t, s.Done(), "the slow subscription to end")
	if err := s.Err(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Err() = %v, want ResourceExhausted (no reconnect for a slow consumer)", err)
	}
	if err := s.Close(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Close() = %v, want Err()", err)
	}
}

// Frames stay under the broker's receive limit when the messages' weight is in their
// headers: the publisher counts headers and topics, not payloads alone.
func TestPublisherHeaderHeavyFrames(t *testing.T) {
	const n = 300
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var confirmed, failed atomic.Int64
	p, err := c.NewPublisher(context.Background(), client.PublisherOptions{
		OnResult: func(_ string, _ client.PublishResult, err error) {
			if err != nil {
				failed.Add(1)
			} else {
				confirmed.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{"blob": strings.Repeat("h", 32<<10)}
	for range n {
		if err := p.Publish(context.Background(), "heavy", nil, h); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.Patience)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if confirmed.Load() != n || failed.Load() != 0 {
		t.Fatalf("%d confirmed, %d failed; want %d confirmed", confirmed.Load(), failed.Load(), n)
	}
}

// TestFailover dials two brokers as one cluster: the client uses the first, and when it
// stops, publishes and subscriptions go on through the second.
func TestFailover(t *testing.T) {
	a := servertest.Start(t, servertest.Options{})
	b := servertest.Start(t, servertest.Options{})
	c := dial(t, a.Addr+", "+b.Addr)
	var got recorder[string]
	subscribe(t, c, client.SubscribeOptions{ID: "watcher", Patterns: []string{"f.*"}}, payloadsTo(&got))
	if res, err := c.Publish(context.Background(), "f.1", []byte("on a"), nil); err != nil || res.Routed != 1 {
		t.Fatalf("Publish before the failover = %+v, %v, want routed to the subscription", res, err)
	}
	if pa, pb := a.Engine.Stats().Published, b.Engine.Stats().Published; pa != 1 || pb != 0 {
		t.Fatalf("published on a, b = %d, %d, want 1, 0: the first node listed is used first", pa, pb)
	}

	a.Stop()
	brokertest.Eventually(t, "the subscription re-opened on b", func() bool {
		res, err := c.Publish(context.Background(), "f.2", []byte("on b"), nil)
		return err == nil && res.Routed == 1
	})
	brokertest.Eventually(t, "the message published through b", func() bool {
		l := got.all()
		return l[len(l)-1] == "on b"
	})
	if pb := b.Engine.Stats().Published; pb == 0 {
		t.Fatal("nothing published on b after a stopped")
	}
}

func TestDialAddressList(t *testing.T) {
	for _, addr := range []string{",", " , ", "127.0.0.1:1,nohost", "127.0.0.1:1,,[::1"} {
		c, err := client.Dial(addr)
		if err == nil {
			c.Close()
			t.Errorf("Dial(%q) = nil error, want one saying what is wrong", addr)
			continue
		}
		if !strings.Contains(err.Error(), "host:port") {
			t.Errorf("Dial(%q) = %v, want it to say the form host:port", addr, err)
		}
	}
}
