package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/internal/wire"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Mode is how a subscription shares messages.
type Mode int

const (
	// Fanout: the subscription gets every message that matches its patterns, at most once,
	// without acks. The zero Mode.
	Fanout Mode = iota
	// Balanced: the members of a consumer group (subscriptions with the same ID and Group)
	// share the messages; each goes to one member and is redelivered until acked.
	Balanced
)

func (m Mode) String() string {
	switch m {
	case Fanout:
		return "fanout"
	case Balanced:
		return "balanced"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Handler processes one message. With automatic acks (the default) a nil return acks the
// message and an error nacks it, so that it is redelivered after SubscribeOptions.NackDelay.
// ctx is cancelled when the subscription is closing; a message whose handler then returns an
// error wrapping context.Canceled is not nacked but left to the broker, which redelivers it to
// another member when this one has gone, at once; any other error is nacked, with NackDelay and
// the error as the reason, before the stream closes. A Handler runs on one of the subscription's worker goroutines; it is called
// concurrently when Concurrency > 1. A panic in a Handler is not recovered.
type Handler func(ctx context.Context, m *Message) error

// SubscribeOptions describe a subscription. Zero values take the defaults shown.
type SubscribeOptions struct {
	// ID names the subscription: letters, digits, '-', '_', '.'. The members of a consumer
	// group share it (default: the Group). Optional for fanout; the broker then makes one up.
	ID string
	// Patterns are dot-separated tokens: "*" matches one token, a final ">" one or more,
	// e.g. "jobs.thumb.*" or "orders.>".
	Patterns []string
	Mode     Mode
	// Group is the consumer group; required for Balanced, not allowed for Fanout.
	Group string

	// Balanced only: how many unacked messages this member may hold (default Concurrency).
	MaxInFlight int
	// Balanced only: a message not acked this long after its delivery is redelivered
	// (default: the broker's, 30s).
	AckDeadline time.Duration
	// Balanced only: after this many attempts a failing message goes to DeadLetterTopic
	// (default 0: unlimited). The group's first member sets it.
	MaxDeliveries int
	// Balanced only: where dead letters go (default "dlq.<ID>").
	DeadLetterTopic string
	// Balanced only, set by the group's first member: OrderingKey delivers the messages of
	// one key ([WithKey]) one at a time, in publish order, keys in parallel; OrderingGroup
	// one message of the group at a time (a single active consumer). See README.md,
	// "Ordering keys and fair dispatch".
	Ordering Ordering
	// Balanced only, set by the group's first member: "key" takes turns across message keys,
	// "header:<name>" across that header's values, so that one that floods does not delay
	// the others; "" is FIFO.
	FairBy string
	// Balanced only, set by the group's first member: the group's highest message priority,
	// 1 to 9 ([WithPriority]); 0 leaves the group FIFO, ignoring priorities. See README.md,
	// "Priorities".
	MaxPriority int
	// Balanced only: this member's priority, 0 (the default) to 9, higher first: a member of
	// a lower priority gets messages only while every higher one is full or gone.
	Priority int

	// Concurrency is the number of worker goroutines running the handler (default 1).
	// Messages of a fanout subscription are handled in order only with Concurrency 1.
	Concurrency int
	// ManualAck leaves acking to the handler: it must call Message.Ack or Message.Nack,
	// possibly later and from another goroutine. The handler's error is then ignored.
	ManualAck bool
	// NackDelay is how long a message whose handler failed waits before it is redelivered
	// (default 0: at once).
	NackDelay time.Duration
}

// Settings are a subscription's settings in force, as the broker reported them.
type Settings struct {
	ID       string // the subscription_id, made up by the broker for an unnamed fanout
	MemberID string // this member among its group's; changes when the subscription reconnects
	// Balanced only.
	MaxInFlight     int
	AckDeadline     time.Duration
	MaxDeliveries   int
	DeadLetterTopic string
	Ordering        Ordering
	FairBy          string
	MaxPriority     int
	Priority        int
}

// Ordering is how a consumer group orders its deliveries (SubscribeOptions.Ordering).
type Ordering int

const (
	// OrderingNone: FIFO, any number of a key's messages in flight.
	OrderingNone Ordering = iota
	// OrderingKey: one message of a key at a time, in publish order; keys in parallel.
	OrderingKey
	// OrderingGroup: one message of the group at a time (a single active consumer).
	OrderingGroup
)

// Subscription is an open subscription: a receiving goroutine feeds worker goroutines that
// run the Handler, and one sender goroutine sends their acks and nacks in batches. When the
// stream breaks with a transient error (broker restarted, connection lost) the subscription
// re-opens it with backoff; errors that retrying cannot fix (codes.InvalidArgument,
// FailedPrecondition, AlreadyExists, ResourceExhausted e.g. for a slow fanout consumer, ...)
// end it, and Err says why. Close it when done.
type Subscription struct {
	c        *Client
	h        Handler
	open     *pb.OpenSubscription
	balanced bool
	manual   bool
	delay    time.Duration // NackDelay

	parent context.Context    // the Subscribe context: streams keep its values
	ctx    context.Context    // cancelled by Close, the parent, or a terminal error
	cancel context.CancelFunc // cancels ctx
	work   chan *Message
	settle settleQueue
	gen    atomic.Uint64 // generation of the current stream; 1 for the first
	// lastNacks are the nacks of handlers that failed while the subscription was closing:
	// shutdown sends them by unary Nack calls. Through the sender, one could be written to
	// a stream that shutdown then cancels, and be lost.
	lastMu    sync.Mutex
	lastNacks []settlement

	wg        sync.WaitGroup // every goroutine of the subscription
	workers   sync.WaitGroup // the workers
	done      chan struct{}  // closed when the subscription has ended and its workers stopped
	closeOnce sync.Once

	mu       sync.Mutex
	settings Settings
	err      error
}

// stream is one Subscribe RPC with its receiving and sending goroutines.
type stream struct {
	rpc          grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel       context.CancelFunc
	recvErr      chan error    // the receiver's reason to stop; buffered
	receiverDone chan struct{} // closed when the receiver has returned
	stopSender   chan struct{} // closed to stop the sender
	senderDone   chan struct{} // closed when the sender has returned
	lastAcks     []string      // the sender's last AckBatch; read after senderDone
	gen          uint64        // 1 for the subscription's first stream, 2 for the next...
}

// Subscribe opens a subscription and starts handling its messages with h. It returns once
// the broker has confirmed the subscription, so a bad pattern, a group mismatch or an
// unreachable broker is an error here (status.Code(err) gives its gRPC code). Cancelling ctx
// ends the subscription as Close does.
func (c *Client) Subscribe(ctx context.Context, opts SubscribeOptions, h Handler) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("tinybroker: Subscribe needs a Handler")
	}
	open, err := opts.toOpen()
	if err != nil {
		return nil, err
	}
	s := &Subscription{c: c, h: h, open: open, balanced: opts.Mode == Balanced, manual: opts.ManualAck,
		delay: opts.NackDelay, parent: ctx, work: make(chan *Message, opts.Concurrency),
		done: make(chan struct{}), settle: settleQueue{wake: make(chan struct{}, 1)}}
	st, err := s.openStream(ctx, false)
	if err != nil {
		return nil, c.wrap(fmt.Sprintf("subscribe to %q", opts.Patterns), err)
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if err := c.track(s); err != nil {
		s.cancel()
		st.cancel()
		return nil, err
	}
	s.workers.Add(opts.Concurrency)
	for range opts.Concurrency {
		s.wg.Go(s.worker)
	}
	s.wg.Go(func() { s.run(st) })
	return s, nil
}

// toOpen checks o, fills in the defaults and returns the OpenSubscription frame.
func (o *SubscribeOptions) toOpen() (*pb.OpenSubscription, error) {
	switch {
	case o.Mode != Fanout && o.Mode != Balanced:
		return nil, fmt.Errorf("tinybroker: SubscribeOptions.Mode %v: use client.Fanout or client.Balanced", o.Mode)
	case o.Concurrency < 0 || o.MaxInFlight < 0 || o.MaxDeliveries < 0:
		return nil, fmt.Errorf("tinybroker: SubscribeOptions Concurrency %d, MaxInFlight %d and MaxDeliveries %d may not be negative (0 takes the default)", o.Concurrency, o.MaxInFlight, o.MaxDeliveries)
	case o.AckDeadline < 0 || o.NackDelay < 0:
		return nil, fmt.Errorf("tinybroker: SubscribeOptions AckDeadline %v and NackDelay %v may not be negative", o.AckDeadline, o.NackDelay)
	case o.MaxPriority < 0 || o.MaxPriority > 9 || o.Priority < 0 || o.Priority > 9:
		return nil, fmt.Errorf("tinybroker: SubscribeOptions MaxPriority %d and Priority %d: priorities are 0 to 9", o.MaxPriority, o.Priority)
	case o.Mode == Fanout && (o.MaxInFlight != 0 || o.AckDeadline != 0 || o.MaxDeliveries != 0 || o.DeadLetterTopic != "" || o.Ordering != OrderingNone || o.FairBy != "" || o.MaxPriority != 0 || o.Priority != 0):
		return nil, errors.New("tinybroker: MaxInFlight, AckDeadline, MaxDeliveries, DeadLetterTopic, Ordering, FairBy, MaxPriority and Priority are for Balanced subscriptions (fanout deliveries are not acked); drop them or set Mode: client.Balanced")
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	open := &pb.OpenSubscription{SubscriptionId: o.ID, TopicPatterns: o.Patterns, ConsumerGroup: o.Group,
		Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}
	if o.Mode == Balanced {
		if o.MaxInFlight == 0 {
			o.MaxInFlight = o.Concurrency
		}
		open.Mode = pb.DeliveryMode_DELIVERY_MODE_BALANCED
		open.MaxInFlight = uint32(o.MaxInFlight)
		if o.AckDeadline > 0 {
			open.AckDeadline = durationpb.New(o.AckDeadline)
		}
		open.MaxDeliveries = uint32(o.MaxDeliveries)
		open.DeadLetterTopic = o.DeadLetterTopic
		open.Ordering = pb.Ordering(o.Ordering)
		open.FairBy = o.FairBy
		open.MaxPriority = uint32(o.MaxPriority)
		open.Priority = uint32(o.Priority)
	}
	return open, nil
}

// Settings returns the settings in force, as of the latest (re)connection.
func (s *Subscription) Settings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings
}

// Done is closed when the subscription has ended (Close, its context, or an error it cannot
// recover from) and its workers have stopped.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns the error that ended the subscription, or nil while it runs and after it was
// ended by Close or its context.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription: it cancels the handlers' context, waits for the running
// handlers, sends their acks and nacks, closes the stream (the broker redelivers this
// member's other unacked messages to the group's other members) and waits for every goroutine
// the subscription started. It returns Err(). Idempotent. It must not be called from the
// Handler, which it waits for.
func (s *Subscription) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.wg.Wait()
		s.c.untrack(s)
	})
	return s.Err()
}

// openStream opens a Subscribe stream, sends the open frame and waits for `subscribed`, or
// for wait to be done. The stream itself lives until its cancel is called.
func (s *Subscription) openStream(wait context.Context, reconnect bool) (*stream, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(s.parent))
	stop := context.AfterFunc(wait, cancel)
	rpc, err := s.c.api.Subscribe(sctx)
	var resp *pb.SubscribeResponse
	if err == nil {
		err = rpc.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: s.open}})
		if err == nil || errors.Is(err, io.EOF) { // io.EOF: Recv has the stream's status
			resp, err = rpc.Recv()
		}
	}
	if !stop() {
		cancel()
		return nil, wait.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	sub := resp.GetSubscribed()
	if sub == nil {
		cancel()
		return nil, status.Error(codes.Internal, "protocol error: the broker's first Subscribe frame is not `subscribed`")
	}
	s.mu.Lock()
	s.settings = Settings{ID: sub.GetSubscriptionId(), MemberID: sub.GetMemberId(), MaxInFlight: int(sub.GetMaxInFlight()),
		AckDeadline: sub.GetAckDeadline().AsDuration(), MaxDeliveries: int(sub.GetMaxDeliveries()), DeadLetterTopic: sub.GetDeadLetterTopic(),
		Ordering: Ordering(sub.GetOrdering()), FairBy: sub.GetFairBy(), MaxPriority: int(sub.GetMaxPriority()), Priority: int(sub.GetPriority())}
	s.mu.Unlock()
	return &stream{rpc: rpc, cancel: cancel, recvErr: make(chan error, 1), receiverDone: make(chan struct{}),
		stopSender: make(chan struct{}), senderDone: make(chan struct{}), gen: s.gen.Add(1)}, nil
}

// retryable reports whether a stream that ended with err is worth re-opening.
func retryable(err error, reconnect bool) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted, codes.NotFound,
		codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.OutOfRange:
		return false
	case codes.AlreadyExists:
		// When re-opening a named fanout subscription, the broker may not have noticed yet
		// that the previous stream is gone.
		return reconnect
	}
	return true // Unavailable, and what broken transports and restarting brokers report
}

// run supervises the streams: it starts each one's goroutines, re-opens broken streams
// with backoff, and shuts the subscription down.
func (s *Subscription) run(st *stream) {
	defer close(s.done)
	defer s.c.untrack(s)
	delay := s.c.cfg.backoffMin
	for {
		s.wg.Go(func() { s.receive(st) })
		s.wg.Go(func() { s.send(st) })
		var err error
		select {
		case err = <-st.recvErr:
		case <-s.ctx.Done():
		}
		if s.ctx.Err() != nil {
			s.shutdown(st)
			return
		}
		s.stopStream(st)
		if !retryable(err, false) {
			s.fail(err)
			return
		}
		for st = nil; st == nil; {
			t := time.NewTimer(delay/2 + rand.N(delay/2+1)) // jitter: members do not reconnect in step
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				s.shutdown(nil)
				return
			}
			delay = min(2*delay, s.c.cfg.backoffMax)
			st, err = s.openStream(s.ctx, true)
			switch {
			case err == nil:
				delay = s.c.cfg.backoffMin
			case s.ctx.Err() != nil:
				s.shutdown(nil)
				return
			case !retryable(err, true):
				s.fail(err)
				return
			}
		}
	}
}

// stopStream cancels a stream that broke and waits for its goroutines. Acks not sent stay
// queued for the next stream.
func (s *Subscription) stopStream(st *stream) {
	st.cancel()
	close(st.stopSender)
	<-st.senderDone
	<-st.receiverDone
}

// fail ends the subscription with an error it cannot recover from.
func (s *Subscription) fail(err error) {
	s.mu.Lock()
	s.err = s.c.wrap(fmt.Sprintf("subscription %q ended", s.open.GetTopicPatterns()), err)
	s.mu.Unlock()
	s.cancel()
	s.workers.Wait()
	s.settle.close()
}

// shutdown ends the subscription after Close or its context: it waits for the workers, then
// sends the acks and nacks they left, and closes the stream st (nil if none is open).
//
// The last acks go by unary Ack and Nack calls, which the broker answers: cancelling a
// stream discards what gRPC has not written yet. The sender's last AckBatch is repeated for
// the same reason (an ack of an acked message is harmless; nacks are not repeated).
func (s *Subscription) shutdown(st *stream) {
	s.workers.Wait()
	var again []string
	if st != nil {
		close(st.stopSender)
		t := time.NewTimer(5 * time.Second)
		select {
		case <-st.senderDone:
		case <-t.C: // Send blocked: the connection is stuck
			st.cancel()
			<-st.senderDone
		}
		t.Stop()
		again = st.lastAcks
		if len(again) > maxRepeatedAcks {
			again = again[len(again)-maxRepeatedAcks:]
		}
	}
	var gen uint64 // no stream: every nack is stale
	if st != nil {
		gen = st.gen
	}
	s.lastMu.Lock()
	last := s.lastNacks
	s.lastNacks = nil
	s.lastMu.Unlock()
	left := dropStaleNacks(append(s.settle.close(), last...), gen)
	if s.balanced && len(again)+len(left) > 0 {
		s.flushUnary(again, left)
	}
	if st != nil {
		st.cancel()
		<-st.receiverDone
	}
}

// maxRepeatedAcks bounds the acks of the last AckBatch that shutdown repeats, one unary call
// each.
const maxRepeatedAcks = 256

// flushUnary sends acks and settlements by unary calls, giving up after a few seconds or at
// the first transport failure (the broker then redelivers what was not acked).
func (s *Subscription) flushUnary(acks []string, left []settlement) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.parent), 5*time.Second)
	defer cancel()
	id := s.Settings().ID
	ok := func(err error) bool {
		code := status.Code(err)
		return code == codes.OK || code == codes.NotFound // NotFound: already settled
	}
	for _, a := range acks {
		if _, err := s.c.api.Ack(ctx, &pb.Ack{SubscriptionId: id, SystemId: a}); !ok(err) {
			return
		}
	}
	for _, x := range left {
		var err error
		if x.touch {
			continue // the stream is closing: the broker takes the message back anyway
		}
		if x.nack {
			_, err = s.c.api.Nack(ctx, &pb.Nack{SubscriptionId: id, SystemId: x.id, Delay: durationpb.New(x.delay), Reason: x.reason})
		} else {
			_, err = s.c.api.Ack(ctx, &pb.Ack{SubscriptionId: id, SystemId: x.id})
		}
		if !ok(err) {
			return
		}
	}
}

// receive reads the stream and hands messages to the workers.
func (s *Subscription) receive(st *stream) {
	defer close(st.receiverDone)
	var f wire.Frame
	var dec wire.Decoder
	var batch []wire.Delivery
	for {
		err := st.rpc.RecvMsg(&f)
		if err == nil {
			batch, _, err = dec.Messages(f.B, batch[:0])
		}
		if err != nil {
			st.recvErr <- err
			return
		}
		for i := range batch {
			select {
			case s.work <- newMessage(s, st.gen, &batch[i]):
			case <-s.ctx.Done():
				st.recvErr <- s.ctx.Err()
				return
			}
		}
	}
}

// worker runs the handler on messages until the subscription ends.
func (s *Subscription) worker() {
	defer s.workers.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case m := <-s.work:
			if s.ctx.Err() != nil {
				return // closing: the broker redelivers m when the stream ends
			}
			err := s.h(s.ctx, m)
			if s.manual || m.settled.Load() {
				continue
			}
			if err == nil {
				_ = m.settle(settlement{id: m.SystemID})
				continue
			}
			if s.ctx.Err() != nil && errors.Is(err, context.Canceled) {
				// Interrupted by the closing: not the message's failure. The broker gives it
				// to another member when the stream ends, without a delay. Any other error
				// is nacked as usual (shutdown sends it), with its delay and reason.
				continue
			}
			reason := err.Error()
			if len(reason) > 256 {
				reason = reason[:256]
			}
			x := settlement{id: m.SystemID, gen: m.gen, nack: true, delay: s.delay, reason: reason}
			if s.ctx.Err() != nil && s.balanced && m.settled.CompareAndSwap(false, true) {
				s.lastMu.Lock()
				s.lastNacks = append(s.lastNacks, x)
				s.lastMu.Unlock()
				continue
			}
			_ = m.settle(x)
		}
	}
}

// maxAcksPerFrame bounds the ids of one AckBatch or NackBatch frame.
const maxAcksPerFrame = 4096

// send is the one goroutine writing acks and nacks to st: it sends whatever is queued as soon
// as it is idle, so acks coalesce into batches only while it is busy.
func (s *Subscription) send(st *stream) {
	defer close(st.senderDone)
	for {
		select {
		case <-st.stopSender:
			return
		default:
		}
		items := s.settle.take(maxAcksPerFrame)
		if len(items) == 0 {
			select {
			case <-s.settle.wake:
				continue
			case <-st.stopSender:
				return
			}
		}
		items = dropStaleNacks(items, st.gen)
		frames := settlementFrames(items)
		for i, f := range frames {
			if err := st.rpc.Send(f.req); err != nil {
				var back []settlement
				for _, g := range frames[i:] {
					back = append(back, g.items...)
				}
				s.settle.putBack(back) // the stream broke: the next one sends them
				return
			}
			if a := f.req.GetAck(); a != nil {
				st.lastAcks = a.GetSystemIds()
			}
		}
	}
}

// dropStaleNacks removes from items the nacks and touches of messages that came on a stream
// other than generation gen: when that stream broke, the broker gave them back to the group,
// maybe to another member, and a nack now would take them away from it. Acks stay: the work is
// done.
func dropStaleNacks(items []settlement, gen uint64) []settlement {
	return slices.DeleteFunc(items, func(x settlement) bool { return (x.nack || x.touch) && x.gen != gen })
}

// settleFrame is a frame of acks or nacks and the settlements it carries.
type settleFrame struct {
	req   *pb.SubscribeRequest
	items []settlement
}

// settlementFrames turns items into one AckBatch frame (first, if there are acks), one
// TouchBatch frame (if there are touches) and one NackBatch frame per distinct delay and reason.
func settlementFrames(items []settlement) []settleFrame {
	type key struct {
		delay  time.Duration
		reason string
	}
	var acks, touches []settlement
	var keys []key
	nacks := map[key][]settlement{}
	for _, x := range items {
		if x.touch {
			touches = append(touches, x)
			continue
		}
		if !x.nack {
			acks = append(acks, x)
			continue
		}
		k := key{x.delay, x.reason}
		if _, ok := nacks[k]; !ok {
			keys = append(keys, k)
		}
		nacks[k] = append(nacks[k], x)
	}
	ids := func(xs []settlement) []string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = x.id
		}
		return out
	}
	var frames []settleFrame
	if len(acks) > 0 {
		req := &pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids(acks)}}}
		frames = append(frames, settleFrame{req, acks})
	}
	if len(touches) > 0 {
		req := &pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Touch{Touch: &pb.TouchBatch{SystemIds: ids(touches)}}}
		frames = append(frames, settleFrame{req, touches})
	}
	for _, k := range keys {
		nb := &pb.NackBatch{SystemIds: ids(nacks[k]), Reason: k.reason}
		if k.delay > 0 {
			nb.Delay = durationpb.New(k.delay)
		}
		frames = append(frames, settleFrame{&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: nb}}, nacks[k]})
	}
	return frames
}

// settlement is an ack, a nack or a touch waiting to be sent.
type settlement struct {
	id     string
	gen    uint64 // for a nack or a touch, the generation of the stream the message came on
	nack   bool
	touch  bool
	delay  time.Duration
	reason string
}

// settleQueue holds the acks and nacks of the workers until the sender takes them.
type settleQueue struct {
	mu     sync.Mutex
	items  []settlement
	closed bool
	wake   chan struct{} // signalled when items goes from empty to non-empty
}

func (q *settleQueue) add(x settlement) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.items = append(q.items, x)
	first := len(q.items) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// take removes and returns up to n items.
func (q *settleQueue) take(n int) []settlement {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) <= n {
		items := q.items
		q.items = nil
		return items
	}
	items := append([]settlement(nil), q.items[:n]...)
	q.items = append(q.items[:0], q.items[n:]...)
	return items
}

// putBack returns items that could not be sent to the front of the queue.
func (q *settleQueue) putBack(items []settlement) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || len(items) == 0 {
		return
	}
	q.items = append(items, q.items...)
}

// close stops the queue, returning what was left in it; add then fails with ErrClosed.
func (q *settleQueue) close() []settlement {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	items := q.items
	q.items = nil
	return items
}
