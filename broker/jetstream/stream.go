package jetstream

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/internal/streaming"
)

// Stream is one subscriber connection carrying any number of subscriptions (broker.Stream).
// Fanout deliveries and group members' deliveries share its buffer, in arrival order.
type Stream struct {
	e    *Engine
	id   uint64
	size func(*broker.Message) int

	mu        lockrank.Mutex[lockrank.JetStreamStream] // guards everything below; taken under group.mu, never the reverse
	buf       []broker.Delivery
	head      int
	fanBytes  int // payload bytes of the fanout deliveries buffered
	fanCount  int
	ready     chan struct{}
	fin       streaming.End // whether and why it ended
	closeOnce sync.Once

	// subs are the open subscriptions by id, under a lock of their own that may be taken
	// under mu, never the reverse: register adds under mu, so none is added once fin ended.
	subs streaming.Subs[*Subscription, lockrank.JetStreamStreamSubs]
}

// NewStream opens a stream to carry subscriptions.
func (e *Engine) NewStream(size func(*broker.Message) int) broker.Stream {
	if size == nil {
		size = func(m *broker.Message) int { return len(m.Payload) }
	}
	return &Stream{e: e, id: e.streamSeq.Add(1), size: size, ready: make(chan struct{}, 1), fin: streaming.NewEnd()}
}

// pushLocked appends d and signals ready if the buffer was empty. st.mu must be held.
func (st *Stream) pushLocked(d broker.Delivery) {
	st.buf = append(st.buf, d)
	if len(st.buf)-st.head == 1 {
		select {
		case st.ready <- struct{}{}:
		default:
		}
	}
}

// Subscribe opens a subscription on the stream.
func (st *Stream) Subscribe(o broker.SubscribeOptions) (broker.Subscription, error) {
	s, err := st.e.subscribe(o, st)
	if err != nil {
		st.Refuse(o, err)
		return nil, err
	}
	return s, nil
}

// Refuse queues the event of a refused open.
func (st *Stream) Refuse(o broker.SubscribeOptions, err error) {
	ref := &Subscription{e: st.e, st: st, mode: o.Mode, refused: err, id: o.ID}
	if o.ID == "" && o.Mode == broker.Balanced {
		ref.id = o.Group
	}
	st.mu.Lock()
	if !st.fin.Ended() {
		st.pushLocked(broker.Delivery{Sub: ref})
	}
	st.mu.Unlock()
}

// register adds s to the stream and queues its opening event. Engine.mu is held.
func (st *Stream) register(s *Subscription, peer string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.fin.Ended() {
		return fmt.Errorf("%w: the stream has ended", broker.ErrSubscriptionClosed)
	}
	if err := st.subs.Add(s.id, s, peer, st.e.opts.MaxSubscriptionsPerStream, nil); err != nil {
		return err
	}
	st.e.streams[st.id] = st
	st.pushLocked(broker.Delivery{Sub: s})
	return nil
}

// Lookup returns the open subscription with this id (the only one, with id empty).
func (st *Stream) Lookup(id string) (broker.Subscription, int) { return st.subs.Lookup(id) }

// Subscriptions returns the open subscriptions.
func (st *Stream) Subscriptions() []broker.Subscription { return st.subs.List() }

// Next takes up to maxN waiting deliveries of at most maxBytes (at least one, if any wait).
func (st *Stream) Next(dst []broker.Delivery, maxN, maxBytes int) []broker.Delivery {
	st.mu.Lock()
	defer st.mu.Unlock()
	total := 0
	for st.head < len(st.buf) && maxN > 0 {
		d := st.buf[st.head]
		sz := 0
		if d.Msg != nil {
			sz = st.size(d.Msg)
		}
		if total > 0 && total+sz > maxBytes {
			break
		}
		dst = append(dst, d)
		st.buf[st.head] = broker.Delivery{}
		st.head++
		if d.Msg != nil && d.Sub.(*Subscription).g == nil {
			st.fanBytes -= len(d.Msg.Payload)
			st.fanCount--
		}
		total += sz
		maxN--
	}
	if st.head == len(st.buf) {
		st.buf, st.head = st.buf[:0], 0
		if cap(st.buf) > 4096 {
			st.buf = nil
		}
	} else if st.head >= 1024 && st.head*2 >= len(st.buf) {
		n := copy(st.buf, st.buf[st.head:])
		clear(st.buf[n:])
		st.buf, st.head = st.buf[:n], 0
	}
	return dst
}

// Ready is signalled when deliveries may be waiting.
func (st *Stream) Ready() <-chan struct{} { return st.ready }

// Done is closed when the stream has ended.
func (st *Stream) Done() <-chan struct{} { return st.fin.Done() }

// Err says why the stream ended.
func (st *Stream) Err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fin.Err()
}

// Close ends the stream and its subscriptions; members' unacked messages go at once to the
// other members.
func (st *Stream) Close() {
	st.end(broker.ErrSubscriptionClosed)
	st.detachAll()
}

func (st *Stream) end(err error) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fin.End(err)
}

// detachAll removes every subscription of an ended stream, once. No lock may be held.
func (st *Stream) detachAll() {
	st.closeOnce.Do(func() {
		for _, s := range st.subs.Take() {
			s.detach()
		}
		st.e.mu.Lock()
		delete(st.e.streams, st.id)
		st.e.mu.Unlock()
		st.mu.Lock()
		clear(st.buf)
		st.buf, st.head, st.fanBytes, st.fanCount = nil, 0, 0, 0
		st.mu.Unlock()
	})
}

// deliverFanout buffers a fanout delivery, or applies the slow-consumer policy.
func (st *Stream) deliverFanout(s *Subscription, m *broker.Message) {
	o := &st.e.opts
	st.mu.Lock()
	if st.fin.Ended() || s.closed {
		st.mu.Unlock()
		return
	}
	if st.fanCount >= o.FanoutBufferMessages || st.fanBytes+len(m.Payload) > o.FanoutBufferBytes {
		s.dropped++
		if o.DropSlowConsumers {
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		if st.end(fmt.Errorf("%w: the subscriber fell behind by more than its buffer (fanout { buffer_messages, buffer_bytes }); read faster, or raise the limits", broker.ErrSlowConsumer)) {
			st.e.log.Warn("disconnecting slow consumer", "subscription", s.id, "limit_messages", o.FanoutBufferMessages, "limit_bytes", o.FanoutBufferBytes)
			st.e.wg.Go(st.detachAll) // not on the dispatcher, which detaching waits for
		}
		return
	}
	s.delivered++
	st.e.fanoutDelivered.Add(1)
	st.fanCount++
	st.fanBytes += len(m.Payload)
	st.pushLocked(broker.Delivery{Msg: m, Sub: s, Attempt: 1})
	st.mu.Unlock()
}

// removeLocked drops what the stream buffers for s, calling f on each message removed.
func (st *Stream) removeLocked(s *Subscription, f func(broker.Delivery)) {
	kept := st.buf[:st.head]
	for _, d := range st.buf[st.head:] {
		if d.Sub != s || d.Msg == nil {
			kept = append(kept, d)
			continue
		}
		if s.g == nil {
			st.fanBytes -= len(d.Msg.Payload)
			st.fanCount--
		}
		if f != nil {
			f(d)
		}
	}
	clear(st.buf[len(kept):])
	st.buf = kept
}

// Subscription is one open subscription of a Stream: fanout, or a member of a group.
type Subscription struct {
	e        *Engine
	st       *Stream
	id       string
	mode     broker.Mode
	patterns []string
	refused  error

	g   *group
	m   *member
	set broker.Settings

	delivered, dropped uint64 // fanout, under st.mu
	closed             bool   // under st.mu
}

func (s *Subscription) ID() string        { return s.id }
func (s *Subscription) Mode() broker.Mode { return s.mode }
func (s *Subscription) Refused() error    { return s.refused }

// Settings returns the options in force.
func (s *Subscription) Settings() broker.Settings {
	if s.g != nil {
		return s.set
	}
	return broker.Settings{ID: s.id, MemberID: s.id, Mode: broker.Fanout, Patterns: s.patterns}
}

// Close ends the subscription; a member's unacked messages go at once to the others.
func (s *Subscription) Close() {
	if s.refused != nil {
		return
	}
	st := s.st
	st.mu.Lock()
	st.subs.Remove(s.id, s)
	s.closed = true
	if s.g == nil {
		st.removeLocked(s, nil)
	}
	st.mu.Unlock()
	s.detach()
}

// firstMatch returns the first of s's patterns that matches topic.
func (s *Subscription) firstMatch(topic string) string {
	for _, p := range s.patterns {
		if broker.Pattern(p).Match(topic) {
			return p
		}
	}
	return ""
}

// subscribe opens a subscription on st.
func (e *Engine) subscribe(o broker.SubscribeOptions, st *Stream) (*Subscription, error) {
	patterns, err := e.opts.AdmitSubscribe(e.closing.Load(), &o)
	if err != nil {
		return nil, err
	}
	if err := checkDispatch(o.Dispatch); err != nil {
		return nil, err
	}
	if err := e.unavailable(); err != nil {
		return nil, err
	}
	s := &Subscription{e: e, st: st, mode: o.Mode, patterns: patterns}
	if o.Mode == broker.Balanced {
		return e.join(o, patterns, s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if o.ID, err = grouping.FanoutID(o.ID, &e.autoID, e.fanouts, e.groups); err != nil {
		return nil, err
	}
	s.id = o.ID
	// The NATS subscriptions first: a pattern NATS refuses refuses the open.
	for _, p := range patterns {
		ps := e.patSubs[p]
		if ps == nil {
			sub, err := e.nc.ChanSubscribe(e.subjF+p, e.fanCh)
			if err != nil {
				e.releasePatternsLocked(s, p)
				return nil, fmt.Errorf("%w: NATS refused the subscription to %q: %v", broker.ErrUnavailable, p, err)
			}
			_ = sub.SetPendingLimits(-1, -1)
			ps = &patSub{pattern: p, sub: sub}
			e.patSubs[p] = ps
		}
		ps.subs = append(slices.Clip(ps.subs), s)
	}
	// Make sure the server has the interest before the subscriber hears "subscribed" (which
	// register queues), so that what is published after it reaches it.
	if err := e.nc.Flush(); err != nil {
		e.log.Warn("flush after subscribing", "error", err)
	}
	if err := st.register(s, o.Peer); err != nil {
		e.releasePatternsLocked(s, "")
		return nil, err
	}
	e.fanouts[o.ID] = s
	e.changed()
	return s, nil
}

// releasePatternsLocked removes s from its patterns' NATS subscriptions, up to (not
// including) pattern until ("" for all), unsubscribing those no subscription needs.
func (e *Engine) releasePatternsLocked(s *Subscription, until string) {
	for _, p := range s.patterns {
		if p == until {
			return
		}
		ps := e.patSubs[p]
		if ps == nil {
			continue
		}
		i := slices.Index(ps.subs, s)
		if i < 0 {
			continue
		}
		ps.subs = slices.Delete(slices.Clone(ps.subs), i, i+1)
		if len(ps.subs) == 0 {
			_ = ps.sub.Unsubscribe()
			delete(e.patSubs, p)
		}
	}
}

// detach removes s from routing; a member leaves its group.
func (s *Subscription) detach() {
	e := s.e
	if s.g != nil {
		s.g.leave(s.m)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fanouts[s.id] != s {
		return
	}
	delete(e.fanouts, s.id)
	e.releasePatternsLocked(s, "")
	e.changed()
}

// Streams lists the open streams of this node that carry subscriptions.
func (e *Engine) Streams() []broker.StreamInfo {
	var out []broker.StreamInfo
	for _, st := range e.allStreams() {
		st.mu.Lock()
		si := broker.StreamInfo{ID: strconv.FormatUint(st.id, 10), Peer: st.subs.Peer(), Buffered: len(st.buf) - st.head}
		for _, sub := range st.subs.List() {
			si.Subscriptions = append(si.Subscriptions, sub.Settings())
		}
		st.mu.Unlock()
		if len(si.Subscriptions) == 0 {
			continue
		}
		slices.SortFunc(si.Subscriptions, func(a, b broker.Settings) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, si)
	}
	slices.SortFunc(out, func(a, b broker.StreamInfo) int {
		x, _ := strconv.ParseUint(a.ID, 10, 64)
		y, _ := strconv.ParseUint(b.ID, 10, 64)
		return cmp.Compare(x, y)
	})
	return out
}

// Ack settles deliveries by system_id: the member's, or another member's of its group (a
// message redelivered elsewhere that this member processed after all). Ids the group does
// not hold (unknown, malformed, already acked, redelivered to another member) are skipped
// and counted: a late or duplicate ack never ends a stream. A fanout subscription takes none.
func (s *Subscription) Ack(ids []string) (skipped int) {
	if s.m == nil {
		return 0
	}
	seqs, bad := grouping.Seqs(ids, s.m.g.parseID)
	return s.m.g.ack(s.m, seqs) + bad
}

// Nack gives the member's deliveries back to the group, to be redelivered after delay (at
// once if zero, the group's back-off permitting); skipped as Ack.
func (s *Subscription) Nack(ids []string, delay time.Duration, reason string) (skipped int) {
	if s.m == nil {
		return 0
	}
	seqs, bad := grouping.Seqs(ids, s.m.g.parseID)
	return s.m.g.nack(s.m, seqs, delay, reason) + bad
}

// Touch restarts the ack deadline of the member's deliveries: a full AckDeadline from now.
func (s *Subscription) Touch(ids []string) (skipped int) {
	if s.m == nil {
		return 0
	}
	seqs, bad := grouping.Seqs(ids, s.m.g.parseID)
	return s.m.g.touch(s.m, seqs) + bad
}
