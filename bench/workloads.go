package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/wire"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// W1: one publisher, 4 fanout subscribers on connections of their own.
func (r *runner) w1(ctx context.Context) ([]metric, error) {
	var conns []*grpc.ClientConn
	defer func() { closeAll(conns) }()
	var sinks []*sink
	defer func() { closeSinks(sinks) }()
	for i := range 4 {
		conn, err := r.dial(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, conn)
		s, err := newSink(ctx, conn, fmt.Sprintf("w1 subscriber %d", i), "bench.w1", nil)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	pub, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	conns = append(conns, pub)
	el, err := r.blastAndWait(ctx, pub, "bench.w1", sinks)
	if err != nil {
		return nil, err
	}
	return []metric{{name: "delivered_msgs_per_s", v: 4 * float64(r.n) / el.Seconds()}, {name: "elapsed_ms", v: ms(el)}}, nil
}

// w2Group is W2's consumer group, used as its subscription_id too. The broker never deletes a
// consumer group, and a group without members still takes (and queues) every message on its
// topic, so a fresh group per repetition would leave the earlier ones filling up on bench.w2
// until they refuse every publish. All repetitions therefore share this group, and each starts
// only once the group is idle: no members, nothing queued or in flight.
const w2Group = "w2"

// w2GroupID is the group W2 uses and w2Topic its topic: w2Group and bench.w2, or with
// -ordering "w2-<ordering>" and bench.w2.<ordering>, so that a run with ordering never shares
// a group (and its settings) or a topic with one without: a group without members still
// queues what its topic gets.
func (r *runner) w2GroupID() string {
	if r.cfg.Ordering == "" || r.cfg.Ordering == "none" {
		return w2Group
	}
	return w2Group + "-" + r.cfg.Ordering
}

func (r *runner) w2Topic() string {
	if r.cfg.Ordering == "" || r.cfg.Ordering == "none" {
		return "bench.w2"
	}
	return "bench.w2." + r.cfg.Ordering
}

// keysLabel labels W2's lines with -keys and -ordering when they are set.
func (r *runner) keysLabel() string {
	var s string
	if r.cfg.Keys > 0 {
		s += " keys=" + strconv.Itoa(r.cfg.Keys)
	}
	if r.cfg.Ordering != "" {
		s += " ordering=" + r.cfg.Ordering
	}
	if r.cfg.TTL > 0 {
		s += " ttl=" + r.cfg.TTL.String()
	}
	return s
}

// W2: one publisher, a consumer group of 4 members (max_in_flight 256 each) that ack every
// message by system_id, one AckBatch frame per received batch.
func (r *runner) w2(ctx context.Context) ([]metric, error) {
	pub, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	conns := []*grpc.ClientConn{pub}
	defer func() { closeAll(conns) }()
	api := pb.NewBrokerClient(pub)
	gid := r.w2GroupID()
	if err := waitGroup(ctx, api, gid, "no members, nothing queued or in flight", func(g *pb.GroupStats) bool {
		return g == nil || g.Members == 0 && g.Queued == 0 && g.InFlight == 0 && g.Delayed == 0
	}); err != nil {
		return nil, err
	}

	var acked atomic.Int64
	var end time.Time
	done := make(chan struct{})
	finish := func(t time.Time) { end = t; close(done) } // called once, by the member that acks the n-th message
	exited := make(chan *member, 4)
	var members []*member
	defer func() {
		for _, m := range members {
			m.cancel()
			<-m.exited
		}
	}()
	for i := range 4 {
		conn, err := r.dial(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, conn)
		stream, cancel, subd, err := subscribe(ctx, conn, &pb.OpenSubscription{
			SubscriptionId: gid, TopicPatterns: []string{r.w2Topic()}, Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED,
			ConsumerGroup: gid, MaxInFlight: 256, Ordering: r.ordering()})
		if err != nil {
			return nil, err
		}
		m := &member{name: fmt.Sprintf("w2 member %d", i), stream: stream, cancel: cancel, exited: make(chan struct{})}
		members = append(members, m)
		if subd.GetMaxInFlight() != 256 {
			return nil, fmt.Errorf("%s: the broker granted max_in_flight %d, not 256", m.name, subd.GetMaxInFlight())
		}
		if subd.GetOrdering() != r.ordering() {
			return nil, fmt.Errorf("%s: the group has ordering %s, not %s", m.name, subd.GetOrdering(), r.ordering())
		}
		go func() {
			m.run(int64(r.n), &acked, finish)
			exited <- m
		}()
	}

	var pp pubProgress
	stop := r.watch(r.w2Topic(), func() string {
		return fmt.Sprintf("%d of %d confirmed (%d refused: group full), %d acked", pp.confirmed.Load(), r.n, pp.refused.Load(), acked.Load())
	})
	start, err := r.blast(ctx, pub, r.w2Topic(), r.n, &pp)
	stop()
	if err != nil {
		return nil, err
	}
	select {
	case <-done:
	case m := <-exited:
		return nil, fmt.Errorf("%s: stream ended with %d of %d acked: %w", m.name, acked.Load(), r.n, m.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w with %d of %d acked", ctx.Err(), acked.Load(), r.n)
	}
	el := end.Sub(start)

	// The members keep acking whatever else comes (redeliveries) until the broker has
	// applied every ack; only then may they leave, or it would redeliver their last messages.
	if err := waitGroup(ctx, api, gid, "nothing queued or in flight", func(g *pb.GroupStats) bool {
		return g != nil && g.Queued == 0 && g.InFlight == 0 && g.Delayed == 0
	}); err != nil {
		return nil, err
	}
	var all []delivery
	for _, m := range members {
		m.cancel()
		<-m.exited
		all = append(all, m.seen...)
	}
	members = nil
	if err := waitGroup(ctx, api, gid, "no members", func(g *pb.GroupStats) bool { return g.GetMembers() == 0 }); err != nil {
		return nil, err
	}
	// A delivery is a redelivery if its attempt is over 1 or its system_id came before.
	slices.SortFunc(all, func(a, b delivery) int { return cmp.Compare(a.id, b.id) })
	redelivered, distinct := 0, 0
	for i, d := range all {
		dup := i > 0 && all[i-1].id == d.id
		if !dup {
			distinct++
		}
		if dup || d.attempt > 1 {
			redelivered++
		}
	}
	if distinct != r.n {
		return nil, fmt.Errorf("%d distinct messages delivered, want %d", distinct, r.n)
	}
	return []metric{{name: "acked_msgs_per_s", v: float64(r.n) / el.Seconds()}, {name: "elapsed_ms", v: ms(el)},
		{name: "redelivered", v: float64(redelivered), sum: true},
		{name: "publish_retries", v: float64(pp.refused.Load()), sum: true}}, nil
}

type delivery struct {
	id      string
	attempt uint32
}

// member is one member of W2's consumer group on a stream (and connection) of its own.
type member struct {
	name   string
	stream grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel context.CancelFunc
	seen   []delivery    // every delivery; read once exited is closed
	exited chan struct{} // err says why run returned
	err    error
}

// run acks every received batch with one AckBatch frame and calls finish when acked reaches n.
// It decodes frames as the Go client does (internal/wire), like the sinks of W1.
func (m *member) run(n int64, acked *atomic.Int64, finish func(time.Time)) {
	defer close(m.exited)
	var ids []string
	m.err = receiveBatches(m.stream, func(msgs []wire.Delivery) error {
		if len(msgs) == 0 {
			return nil
		}
		ids = ids[:0]
		for i := range msgs {
			ids = append(ids, msgs[i].SystemID)
			m.seen = append(m.seen, delivery{msgs[i].SystemID, msgs[i].Attempt})
		}
		// Send encodes the frame before it returns, so ids can be reused.
		if err := m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids}}}); err != nil {
			return fmt.Errorf("send acks: %w", err)
		}
		now := time.Now()
		if a := acked.Add(int64(len(ids))); a >= n && a-int64(len(ids)) < n {
			finish(now)
		}
		return nil
	})
}

// waitGroup polls the broker's stats until cond holds for the consumer group id (nil if the
// broker has none yet).
func waitGroup(ctx context.Context, api pb.BrokerClient, id, what string, cond func(*pb.GroupStats) bool) error {
	for {
		st, err := api.Stats(ctx, &pb.StatsRequest{})
		if err != nil {
			return fmt.Errorf("waiting for consumer group %q (%s): stats: %w", id, what, err)
		}
		var g *pb.GroupStats
		for _, x := range st.GetGroups() {
			if x.GetSubscriptionId() == id {
				g = x
			}
		}
		if cond(g) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for consumer group %q (%s): %w; it has %d members, %d queued, %d in flight, %d delayed",
				id, what, ctx.Err(), g.GetMembers(), g.GetQueued(), g.GetInFlight(), g.GetDelayed())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// W3: a publisher paced at Rate, one fanout subscriber; latency from the send time in payload
// bytes 0-7 to receipt. How the publisher sends is W3Publish (see Config); by default each
// message goes out in a PublishStream frame of its own as soon as it is stamped.
func (r *runner) w3(ctx context.Context) ([]metric, error) {
	subConn, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer subConn.Close()

	// lat is send -> receipt; in and out split it at the broker's publish_time_unix_nano
	// (send -> accepted by the broker, accepted -> receipt): client and broker share a clock.
	lat, in, out := make([]int64, 0, r.n), make([]int64, 0, r.n), make([]int64, 0, r.n)
	short := 0
	s, err := newSink(ctx, subConn, "w3 subscriber", "bench.w3", func(msgs []wire.Delivery, now time.Time) {
		for _, m := range msgs {
			if len(m.Payload) < 8 {
				short++
				continue
			}
			sent, accepted := int64(binary.LittleEndian.Uint64(m.Payload)), m.PublishTimeUnixNano
			lat = append(lat, now.UnixNano()-sent)
			in = append(in, accepted-sent)
			out = append(out, now.UnixNano()-accepted)
		}
	})
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.arm(r.n)

	pub, err := r.w3Publisher(ctx)
	if err != nil {
		return nil, err
	}
	defer pub.close()
	interval := time.Second / time.Duration(r.cfg.Rate)
	start := time.Now()
	for i := range r.n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 { // Go sleeps >= ~1 ms here, so sends come in bursts
			time.Sleep(d)
		}
		buf := pub.buffer()
		binary.LittleEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
		if err := pub.publish(buf); err != nil {
			return nil, err
		}
	}
	sent := time.Since(start)
	if err := pub.finish(); err != nil {
		return nil, err
	}
	if _, err := s.wait(ctx); err != nil {
		return nil, err
	}
	if short > 0 {
		return nil, fmt.Errorf("%d messages arrived with payloads under 8 bytes", short)
	}
	for _, l := range [][]int64{lat, in, out} {
		slices.Sort(l)
	}
	pct := func(l []int64, q float64) float64 { return float64(l[int(math.Ceil(q*float64(len(l))))-1]) / 1e3 }
	return []metric{{name: "p50_us", v: pct(lat, 0.50)}, {name: "p99_us", v: pct(lat, 0.99)}, {name: "p999_us", v: pct(lat, 0.999)},
		{name: "sent_msgs_per_s", v: float64(r.n) / sent.Seconds()},
		{name: "p99_to_broker_us", v: pct(in, 0.99)}, {name: "p99_from_broker_us", v: pct(out, 0.99)}}, nil
}

// w3Pub is W3's publisher: buffer returns a payload to stamp, publish sends it, finish waits
// until everything published is confirmed, close releases what is left.
type w3Pub struct {
	buffer  func() []byte
	publish func([]byte) error
	finish  func() error
	close   func()
}

func (r *runner) w3Publisher(ctx context.Context) (*w3Pub, error) {
	const topic = "bench.w3"
	if r.cfg.W3Publish == "sdk" {
		c, err := client.Dial(r.addr, client.WithDialOptions(r.cfg.DialOptions...))
		if err != nil {
			return nil, err
		}
		p, err := c.NewPublisher(ctx, client.PublisherOptions{ErrorsOnly: true}) // as NATS core publishes: no confirmations
		if err != nil {
			c.Close()
			return nil, err
		}
		return &w3Pub{
			buffer:  func() []byte { return slices.Clone(r.payload) }, // the Publisher keeps it until confirmed
			publish: func(b []byte) error { return p.Publish(ctx, topic, b, nil) },
			finish:  func() error { return p.Flush(ctx) },
			close:   func() { p.Close(); c.Close() },
		}, nil
	}
	conn, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	api := pb.NewBrokerClient(conn)
	buf := slices.Clone(r.payload)
	if r.cfg.W3Publish == "unary" {
		req := &pb.PublishRequest{Topic: topic, Payload: buf}
		return &w3Pub{
			buffer: func() []byte { return buf },
			publish: func([]byte) error {
				if _, err := api.Publish(ctx, req); err != nil {
					return fmt.Errorf("publish to %s: %w", topic, err)
				}
				return nil
			},
			finish: func() error { return nil },
			close:  func() { conn.Close() },
		}, nil
	}

	sctx, cancel := context.WithCancel(ctx)
	stream, err := api.PublishStream(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("open publish stream: %w", err)
	}
	// By default frames are errors_only, answered only if a message fails, as NATS core
	// publishes without confirmations; finish sends a plain empty frame, whose answer confirms
	// the rest. "frame-ack" has every frame answered.
	errorsOnly := r.cfg.W3Publish != "frame-ack"
	var flushSeq atomic.Uint64 // the sequence of the flush frame, once sent
	confirmed := make(chan error, 1)
	go func() {
		for i := 0; errorsOnly || i < r.n; {
			resp, err := stream.Recv()
			if err != nil {
				confirmed <- fmt.Errorf("publish stream: %w (%d of %d confirmed)", err, i, r.n)
				return
			}
			for _, res := range resp.GetResults() {
				if c := codes.Code(res.GetCode()); c != codes.OK {
					confirmed <- fmt.Errorf("publish to %s refused: %s: %s", topic, c, res.GetError())
					return
				}
				i++
			}
			if errorsOnly && resp.GetSequence() != 0 && resp.GetSequence() == flushSeq.Load() {
				break
			}
		}
		confirmed <- nil
	}()
	result := sync.OnceValue(func() error { return <-confirmed })
	frame := &pb.PublishStreamRequest{Messages: []*pb.PublishRequest{{Topic: topic, Payload: buf}}, ErrorsOnly: errorsOnly}
	return &w3Pub{
		buffer: func() []byte { return buf }, // Send encodes the frame before it returns
		publish: func([]byte) error {
			frame.Sequence++
			if err := stream.Send(frame); err != nil {
				cancel()
				return result() // Recv has the stream's status
			}
			return nil
		},
		finish: func() error {
			if errorsOnly {
				flushSeq.Store(frame.Sequence + 1)
				if err := stream.Send(&pb.PublishStreamRequest{Sequence: frame.Sequence + 1}); err != nil {
					cancel()
					return result()
				}
			}
			if err := result(); err != nil {
				return err
			}
			if err := stream.CloseSend(); err == nil {
				if _, err := stream.Recv(); err != io.EOF {
					return fmt.Errorf("publish stream did not end cleanly: %v", err)
				}
			}
			return nil
		},
		close: func() {
			cancel()
			_ = result()
			conn.Close()
		},
	}, nil
}

// w5Matching are the W5 patterns that match bench.w5.match; every other subscription matches
// nothing published.
var w5Matching = []string{"bench.w5.match", "bench.*.match", "bench.>", "bench.w5.>"}

// W5: for each subscription count, subscriptions with mixed patterns over 8 connections, of
// which the 4 in w5Matching match; publish -> delivery throughput and the broker's RSS.
func (r *runner) w5() error {
	for _, k := range r.cfg.SubCounts {
		if err := r.w5subs(k); err != nil {
			return fmt.Errorf("subs=%d: %w", k, err)
		}
	}
	return nil
}

// w5OpenIdle opens subscriptions j, j+stride, ... below n on one stream of conn and waits for
// every answer. The stream stays open until ctx is done.
func w5OpenIdle(ctx context.Context, conn *grpc.ClientConn, j, stride, n int, opened *atomic.Int64) error {
	stream, err := pb.NewBrokerClient(conn).Subscribe(ctx)
	if err != nil {
		return err
	}
	want := 0
	for i := j; i < n; i += stride {
		pattern := fmt.Sprintf([...]string{"s.%d.x", "s.*.y%d", "t.%d.>"}[i%3], i)
		err := stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{
			TopicPatterns: []string{pattern}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}}})
		if err != nil {
			break // Recv has the status
		}
		want++
	}
	for range want {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("W5 subscribing: %w", err)
		}
		if r := resp.GetRefused(); r != nil {
			return fmt.Errorf("W5 subscription %q refused: %s", r.GetSubscriptionId(), r.GetError())
		}
		if resp.GetSubscribed() == nil {
			return fmt.Errorf("W5 subscribing: got %v, want subscribed", resp)
		}
		opened.Add(1)
	}
	return nil
}

func (r *runner) w5subs(k int) error {
	ctx, cancel := context.WithCancel(r.ctx) // the subscriptions' lifetime
	defer cancel()
	var conns []*grpc.ClientConn
	defer func() { closeAll(conns) }()
	for range 9 {
		conn, err := r.dial(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, conn)
	}
	subConns, pub := conns[:8], conns[8]
	rss0, err := r.serverRSS() // connections open: the growth is the subscriptions'
	if err != nil {
		return err
	}

	timedOut := time.AfterFunc(r.cfg.Timeout, cancel)
	t0 := time.Now()
	var opened atomic.Int64
	stop := r.watch(fmt.Sprintf("W5 subs=%d setup", k), func() string {
		return fmt.Sprintf("%d of %d subscribed", opened.Load(), k)
	})
	// The subscriptions that match nothing share 8 streams, as the NATS peer's share 8
	// connections: each stream pipelines its opens and counts the answers.
	idle := k - len(w5Matching)
	var wg sync.WaitGroup
	errs := make([]error, len(subConns))
	for j, conn := range subConns {
		wg.Go(func() {
			errs[j] = w5OpenIdle(ctx, conn, j, len(subConns), idle, &opened)
		})
	}
	wg.Wait()
	var sinks []*sink
	defer func() { closeSinks(sinks) }()
	if err := errors.Join(errs...); err == nil {
		for j, pattern := range w5Matching {
			s, err := newSink(ctx, subConns[j], "w5 subscriber "+pattern, pattern, nil)
			if err != nil {
				errs[0] = err
				break
			}
			sinks = append(sinks, s)
			opened.Add(1)
		}
	}
	setup := time.Since(t0)
	rss1, err := r.endSetup(stop, timedOut, opened.Load(), k, errs)
	if err != nil {
		return err
	}
	return r.repeat(fmt.Sprintf("W5 tinybroker subs=%d", k), func(ctx context.Context) ([]metric, error) {
		el, err := r.blastAndWait(ctx, pub, "bench.w5.match", sinks)
		if err != nil {
			return nil, err
		}
		m := []metric{{name: "msgs_per_s", v: float64(r.n) / el.Seconds()}, {name: "sub_setup_ms", v: ms(setup)}}
		if r.cfg.ServerPID != 0 {
			m = append(m, metric{name: "server_rss_kb", v: rss1}, metric{name: "rss_per_sub_b", v: (rss1 - rss0) * 1024 / float64(k)})
		}
		return m, nil
	})
}
