package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/wire"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// pubProgress counts a blast's confirmed and refused messages, for progress lines.
type pubProgress struct{ confirmed, refused atomic.Int64 }

// blast publishes n messages of payload on topic over one PublishStream, in frames of up to
// Batch messages with at most Window frames unconfirmed, and returns when the broker has
// confirmed all n, with the time the first frame was sent. Messages refused with
// RESOURCE_EXHAUSTED (a consumer group is full) are published again after a 1 ms pause, as a
// client would; any other refusal fails the run.
func (r *runner) blast(ctx context.Context, conn *grpc.ClientConn, topic string, n int, pp *pubProgress) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewBrokerClient(conn).PublishStream(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("open publish stream: %w", err)
	}
	reqs := make([]*pb.PublishRequest, r.cfg.Batch) // frames are encoded by Send: reusable
	var ttl *durationpb.Duration
	if r.cfg.TTL > 0 {
		ttl = durationpb.New(r.cfg.TTL)
	}
	for i := range reqs {
		reqs[i] = &pb.PublishRequest{Topic: topic, Payload: r.payload, Ttl: ttl}
	}
	keys := benchKeys(r.cfg.Keys) // with -keys: key-0 ... in turn
	next := 0
	slots := make(chan struct{}, r.cfg.Window) // one token per unconfirmed frame
	var retry atomic.Int64                     // refused messages not yet sent again
	kick := make(chan struct{}, 1)             // signalled after retry grows
	recvDone := make(chan struct{})
	var recvErr error
	go func() {
		defer close(recvDone)
		recvErr = func() error {
			for confirmed := 0; confirmed < n; {
				resp, err := stream.Recv()
				if err != nil {
					return fmt.Errorf("publish stream: %w (%d of %d confirmed)", err, confirmed, n)
				}
				refused := 0
				for _, res := range resp.GetResults() {
					switch c := codes.Code(res.GetCode()); c {
					case codes.OK:
						confirmed++
					case codes.ResourceExhausted:
						refused++
					default:
						return fmt.Errorf("publish to %q refused: %s: %s", topic, c, res.GetError())
					}
				}
				pp.confirmed.Store(int64(confirmed))
				<-slots
				if refused > 0 {
					pp.refused.Add(int64(refused))
					retry.Add(int64(refused))
					select {
					case kick <- struct{}{}:
					default:
					}
				}
			}
			return nil
		}()
	}()

	var start time.Time
	var seq uint64
	unsent := n
send:
	for {
		pause := false
		if k := retry.Swap(0); k > 0 {
			unsent += int(k)
			pause = true
		}
		if unsent == 0 {
			select {
			case <-kick:
				continue
			case <-recvDone:
				break send
			}
		}
		if pause {
			time.Sleep(time.Millisecond) // a consumer group is full: give its members time
		}
		select {
		case slots <- struct{}{}:
		case <-recvDone:
			break send
		}
		k := min(r.cfg.Batch, unsent)
		if len(keys) > 0 {
			for i := range k {
				reqs[i].Key = keys[next]
				next = (next + 1) % len(keys)
			}
		}
		seq++
		if start.IsZero() {
			start = time.Now()
		}
		if err := stream.Send(&pb.PublishStreamRequest{Sequence: seq, Messages: reqs[:k]}); err != nil {
			cancel() // Recv has the stream's status
			break
		}
		unsent -= k
	}
	<-recvDone
	if recvErr != nil {
		return time.Time{}, recvErr
	}
	// End the stream cleanly: the broker returns once it has read our half-close.
	if err := stream.CloseSend(); err == nil {
		if _, err := stream.Recv(); err != io.EOF {
			return time.Time{}, fmt.Errorf("publish stream did not end cleanly: %v", err)
		}
	}
	return start, nil
}

// benchKeys returns the n keys -keys gives messages: key-0 to key-<n-1>.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}

// sink is a subscriber on a Subscribe stream of its own: it counts the messages it receives
// and records when it reaches the count it was armed with.
type sink struct {
	name    string
	stream  grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel  context.CancelFunc
	onBatch func(msgs []wire.Delivery, now time.Time) // if set, called with every batch
	got     atomic.Int64
	exited  chan struct{} // closed when the receiving goroutine ends; err says why
	err     error

	mu   sync.Mutex
	want int64
	done chan struct{} // closed when got reaches want; nil once closed
	end  time.Time
}

// subscribe opens a Subscribe stream with open and waits for the broker's `subscribed`. The
// stream lives until cancel is called or ctx ends.
func subscribe(ctx context.Context, conn *grpc.ClientConn, open *pb.OpenSubscription) (grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse], context.CancelFunc, *pb.Subscribed, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pb.NewBrokerClient(conn).Subscribe(ctx)
	if err == nil {
		err = stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: open}})
	}
	var resp *pb.SubscribeResponse
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: Recv has the status
		resp, err = stream.Recv()
	}
	if err == nil && resp.GetSubscribed() == nil {
		err = errors.New("the first frame of the Subscribe stream is not `subscribed`")
	}
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("subscribe to %q: %w", open.GetTopicPatterns(), err)
	}
	return stream, cancel, resp.GetSubscribed(), nil
}

// newSink opens a fanout subscription to pattern and starts receiving.
func newSink(ctx context.Context, conn *grpc.ClientConn, name, pattern string, onBatch func([]wire.Delivery, time.Time)) (*sink, error) {
	stream, cancel, _, err := subscribe(ctx, conn, &pb.OpenSubscription{
		TopicPatterns: []string{pattern}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT})
	if err != nil {
		return nil, err
	}
	s := &sink{name: name, stream: stream, cancel: cancel, onBatch: onBatch, exited: make(chan struct{})}
	go s.receive()
	return s, nil
}

// receive decodes frames as the Go client does (internal/wire): every message's fields,
// payload copied, as a subscriber would have them.
func (s *sink) receive() {
	defer close(s.exited)
	s.err = receiveBatches(s.stream, func(msgs []wire.Delivery) error {
		now := time.Now()
		if s.onBatch != nil {
			s.onBatch(msgs, now)
		}
		got := s.got.Add(int64(len(msgs)))
		s.mu.Lock()
		if s.done != nil && got >= s.want {
			s.end = now
			close(s.done)
			s.done = nil
		}
		s.mu.Unlock()
		return nil
	})
}

// receiveBatches reads SubscribeResponse frames from stream and calls f with each one's
// messages, decoded as the Go client does (internal/wire), until the stream ends or f fails;
// it returns why. The messages are reused from frame to frame.
func receiveBatches(stream interface{ RecvMsg(any) error }, f func([]wire.Delivery) error) error {
	var frame wire.Frame
	var dec wire.Decoder
	var msgs []wire.Delivery
	for {
		if err := stream.RecvMsg(&frame); err != nil {
			return err
		}
		var err error
		if msgs, _, err = dec.Messages(frame.B, msgs[:0]); err != nil {
			return err
		}
		if err := f(msgs); err != nil {
			return err
		}
	}
}

// arm makes the sink wait for n more messages than it has received so far.
func (s *sink) arm(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want = s.got.Load() + int64(n)
	s.done = make(chan struct{})
}

// wait waits until the sink has what it was armed for, and returns when it got the last one.
func (s *sink) wait(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-s.exited:
			s.mu.Lock()
			finished := s.done == nil
			s.mu.Unlock()
			if !finished {
				return time.Time{}, fmt.Errorf("%s: stream ended after %d messages: %w", s.name, s.got.Load(), s.err)
			}
		case <-ctx.Done():
			s.mu.Lock()
			want := s.want
			s.mu.Unlock()
			return time.Time{}, fmt.Errorf("%s: %w with %d of %d messages received", s.name, ctx.Err(), s.got.Load(), want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end, nil
}

// close ends the stream and waits for the receiving goroutine.
func (s *sink) close() {
	s.cancel()
	<-s.exited
}

func closeSinks(sinks []*sink) {
	for _, s := range sinks {
		s.close()
	}
}

// blastAndWait arms the sinks, blasts n messages on topic and waits until every sink has
// received them; it returns the time from the first publish to the last delivery.
func (r *runner) blastAndWait(ctx context.Context, pub *grpc.ClientConn, topic string, sinks []*sink) (time.Duration, error) {
	for _, s := range sinks {
		s.arm(r.n)
	}
	var pp pubProgress
	stop := r.watch(topic, func() string {
		got := make([]int64, len(sinks))
		for i, s := range sinks {
			got[i] = s.got.Load()
		}
		return fmt.Sprintf("%d of %d confirmed; received (cumulative) %v", pp.confirmed.Load(), r.n, got)
	})
	defer stop()
	start, err := r.blast(ctx, pub, topic, r.n, &pp)
	if err != nil {
		return 0, err
	}
	var end time.Time
	for _, s := range sinks {
		t, err := s.wait(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", topic, err)
		}
		if t.After(end) {
			end = t
		}
	}
	return end.Sub(start), nil
}
