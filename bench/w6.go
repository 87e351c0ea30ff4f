package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// w6TargetP99 is W6's latency target: p99 publish -> receive under 5 ms.
const w6TargetP99 = 5 * time.Millisecond

func (c *Config) w6Defaults() error {
	if c.Streams == 0 {
		c.Streams = 10_000
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.W6Conns == 0 {
		c.W6Conns = 8
	}
	switch {
	case c.Streams < 1 || c.W6Conns < 1:
		return fmt.Errorf("W6: streams %d, connections %d: need at least 1 of each", c.Streams, c.W6Conns)
	case c.Duration < time.Second:
		return fmt.Errorf("W6: duration %v: need at least 1s, so that every topic gets a message", c.Duration)
	case slices.Contains(c.Workloads, "W6") && c.Size < 16:
		return fmt.Errorf("size %d: W6 payloads need at least 16 bytes (a timestamp and a repetition tag)", c.Size)
	}
	return nil
}

// w6Recorder collects what W6's streams receive during one repetition. Messages carry the
// repetition's tag in payload bytes 8-15; those of another (late ones) are counted apart.
type w6Recorder struct {
	mu       sync.Mutex
	tag      uint64  // the repetition being received; 0: none
	counts   []int32 // messages of this repetition received per stream
	lat      []int64 // send -> receipt, ns
	in, out  []int64 // send -> broker's publish time, that -> receipt
	received int
	want     int
	done     chan struct{} // closed when received reaches want
	late     int           // messages of an earlier repetition
	short    int           // payloads under 16 bytes
	ended    int           // streams that ended unasked
	err      error         // the first of them's error
}

func (rec *w6Recorder) add(i int, msgs []*pb.Message, now int64) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range msgs {
		p := m.GetPayload()
		if len(p) < 16 {
			rec.short++
			continue
		}
		if binary.LittleEndian.Uint64(p[8:]) != rec.tag || rec.tag == 0 {
			rec.late++
			continue
		}
		sent, accepted := int64(binary.LittleEndian.Uint64(p)), m.GetPublishTimeUnixNano()
		rec.lat = append(rec.lat, now-sent)
		rec.in = append(rec.in, accepted-sent)
		rec.out = append(rec.out, now-accepted)
		rec.counts[i]++
		rec.received++
		if rec.received == rec.want {
			close(rec.done)
		}
	}
}

func (rec *w6Recorder) fail(i int, err error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.ended++
	if rec.err == nil {
		rec.err = fmt.Errorf("w6 stream %d ended: %w", i, err)
	}
}

// W6: Streams fanout subscriber streams over W6Conns connections, each on a topic of its own
// (bench.w6.<i>); a paced publisher sends every topic one message a second for Duration;
// latency from the send time in payload bytes 0-7 to receipt, and the broker's RSS and CPU.
func (r *runner) w6() error {
	k := r.cfg.Streams
	ctx, cancel := context.WithCancel(r.ctx) // the streams' lifetime
	defer cancel()
	var conns []*grpc.ClientConn
	defer func() { closeAll(conns) }()
	for range r.cfg.W6Conns + 1 {
		conn, err := r.dial(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, conn)
	}
	subConns, pubConn := conns[:r.cfg.W6Conns], conns[r.cfg.W6Conns]
	rss0, err := r.serverRSS() // connections open: the growth is the streams'
	if err != nil {
		return err
	}

	rec := &w6Recorder{counts: make([]int32, k)}
	var receivers sync.WaitGroup
	defer func() {
		cancel()
		receivers.Wait()
	}()
	timedOut := time.AfterFunc(r.cfg.Timeout, cancel)
	t0 := time.Now()
	var next, opened atomic.Int64
	stop := r.watch(fmt.Sprintf("W6 streams=%d setup", k), func() string {
		return fmt.Sprintf("%d of %d streams subscribed", opened.Load(), k)
	})
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for w := range errs {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= k || ctx.Err() != nil {
					return
				}
				stream, _, _, err := subscribe(ctx, subConns[i%len(subConns)], &pb.OpenSubscription{
					TopicPatterns: []string{w6Topic(i)}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT})
				if err != nil {
					errs[w] = err
					cancel()
					return
				}
				opened.Add(1)
				receivers.Go(func() { w6Receive(ctx, i, stream, rec) })
			}
		})
	}
	wg.Wait()
	setup := time.Since(t0)
	rss1, err := r.endSetup(stop, timedOut, opened.Load(), k, errs)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.stderr, "# W6: %d streams subscribed in %.0f ms\n", k, ms(setup))

	topics := make([]string, k)
	for i := range topics {
		topics[i] = w6Topic(i)
	}
	var tag uint64
	return r.repeat(fmt.Sprintf("W6 tinybroker streams=%d", k), func(ctx context.Context) ([]metric, error) {
		tag++
		m, err := r.w6rep(ctx, pubConn, topics, rec, tag)
		if err != nil {
			return nil, err
		}
		m = append(m, metric{name: "stream_setup_ms", v: ms(setup)})
		if r.cfg.ServerPID != 0 {
			rss, err := rssKB(r.cfg.ServerPID)
			if err != nil {
				return nil, err
			}
			m = append(m, metric{name: "server_rss_kb", v: rss}, metric{name: "rss_per_stream_b", v: (rss1 - rss0) * 1024 / float64(k)})
		}
		return m, nil
	})
}

func w6Topic(i int) string { return "bench.w6." + strconv.Itoa(i) }

// w6Receive receives stream i's messages into rec until the stream ends.
func w6Receive(ctx context.Context, i int, stream grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse], rec *w6Recorder) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				rec.fail(i, err)
			}
			return
		}
		rec.add(i, resp.GetMessages().GetMessages(), time.Now().UnixNano())
	}
}

// w6rep is one repetition: Duration × Streams messages, message j to topic j mod Streams,
// due evenly spread over Duration. The publisher sleeps until the next message is due, then
// sends every message due by then in one PublishStream frame (at most Batch; -batch 1: a frame
// per message), stamped with the time it sends them.
func (r *runner) w6rep(ctx context.Context, conn *grpc.ClientConn, topics []string, rec *w6Recorder, tag uint64) ([]metric, error) {
	k := len(topics)
	n := int(r.cfg.Duration.Seconds() * float64(k))
	rec.mu.Lock()
	rec.tag, rec.want, rec.received = tag, n, 0
	clear(rec.counts)
	rec.lat, rec.in, rec.out = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	rec.done = make(chan struct{})
	done, late0 := rec.done, rec.late
	streamErr := rec.err
	rec.mu.Unlock()
	if streamErr != nil {
		return nil, streamErr
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewBrokerClient(conn).PublishStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("open publish stream: %w", err)
	}
	confirmed := make(chan error, 1)
	go func() {
		confirmed <- func() error {
			for i := 0; i < n; {
				resp, err := stream.Recv()
				if err != nil {
					return fmt.Errorf("publish stream: %w (%d of %d confirmed)", err, i, n)
				}
				for _, res := range resp.GetResults() {
					if c := codes.Code(res.GetCode()); c != codes.OK {
						return fmt.Errorf("publish refused: %s: %s", c, res.GetError())
					}
					i++
				}
			}
			return nil
		}()
	}()
	var published atomic.Int64
	stop := r.watch(fmt.Sprintf("W6 streams=%d", k), func() string {
		rec.mu.Lock()
		got := rec.received
		rec.mu.Unlock()
		return fmt.Sprintf("%d of %d published, %d received", published.Load(), n, got)
	})
	defer stop()

	buf := slices.Clone(r.payload) // every message of a frame carries the same send time
	binary.LittleEndian.PutUint64(buf[8:], tag)
	reqs := make([]*pb.PublishRequest, r.cfg.Batch)
	for i := range reqs {
		reqs[i] = &pb.PublishRequest{Payload: buf}
	}
	frame := &pb.PublishStreamRequest{}
	cpu0, err := r.w6CPU()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	due := func(j int) time.Time { return start.Add(time.Duration(int64(r.cfg.Duration) * int64(j) / int64(n))) }
	for j := 0; j < n; {
		if d := time.Until(due(j)); d > 0 { // Go sleeps >= ~1 ms here, so messages fall due in bursts
			time.Sleep(d)
		}
		// Everything due by now goes out in one frame (up to Batch messages), stamped now.
		now := time.Now()
		binary.LittleEndian.PutUint64(buf, uint64(now.UnixNano()))
		k0 := j
		for j < n && j-k0 < len(reqs) && !due(j).After(now) {
			reqs[j-k0].Topic = topics[j%k]
			j++
		}
		frame.Sequence++
		frame.Messages = reqs[:j-k0]
		if err := stream.Send(frame); err != nil { // Send encodes the frame before it returns
			cancel()
			return nil, <-confirmed // Recv has the stream's status
		}
		published.Store(int64(j))
	}
	sent := time.Since(start)
	if err := <-confirmed; err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err == nil {
		if _, err := stream.Recv(); err != io.EOF {
			return nil, fmt.Errorf("publish stream did not end cleanly: %v", err)
		}
	}
	// Everything is confirmed: give the deliveries a few seconds to arrive, then count what
	// did not as lost.
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cpu1, err := r.w6CPU()
	if err != nil {
		return nil, err
	}
	el := time.Since(start)

	rec.mu.Lock()
	rec.tag = 0 // anything still arriving is late
	lat, in, out := rec.lat, rec.in, rec.out
	lost, dup := 0, 0
	for i, got := range rec.counts {
		want := n / k
		if i < n%k {
			want++
		}
		lost += max(0, want-int(got))
		dup += max(0, int(got)-want)
	}
	late, short, streamErr := rec.late-late0, rec.short, rec.err
	rec.mu.Unlock()
	switch {
	case streamErr != nil:
		return nil, streamErr
	case short > 0:
		return nil, fmt.Errorf("%d messages arrived with payloads under 16 bytes", short)
	case len(lat) == 0:
		return nil, fmt.Errorf("none of %d messages arrived", n)
	}
	for _, l := range [][]int64{lat, in, out} {
		slices.Sort(l)
	}
	pct := func(l []int64, q float64) float64 { return float64(l[int(math.Ceil(q*float64(len(l))))-1]) / 1e3 }
	m := []metric{{name: "p50_us", v: pct(lat, 0.50)}, {name: "p99_us", v: pct(lat, 0.99)}, {name: "p999_us", v: pct(lat, 0.999)},
		{name: "target_p99_us", v: float64(w6TargetP99) / 1e3},
		{name: "lost", v: float64(lost), sum: true}, {name: "duplicated", v: float64(dup), sum: true},
		{name: "late", v: float64(late), sum: true},
		{name: "sent_msgs_per_s", v: float64(n) / sent.Seconds()},
		{name: "p99_to_broker_us", v: pct(in, 0.99)}, {name: "p99_from_broker_us", v: pct(out, 0.99)},
		{name: "client_cpu_pct", v: 100 * (cpu1.client - cpu0.client).Seconds() / el.Seconds()}}
	if cpu0.sched != nil && cpu1.sched != nil {
		m = append(m, metric{name: "client_sched_p99_us", v: schedP99(cpu0.sched, cpu1.sched)})
	}
	if r.cfg.ServerPID != 0 {
		m = append(m, metric{name: "server_cpu_pct", v: 100 * (cpu1.server - cpu0.server).Seconds() / el.Seconds()})
	}
	return m, nil
}

// cpuTimes are CPU time used (user + system) by this process and by the broker's, and this
// process's scheduling latencies so far (how long goroutines waited to run once runnable).
type cpuTimes struct {
	client, server time.Duration
	sched          *metrics.Float64Histogram
}

const schedLatencies = "/sched/latencies:seconds"

// schedP99 returns the 99th percentile of the scheduling latencies between a and b, in µs
// (the upper bound of its histogram bucket).
func schedP99(a, b *metrics.Float64Histogram) float64 {
	var total uint64
	d := make([]uint64, len(b.Counts))
	for i := range d {
		d[i] = b.Counts[i] - a.Counts[i]
		total += d[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(0.99 * float64(total)))
	var seen uint64
	for i, c := range d {
		if seen += c; seen >= want {
			hi := b.Buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = b.Buckets[i]
			}
			return hi * 1e6
		}
	}
	return 0
}

func (r *runner) w6CPU() (cpuTimes, error) {
	var c cpuTimes
	var err error
	if c.client, err = selfCPU(); err != nil {
		return c, err
	}
	sample := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindFloat64Histogram {
		c.sched = sample[0].Value.Float64Histogram()
	}
	if r.cfg.ServerPID != 0 {
		if c.server, err = procCPU(r.cfg.ServerPID); err != nil {
			return c, err
		}
	}
	return c, nil
}

// procCPU returns the CPU time process pid has used (utime + stime of /proc/PID/stat, every
// thread), at the kernel's clock tick resolution (USER_HZ, 100 on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("server CPU: %w", err)
	}
	s := string(b)
	// Fields after the command name (which may hold spaces) in parentheses: state is field 3,
	// utime 14, stime 15.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("server CPU: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("server CPU: /proc/%d/stat: %w", pid, err)
	}
	const userHZ = 100
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}
