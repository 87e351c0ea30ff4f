package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// maxFrameBytes bounds the encoded size of one PublishStream frame (a single larger message
// still goes out alone). The broker refuses a frame over max_message_bytes + 2 ×
// max_header_bytes + 256 KiB (1.375 MiB with the defaults), which one message within the
// limits never reaches.
const maxFrameBytes = 1 << 20

// encodedSize is about what m takes in a frame: payload, topic, headers and field tags.
func encodedSize(m *pb.PublishRequest) int {
	n := len(m.GetPayload()) + len(m.GetTopic()) + 16
	for k, v := range m.GetHeaders() {
		n += len(k) + len(v) + 8
	}
	return n
}

// PublisherOptions configure a Publisher. Zero values take the defaults shown.
type PublisherOptions struct {
	// MaxPending is the window: how many messages may be queued or sent but not yet confirmed
	// by the broker (1024). Publish blocks while the window is full.
	MaxPending int
	// MaxBatch is the most messages sent in one frame (256). Frames also stop at 1 MiB of
	// payload. A message goes out at once when the stream is idle; batches form only while
	// earlier frames are being sent.
	MaxBatch int
	// OnResult, if set, is called once for every message, in publish order, with its
	// result or its error (status.Code(err) gives the gRPC code), from the publisher's
	// receiving goroutine. Keep it short; it must not call Flush or Close.
	OnResult func(topic string, res PublishResult, err error)
	// ErrorsOnly asks the broker to answer a frame only if one of its messages fails, as NATS
	// core publishes without confirmations: less work and less traffic per message, for
	// publishers that want latency more than a system_id per message. Messages are confirmed
	// in bulk by a frame the broker answers, which the Publisher sends every MaxPending/2
	// messages, on Flush and on Close. OnResult then gets a zero PublishResult for a message
	// that was published.
	ErrorsOnly bool
}

// Publisher publishes messages over one PublishStream: Publish queues a message and returns,
// a sender goroutine sends queued messages in frames, and every frame is confirmed by the
// broker. Flush waits for confirmations and reports failed messages. It is safe for
// concurrent use; messages are published in the order Publish was called.
//
// Every message carries a message id of the Publisher's making. If the stream breaks with
// codes.Unavailable (broker restarting, connection lost), the Publisher opens a new one, after
// the reconnection back-off (WithReconnectBackoff), and sends the messages not yet confirmed
// again, in order, with their ids: the broker publishes each once, whether or not it had
// them (PublishResult.Duplicate says it had). After 4 attempts in a row without an answer,
// or another error, the messages not yet confirmed fail with an error saying they may or may
// not have been published, and the Publisher is done: later calls return that error; open
// a new one to go on.
type Publisher struct {
	c      *Client
	opts   PublisherOptions
	ctx    context.Context // the streams'
	cancel context.CancelFunc
	idBase string        // the message ids: idBase and a count
	slots  chan struct{} // one token per unconfirmed message
	wake   chan struct{} // the queue has work, or closing
	done   chan struct{} // closed once the stream has ended and every message is settled
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	stream   grpc.BidiStreamingClient[pb.PublishStreamRequest, pb.PublishStreamResponse]
	halfDone bool // CloseSend was called on stream
	reopens  int  // streams opened since the last answer
	ids      uint64
	queue    []*pb.PublishRequest // not yet sent
	sent     []sentFrame          // sent, awaiting their response frame, oldest first
	seq      uint64
	closing  bool
	err      error  // why the stream ended (ErrClosed after Close); set once
	enqueued uint64 // messages accepted by Publish
	settled  uint64 // messages confirmed or failed
	failed   int    // failures since the last Flush
	first    *PublishError
	quiet    int           // ErrorsOnly: messages sent in unanswered frames since the last answered one
	flushReq bool          // ErrorsOnly: Flush wants the quiet frames confirmed
	progress chan struct{} // closed and replaced whenever settled grows
}

type sentFrame struct {
	seq   uint64
	msgs  []*pb.PublishRequest
	quiet bool // errors_only: answered only on failure
}

// PublishError reports the messages that failed since the last Flush (or Close).
type PublishError struct {
	Failed int    // how many messages failed
	Topic  string // topic of the first failed message
	Err    error  // error of the first failed message; status.Code(Err) gives its gRPC code
}

func (e *PublishError) Error() string {
	if e.Failed == 1 {
		return fmt.Sprintf("tinybroker: publish to %q failed: %v", e.Topic, e.Err)
	}
	return fmt.Sprintf("tinybroker: %d messages failed to publish; the first, to %q: %v", e.Failed, e.Topic, e.Err)
}

// Unwrap returns the error of the first failed message.
func (e *PublishError) Unwrap() error { return e.Err }

// NewPublisher opens a publish stream. ctx bounds the stream's life: cancelling it fails the
// messages not yet confirmed. Close the Publisher when done.
func (c *Client) NewPublisher(ctx context.Context, opts PublisherOptions) (*Publisher, error) {
	if opts.MaxPending < 0 || opts.MaxBatch < 0 {
		return nil, fmt.Errorf("tinybroker: PublisherOptions MaxPending %d and MaxBatch %d may not be negative (0 takes the default)", opts.MaxPending, opts.MaxBatch)
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = 1024
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 256
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.api.PublishStream(sctx)
	if err != nil {
		cancel()
		return nil, c.wrap("open publish stream", err)
	}
	p := &Publisher{c: c, opts: opts, stream: stream, ctx: sctx, cancel: cancel, idBase: newMessageID() + "-",
		slots: make(chan struct{}, opts.MaxPending), wake: make(chan struct{}, 1),
		done: make(chan struct{}), progress: make(chan struct{})}
	if err := c.track(p); err != nil {
		cancel()
		return nil, err
	}
	p.wg.Go(p.send)
	p.wg.Go(p.receive)
	return p, nil
}

// Publish queues a message for publishing and returns. It blocks only while MaxPending
// messages are unconfirmed, until ctx is done. headers may be nil; the Publisher keeps payload
// and headers until the message is confirmed, so do not modify them. A message's own failure
// (e.g. an invalid topic) is reported by OnResult and by the next Flush, not here; Publish
// fails only when the Publisher can take no more messages (closed, or its stream broke).
// opts may give the message a key ([WithKey]) or its own id ([WithMessageID]).
func (p *Publisher) Publish(ctx context.Context, topic string, payload []byte, headers map[string]string, opts ...PublishOption) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return p.stoppedErr()
	}
	p.mu.Lock()
	if p.closing || p.err != nil {
		p.mu.Unlock()
		<-p.slots
		return p.stoppedErr()
	}
	p.ids++
	req := &pb.PublishRequest{Topic: topic, Payload: payload, Headers: headers, MessageId: p.idBase + strconv.FormatUint(p.ids, 36)}
	for _, o := range opts {
		o(req)
	}
	p.queue = append(p.queue, req)
	p.enqueued++
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

func (p *Publisher) stoppedErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil || p.closing {
		return ErrClosed
	}
	return p.err
}

// Flush waits until every message queued before the call is confirmed or failed, or ctx is
// done. It returns a *PublishError if any message failed since the last Flush (and forgets
// those failures), the stream's error if the Publisher is done, or nil.
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.enqueued
	if p.opts.ErrorsOnly && p.settled < target {
		p.flushReq = true
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	for p.settled < target {
		ch := p.progress
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	if err := p.takeFailuresLocked(); err != nil {
		return err
	}
	if p.err != nil && !errors.Is(p.err, ErrClosed) {
		return p.err
	}
	return nil
}

func (p *Publisher) takeFailuresLocked() error {
	if p.failed == 0 {
		return nil
	}
	e := p.first
	e.Failed = p.failed
	p.failed, p.first = 0, nil
	return e
}

// Close publishes what is queued, waits for the broker to confirm it, closes the stream and
// waits for the Publisher's goroutines. It returns a *PublishError if messages failed since
// the last Flush. To bound the wait, Flush with a deadline first, or cancel the context
// given to NewPublisher. Idempotent.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
		<-p.done
		p.cancel()
		p.wg.Wait()
		p.c.untrack(p)
		p.mu.Lock()
		p.closeErr = p.takeFailuresLocked()
		if p.closeErr == nil && !errors.Is(p.err, ErrClosed) {
			p.closeErr = p.err
		}
		p.mu.Unlock()
	})
	return p.closeErr
}

// send is the one goroutine that writes to the stream: it drains the queue into frames.
func (p *Publisher) send() {
	for {
		select {
		case <-p.wake:
		case <-p.done:
			return
		}
		for {
			p.mu.Lock()
			if p.err != nil {
				p.mu.Unlock()
				return
			}
			if len(p.queue) == 0 && p.flushReq && p.quiet > 0 {
				// Flush waits for quiet frames: an empty frame the broker answers confirms them.
				p.flushReq, p.quiet = false, 0
				p.seq++
				seq := p.seq
				p.sent = append(p.sent, sentFrame{seq: seq})
				st := p.stream
				p.mu.Unlock()
				if err := st.Send(&pb.PublishStreamRequest{Sequence: seq}); err != nil {
					break // the stream is over: receive opens another or fails what is outstanding
				}
				continue
			}
			if len(p.queue) == 0 {
				p.flushReq = false
				closeSend := p.closing && !p.halfDone
				p.halfDone = p.halfDone || closeSend
				st := p.stream
				p.mu.Unlock()
				if closeSend {
					_ = st.CloseSend() // the broker answers what it got, then ends the stream
				}
				break
			}
			n, size := 0, 0
			for n < len(p.queue) && n < p.opts.MaxBatch {
				l := encodedSize(p.queue[n])
				if n > 0 && size+l > maxFrameBytes {
					break
				}
				size += l
				n++
			}
			msgs := p.queue[:n:n]
			p.queue = p.queue[n:]
			last := len(p.queue) == 0
			if last {
				p.queue = nil
			}
			p.seq++
			seq := p.seq
			// ErrorsOnly: a frame goes unanswered unless MaxPending/2 messages are waiting for a
			// confirmation, or Flush waits and this frame empties the queue.
			quiet := p.opts.ErrorsOnly && !(p.flushReq && last) && p.quiet+n < p.opts.MaxPending/2
			if quiet {
				p.quiet += n
			} else {
				p.quiet = 0 // this frame's answer confirms the quiet ones before it
				if last {
					p.flushReq = false
				}
			}
			p.sent = append(p.sent, sentFrame{seq: seq, msgs: msgs, quiet: quiet})
			st := p.stream
			p.mu.Unlock()
			if err := st.Send(&pb.PublishStreamRequest{Sequence: seq, Messages: msgs, ErrorsOnly: quiet}); err != nil {
				break // the stream is over: receive opens another or fails what is outstanding
			}
		}
	}
}

// receive matches response frames to sent frames and settles their messages.
func (p *Publisher) receive() {
	for {
		p.mu.Lock()
		st := p.stream
		p.mu.Unlock()
		resp, err := st.Recv()
		if err != nil && p.reopen(err) {
			continue
		}
		if err != nil {
			p.fail(err)
			p.cancel()
			p.c.untrack(p)
			return
		}
		p.mu.Lock()
		p.reopens = 0
		// Quiet frames sent before the answered one were published: frames are handled in order.
		var published []sentFrame
		for len(p.sent) > 0 && p.sent[0].quiet && p.sent[0].seq != resp.GetSequence() {
			published = append(published, p.sent[0])
			p.sent[0] = sentFrame{}
			p.sent = p.sent[1:]
		}
		if len(p.sent) == 0 || p.sent[0].seq != resp.GetSequence() || len(p.sent[0].msgs) != len(resp.GetResults()) {
			p.mu.Unlock()
			p.cancel()
			p.fail(status.Errorf(codes.Internal, "protocol error: response frame %d with %d results does not match the oldest unconfirmed frame", resp.GetSequence(), len(resp.GetResults())))
			p.c.untrack(p)
			return
		}
		f := p.sent[0]
		p.sent[0] = sentFrame{}
		p.sent = p.sent[1:]
		p.mu.Unlock()
		p.settlePublished(published)

		var firstFail *PublishError
		failed := 0
		for i, r := range resp.GetResults() {
			var res PublishResult
			var err error
			if r.GetCode() != 0 {
				err = status.Error(codes.Code(r.GetCode()), r.GetError())
				if firstFail == nil {
					firstFail = &PublishError{Topic: f.msgs[i].GetTopic(), Err: err}
				}
				failed++
			} else {
				res = PublishResult{SystemID: r.GetSystemId(), Routed: int(r.GetRouted()), Duplicate: r.GetDuplicate()}
			}
			if p.opts.OnResult != nil {
				p.opts.OnResult(f.msgs[i].GetTopic(), res, err)
			}
		}
		p.settle(len(f.msgs), failed, firstFail)
	}
}

// reopen opens a new stream after the current one broke with err, if err is
// codes.Unavailable and fewer than publishAttempts streams were opened without an answer,
// waiting the reconnection back-off first; it queues the messages sent and not confirmed
// again, in front of the others, with their ids, and wakes the sender. It returns false if
// the Publisher is to fail instead.
func (p *Publisher) reopen(err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	for {
		p.mu.Lock()
		p.reopens++
		n := p.reopens
		p.mu.Unlock()
		if n >= publishAttempts {
			return false
		}
		wait := min(p.c.cfg.backoffMin<<(n-1), p.c.cfg.backoffMax)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return false
		}
		stream, err := p.c.api.PublishStream(p.ctx)
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				return false
			}
			continue
		}
		p.mu.Lock()
		var again []*pb.PublishRequest
		for _, f := range p.sent {
			again = append(again, f.msgs...)
		}
		p.queue = append(again, p.queue...)
		p.sent, p.quiet, p.flushReq = nil, 0, p.flushReq || p.opts.ErrorsOnly
		p.stream, p.halfDone = stream, false
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
		return true
	}
}

// settlePublished settles the messages of quiet frames that needed no answer.
func (p *Publisher) settlePublished(frames []sentFrame) {
	n := 0
	for _, f := range frames {
		n += len(f.msgs)
		if p.opts.OnResult != nil {
			for _, m := range f.msgs {
				p.opts.OnResult(m.GetTopic(), PublishResult{}, nil)
			}
		}
	}
	if n > 0 {
		p.settle(n, 0, nil)
	}
}

// settle records n settled messages, failed of them failures, and frees their window slots.
func (p *Publisher) settle(n, failed int, first *PublishError) {
	p.mu.Lock()
	p.settled += uint64(n)
	p.failed += failed
	if p.first == nil {
		p.first = first
	}
	close(p.progress)
	p.progress = make(chan struct{})
	p.mu.Unlock()
	for range n {
		<-p.slots
	}
}

// fail ends the publisher after the stream ended with err (io.EOF after a clean close): the
// messages still queued or unconfirmed fail.
func (p *Publisher) fail(err error) {
	p.mu.Lock()
	var lost []*pb.PublishRequest
	var published []sentFrame
	for _, f := range p.sent {
		if f.quiet && errors.Is(err, io.EOF) { // a clean end: the broker handled every frame
			published = append(published, f)
			continue
		}
		lost = append(lost, f.msgs...)
	}
	lost = append(lost, p.queue...)
	p.sent, p.queue = nil, nil
	if errors.Is(err, io.EOF) {
		p.err = ErrClosed
		err = status.Error(codes.Unavailable, "the broker ended the publish stream")
	} else {
		p.err = p.c.wrap("publish stream broke (open a new Publisher to go on)", err)
	}
	p.mu.Unlock()
	p.settlePublished(published)

	var first *PublishError
	if len(lost) > 0 {
		msgErr := fmt.Errorf("the stream ended before the broker confirmed the message, which may or may not have been published: %w", err)
		first = &PublishError{Topic: lost[0].GetTopic(), Err: msgErr}
		if p.opts.OnResult != nil {
			for _, m := range lost {
				p.opts.OnResult(m.GetTopic(), PublishResult{}, msgErr)
			}
		}
	}
	p.settle(len(lost), len(lost), first)
	close(p.done)
}
