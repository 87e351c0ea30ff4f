package bench

import (
	"cmp"
	"context"
	"encoding/binary"
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
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/wire"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// W7: one flooding tenant among quiet ones, in one balanced group. W7Quiet quiet keys
// (quiet-0 ...) publish W7Rate messages a second each, paced, the send time in payload bytes
// 0-7; one key (flood) publishes as fast as it can (or at W7FloodRate), more than the group's
// members take: W7Members members hold up to W7InFlight messages each and ack each W7Work
// after receiving it. Each repetition runs three phases of Duration, each on a group and
// topic of its own: alone (the quiet keys without the flood, fair_by on), fifo (with the
// flood, no fair_by) and fair (with the flood, fair_by FairBy). Figures per phase: the quiet
// keys' p50/p99 from send to receipt by a member, and the flood's deliveries per second.

func (c *Config) w7Defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.W7Quiet, 99)
	def(&c.W7Rate, 10)
	def(&c.W7Members, 4)
	def(&c.W7InFlight, 16)
	if c.W7Work == 0 {
		c.W7Work = 5 * time.Millisecond
	}
	if c.FairBy == "" {
		c.FairBy = "key"
	}
	if _, err := broker.ParseOrdering(c.Ordering); err != nil {
		return fmt.Errorf("-ordering %q: want key, group or none", c.Ordering)
	}
	switch {
	case c.Keys < 0:
		return fmt.Errorf("-keys %d: want 0 (no keys) or more", c.Keys)
	case c.TTL < 0:
		return fmt.Errorf("-ttl %v: want 0 (none) or more", c.TTL)
	case c.FairBy != "key" && c.FairBy != "header:tenant":
		return fmt.Errorf("-fair-by %q: W7 sets a message's key and its tenant header alike: want key or header:tenant", c.FairBy)
	case c.W7Quiet < 1 || c.W7Rate < 1 || c.W7FloodRate < 0 || c.W7Members < 1 || c.W7InFlight < 1 || c.W7Work < 0:
		return fmt.Errorf("W7: quiet %d, rate %d, flood rate %d, members %d, in flight %d, work %v: need positive values (flood rate 0: as fast as it can)",
			c.W7Quiet, c.W7Rate, c.W7FloodRate, c.W7Members, c.W7InFlight, c.W7Work)
	case slices.Contains(c.Workloads, "W7") && c.Size < 16:
		return fmt.Errorf("size %d: W7 payloads need at least 16 bytes (a timestamp and a phase tag)", c.Size)
	}
	return nil
}

// ordering is -ordering as the protocol's enum (checked in w7Defaults).
func (r *runner) ordering() pb.Ordering {
	o, _ := broker.ParseOrdering(r.cfg.Ordering)
	return pb.Ordering(o)
}

// w7Phase is one of a W7 repetition's phases.
type w7Phase struct {
	name   string
	flood  bool
	fairBy string
}

// w7 runs the three phases, each with a warm-up and Reps repetitions, and prints a line of
// the quiet keys' p99 with the flood over their p99 without it, for fifo and fair.
func (r *runner) w7() error {
	phases := []w7Phase{{"alone", false, r.cfg.FairBy}, {"fifo", true, ""}, {"fair", true, r.cfg.FairBy}}
	p99 := map[string]float64{}
	var tag atomic.Uint64
	for _, ph := range phases {
		med, err := r.repeatMedians(fmt.Sprintf("W7 tinybroker phase=%s fair_by=%s", ph.name, cmp.Or(ph.fairBy, "none")), func(ctx context.Context) ([]metric, error) {
			return r.w7rep(ctx, ph, tag.Add(1))
		})
		if err != nil {
			return fmt.Errorf("phase %s: %w", ph.name, err)
		}
		for _, m := range med {
			if m.name == "quiet_p99_us" {
				p99[ph.name] = m.v
			}
		}
	}
	r.result("W7 tinybroker summary", fmt.Sprintf("reps=%d median", r.cfg.Reps), []metric{
		{name: "fifo_p99_ratio", v: p99["fifo"] / p99["alone"]},
		{name: "fair_p99_ratio", v: p99["fair"] / p99["alone"]},
		{name: "target", v: 2}}, jsonLine{Reps: r.cfg.Reps, Median: true})
	return nil
}

// w7Recorder collects what W7's members receive in one phase run.
type w7Recorder struct {
	mu        sync.Mutex
	tag       uint64
	lat       []int64 // quiet messages: send -> receipt, ns
	quiet     int     // quiet messages of this run received
	want      int     // quiet messages published
	flood     int64   // flood deliveries while publishing
	counting  bool    // publishing: count the flood
	done      chan struct{}
	duplicate int
	seen      map[uint64]bool // quiet messages received, by index (payload bytes 16-23)
}

func (rec *w7Recorder) add(msgs []wire.Delivery, now int64) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range msgs {
		if m.Key == "flood" {
			if rec.counting {
				rec.flood++
			}
			continue
		}
		if len(m.Payload) < 24 || binary.LittleEndian.Uint64(m.Payload[8:]) != rec.tag {
			continue // another phase's, or a warm-up's
		}
		i := binary.LittleEndian.Uint64(m.Payload[16:])
		if rec.seen[i] {
			rec.duplicate++
			continue
		}
		rec.seen[i] = true
		rec.lat = append(rec.lat, now-int64(binary.LittleEndian.Uint64(m.Payload)))
		rec.quiet++
		if rec.quiet == rec.want && rec.done != nil {
			close(rec.done)
			rec.done = nil
		}
	}
}

// w7Member receives deliveries, records them, and acks each frame's messages W7Work later
// (one goroutine acks, in the order received: they all wait as long).
type w7Member struct {
	stream grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel context.CancelFunc
	acks   chan w7Ack
	exited chan struct{} // closed when receive returns
	acked  chan struct{} // closed when ack returns
	err    error
}

// stop ends the member's stream and waits for both its goroutines.
func (m *w7Member) stop() {
	m.cancel()
	<-m.exited
	<-m.acked
}

type w7Ack struct {
	due time.Time
	ids []string
}

func (m *w7Member) receive(rec *w7Recorder) {
	defer close(m.exited)
	defer close(m.acks)
	m.err = receiveBatches(m.stream, func(msgs []wire.Delivery) error {
		if len(msgs) == 0 {
			return nil
		}
		now := time.Now()
		rec.add(msgs, now.UnixNano())
		a := w7Ack{due: now, ids: make([]string, len(msgs))}
		for i := range msgs {
			a.ids[i] = msgs[i].SystemID
		}
		m.acks <- a
		return nil
	})
}

func (m *w7Member) ack(work time.Duration) {
	defer close(m.acked)
	for a := range m.acks {
		if d := time.Until(a.due.Add(work)); d > 0 {
			time.Sleep(d)
		}
		if err := m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: a.ids}}}); err != nil {
			for range m.acks { // the stream is gone: drain until receive ends
			}
			return
		}
	}
}

// w7rep runs one phase: members on a fresh group, the quiet publisher for Duration (and the
// flood beside it), then waits until every quiet message is received, and deletes the group.
func (r *runner) w7rep(ctx context.Context, ph w7Phase, tag uint64) ([]metric, error) {
	id := "w7-" + ph.name
	topic := "bench.w7." + ph.name
	var conns []*grpc.ClientConn
	defer func() { closeAll(conns) }()
	dial := func() (*grpc.ClientConn, error) {
		c, err := r.dial(ctx)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	ctl, err := dial()
	if err != nil {
		return nil, err
	}
	admin := adminpb.NewAdminClient(ctl)
	// A group outlives its members: drop what an earlier run left in it.
	if _, err := admin.DeleteGroup(ctx, &adminpb.DeleteGroupRequest{SubscriptionId: id}); err != nil && status.Code(err) != codes.NotFound {
		return nil, fmt.Errorf("delete group %s: %w", id, err)
	}

	n := int(r.cfg.Duration.Seconds() * float64(r.cfg.W7Quiet*r.cfg.W7Rate))
	rec := &w7Recorder{tag: tag, want: n, done: make(chan struct{}), seen: make(map[uint64]bool, n), lat: make([]int64, 0, n)}
	var members []*w7Member
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	for range r.cfg.W7Members {
		conn, err := dial()
		if err != nil {
			return nil, err
		}
		stream, cancel, _, err := subscribe(ctx, conn, &pb.OpenSubscription{SubscriptionId: id, ConsumerGroup: id, TopicPatterns: []string{topic},
			Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED, MaxInFlight: uint32(r.cfg.W7InFlight), FairBy: ph.fairBy})
		if err != nil {
			return nil, err
		}
		m := &w7Member{stream: stream, cancel: cancel, acks: make(chan w7Ack, 4*r.cfg.W7InFlight), exited: make(chan struct{}), acked: make(chan struct{})}
		members = append(members, m)
		go m.receive(rec)
		go m.ack(r.cfg.W7Work)
	}

	pubConn, err := dial()
	if err != nil {
		return nil, err
	}
	fctx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	var flooded atomic.Int64
	floodDone := make(chan error, 1)
	if ph.flood {
		floodConn, err := dial()
		if err != nil {
			return nil, err
		}
		go func() { floodDone <- r.w7Flood(fctx, floodConn, topic, &flooded) }()
	} else {
		floodDone <- nil
	}
	rec.mu.Lock()
	rec.counting = true
	rec.mu.Unlock()
	start := time.Now()
	refused, err := r.w7Quiet(ctx, pubConn, topic, tag, n)
	el := time.Since(start)
	rec.mu.Lock()
	rec.counting = false
	floodGot := rec.flood
	done := rec.done
	rec.mu.Unlock()
	stopFlood()
	if ferr := <-floodDone; err == nil && ferr != nil && ctx.Err() == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if done != nil { // what is left to deliver drains at the members' pace; then what is missing was dropped
		if err := waitGroup(ctx, pb.NewBrokerClient(ctl), id, "drained", func(g *pb.GroupStats) bool {
			return g.GetQueued() == 0 && g.GetInFlight() == 0 && g.GetDelayed() == 0
		}); err != nil {
			return nil, err
		}
	}
	rec.mu.Lock()
	lost := rec.want - rec.quiet
	lat := slices.Clone(rec.lat)
	dup := rec.duplicate
	rec.mu.Unlock()
	if len(lat) == 0 {
		return nil, fmt.Errorf("no quiet message received of %d", n)
	}
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(math.Ceil(q*float64(len(lat))))-1]) / 1e3 }
	for _, m := range members {
		m.stop()
	}
	members = nil
	if _, err := admin.DeleteGroup(ctx, &adminpb.DeleteGroupRequest{SubscriptionId: id}); err != nil {
		return nil, fmt.Errorf("delete group %s: %w", id, err)
	}
	return []metric{{name: "quiet_p50_us", v: pct(0.50)}, {name: "quiet_p99_us", v: pct(0.99)}, {name: "quiet_p999_us", v: pct(0.999)},
		{name: "flood_delivered_per_s", v: float64(floodGot) / el.Seconds()},
		{name: "flood_published_per_s", v: float64(flooded.Load()) / el.Seconds()},
		{name: "quiet_lost", v: float64(lost), sum: true}, {name: "quiet_refused", v: float64(refused), sum: true},
		{name: "quiet_duplicated", v: float64(dup), sum: true}}, nil
}

// w7Quiet publishes n messages over the quiet keys in turn, paced evenly over Duration, each
// frame's messages stamped when it is sent; a message refused (a full group) is sent again
// with its first stamp, so that the wait counts. It returns how many refusals there were.
func (r *runner) w7Quiet(ctx context.Context, conn *grpc.ClientConn, topic string, tag uint64, n int) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewBrokerClient(conn).PublishStream(ctx)
	if err != nil {
		return 0, fmt.Errorf("open publish stream: %w", err)
	}
	keys := make([]string, r.cfg.W7Quiet)
	for i := range keys {
		keys[i] = "quiet-" + strconv.Itoa(i)
	}
	var mu sync.Mutex
	inFlight := map[uint64][]*pb.PublishRequest{} // frames sent, by sequence
	var retry []*pb.PublishRequest
	var refused int
	confirmed := make(chan error, 1)
	go func() {
		confirmed <- func() error {
			for ok := 0; ok < n; {
				resp, err := stream.Recv()
				if err != nil {
					return fmt.Errorf("quiet publish stream: %w (%d of %d confirmed)", err, ok, n)
				}
				mu.Lock()
				reqs := inFlight[resp.GetSequence()]
				delete(inFlight, resp.GetSequence())
				for i, res := range resp.GetResults() {
					switch c := codes.Code(res.GetCode()); c {
					case codes.OK:
						ok++
					case codes.ResourceExhausted:
						refused++
						retry = append(retry, reqs[i])
					default:
						mu.Unlock()
						return fmt.Errorf("quiet publish refused: %s: %s", c, res.GetError())
					}
				}
				mu.Unlock()
			}
			return nil
		}()
	}()
	start := time.Now()
	due := func(j int) time.Time { return start.Add(time.Duration(int64(r.cfg.Duration) * int64(j) / int64(n))) }
	var seq uint64
	for j := 0; ; {
		mu.Lock()
		again := retry
		retry = nil
		mu.Unlock()
		if j >= n && len(again) == 0 {
			select {
			case err := <-confirmed:
				if err == nil {
					err = endStream(stream)
				}
				mu.Lock()
				defer mu.Unlock()
				return refused, err
			case <-time.After(time.Millisecond):
				continue
			}
		}
		if d := time.Until(due(j)); j < n && len(again) == 0 && d > 0 {
			time.Sleep(d)
		} else if len(again) > 0 {
			time.Sleep(time.Millisecond) // the group is full: give its members time, as blast does
		}
		now := time.Now()
		reqs := again
		for j < n && len(reqs) < r.cfg.Batch && !due(j).After(now) {
			p := make([]byte, max(len(r.payload), 24))
			copy(p, r.payload)
			binary.LittleEndian.PutUint64(p, uint64(now.UnixNano()))
			binary.LittleEndian.PutUint64(p[8:], tag)
			binary.LittleEndian.PutUint64(p[16:], uint64(j))
			k := keys[j%len(keys)]
			reqs = append(reqs, &pb.PublishRequest{Topic: topic, Payload: p, Key: k, Headers: map[string]string{"tenant": k}})
			j++
		}
		if len(reqs) == 0 {
			continue
		}
		seq++
		mu.Lock()
		inFlight[seq] = reqs
		mu.Unlock()
		if err := stream.Send(&pb.PublishStreamRequest{Sequence: seq, Messages: reqs}); err != nil {
			cancel()
			return refused, <-confirmed
		}
	}
}

// endStream half-closes a publish stream whose messages are all confirmed and waits for the
// broker to end it.
func endStream(stream grpc.BidiStreamingClient[pb.PublishStreamRequest, pb.PublishStreamResponse]) error {
	if err := stream.CloseSend(); err == nil {
		if _, err := stream.Recv(); err != io.EOF {
			return fmt.Errorf("publish stream did not end cleanly: %v", err)
		}
	}
	return nil
}

// w7Flood publishes messages of the key "flood" until ctx ends: frames of Batch with at most
// Window unconfirmed, or paced at W7FloodRate. Refusals (a full group) are dropped after a
// 1 ms pause, as a flooding client would retry; published counts the accepted ones.
func (r *runner) w7Flood(ctx context.Context, conn *grpc.ClientConn, topic string, published *atomic.Int64) error {
	stream, err := pb.NewBrokerClient(conn).PublishStream(ctx)
	if err != nil {
		return fmt.Errorf("open flood publish stream: %w", err)
	}
	reqs := make([]*pb.PublishRequest, r.cfg.Batch)
	for i := range reqs {
		reqs[i] = &pb.PublishRequest{Topic: topic, Payload: r.payload, Key: "flood", Headers: map[string]string{"tenant": "flood"}}
	}
	slots := make(chan struct{}, r.cfg.Window)
	var full atomic.Bool
	recvDone := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			for _, res := range resp.GetResults() {
				switch c := codes.Code(res.GetCode()); c {
				case codes.OK:
					published.Add(1)
				case codes.ResourceExhausted:
					full.Store(true)
				default:
					recvDone <- fmt.Errorf("flood publish refused: %s: %s", c, res.GetError())
					return
				}
			}
			<-slots
		}
	}()
	start := time.Now()
	var seq uint64
	var sentN int64
	for {
		if full.Swap(false) {
			time.Sleep(time.Millisecond)
		}
		if rate := r.cfg.W7FloodRate; rate > 0 {
			if d := time.Until(start.Add(time.Duration(sentN * int64(time.Second) / int64(rate)))); d > 0 {
				time.Sleep(d)
			}
		}
		select {
		case slots <- struct{}{}:
		case err := <-recvDone:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-ctx.Done():
			<-recvDone
			return nil
		}
		seq++
		if err := stream.Send(&pb.PublishStreamRequest{Sequence: seq, Messages: reqs}); err != nil {
			<-recvDone
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("flood publish stream: %w", err)
		}
		sentN += int64(len(reqs))
	}
}
