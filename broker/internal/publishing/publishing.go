// Package publishing holds the steps of a publish that every engine takes the same way
// before it routes a message, so that a message meets the same checks and the same plugins
// whatever the engine: refuse while shutting down, check the message against the Limits, run
// the OnPublish hooks, check what they changed. The engine calls these steps and routes what
// comes out of them itself, then the messages the hooks emitted: the flow of a publish goes
// from the engine down to this package and back with a value, never through a callback.
package publishing

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// HookSlot holds an engine's plugin chain (broker.Engine.SetHooks), swapped atomically: a
// message runs through the chain it loaded, whole.
type HookSlot struct{ p atomic.Pointer[broker.Hooks] }

// Set installs h; nil removes the chain.
func (s *HookSlot) Set(h broker.Hooks) {
	if h == nil {
		s.p.Store(nil)
		return
	}
	s.p.Store(&h)
}

// Load returns the chain installed, or nil.
func (s *HookSlot) Load() broker.Hooks {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return nil
}

// Start gives hooks that also run on their own time, outside any publish (the plugin chain's
// on_tick hook: plugins.Chain.Start), the function through which what they emit is
// published: emit, the engine's, routes it as what OnAck returns, without OnPublish, so
// that no plugin loops. Every engine's SetHooks calls it; hooks installed in one engine
// after another publish through the last. Such hooks' Start must not block.
func Start(h broker.Hooks, emit func([]broker.Draft)) {
	if t, ok := h.(interface{ Start(func([]broker.Draft)) }); ok {
		t.Start(emit)
	}
}

// Gate is an engine's side of the steps before routing. Its fields are the engine's own.
type Gate struct {
	Limits  *broker.Limits
	Hooks   *HookSlot
	Closing *atomic.Bool // set when the engine no longer accepts publishes
	Dedupe  *Dedupe      // the message ids published (nil: ids are ignored)
	// Now is the time of day, Unix nanoseconds, against which a Draft.DeliverAt is read
	// (nil: time.Now).
	Now func() int64
}

// Msg is a message through the gate: to route, or, with Drop set, dropped by a plugin's
// verdict (DroppedBy and DropReason say which and why), which the engine counts and answers
// as broker.PublishResult says.
type Msg struct {
	Topic   string
	Payload []byte
	Headers broker.Headers
	HB      int    // the sum of the lengths of its header names and values
	ID      string // broker.Draft.ID: the JetStream engine stores it as Nats-Msg-Id
	Key     string // broker.Draft.Key
	TTL     time.Duration
	Prio    uint8 // broker.Draft.Priority
	// Delay is how long after now the engine is to publish it (Draft.DeliverAfter or
	// DeliverAt, checked): 0 for at once.
	Delay time.Duration

	Drop                  bool
	DroppedBy, DropReason string
}

// One passes one message through the gate: it returns the message to route, or why it may
// not be routed, and what the hooks emitted, to be routed after it (see Emitted) whatever
// became of the message, unless a plugin failed.
func (g *Gate) One(topic string, payload []byte, headers broker.Headers) (Msg, []broker.Draft, error) {
	hb, err := g.admit(topic, payload, headers)
	if err != nil {
		return Msg{}, nil, err
	}
	h := g.Hooks.Load()
	if h == nil {
		return Msg{Topic: topic, Payload: payload, Headers: headers, HB: hb}, nil, nil
	}
	d := broker.Draft{Topic: topic, Payload: payload, Headers: headers}
	v, herr := h.OnPublish(&d)
	m, err := g.afterHooks(&d, v, herr)
	return m, emits(v, herr), err
}

// Emitted checks the messages hooks emitted, one by one as the engine routes them: each comes
// with nil, ready to route (without OnPublish, so that a plugin cannot loop), or with why it
// may not be; the engine logs the latter, as no publisher is there to be told.
func (g *Gate) Emitted(ds []broker.Draft) iter.Seq2[Msg, error] {
	return func(yield func(Msg, error) bool) {
		for _, d := range ds {
			hb, err := g.Limits.CheckMessage(d.Topic, d.Payload, d.Headers)
			if err == nil {
				err = broker.ValidateKey(d.Key)
			}
			if !yield(Msg{Topic: d.Topic, Payload: d.Payload, Headers: d.Headers, HB: hb, Key: d.Key}, err) {
				return
			}
		}
	}
}

// priorityText shows a priority the transport took from the wire: it keeps what is over 255
// as 255 (never wrapped into range).
func priorityText(p uint8) string {
	if p == 255 {
		return "255 or more"
	}
	return strconv.Itoa(int(p))
}

// checkTTL refuses an invalid TTL.
func checkTTL(ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: ttl must be a valid duration of zero (none) or more", broker.ErrInvalidMessage)
	}
	return nil
}

// checkDelay refuses an invalid delay (Draft.DeliverAfter, DeliverAt), one past the
// broker's max_delay; it returns how long from now the message is to wait (0: publish now).
func (g *Gate) checkDelay(after time.Duration, at int64) (time.Duration, error) {
	switch {
	case at == -2: // broker.Draft.DeliverAt
		return 0, fmt.Errorf("%w: deliver_after and deliver_at are both set; give one of them", broker.ErrInvalidMessage)
	case after < 0:
		return 0, fmt.Errorf("%w: deliver_after must be a valid duration of zero (publish now) or more", broker.ErrInvalidMessage)
	case at < 0:
		return 0, fmt.Errorf("%w: deliver_at is not a valid timestamp", broker.ErrInvalidMessage)
	}
	d, what := after, "deliver_after"
	if at != 0 {
		now := time.Now().UnixNano()
		if g.Now != nil {
			now = g.Now()
		}
		d, what = time.Duration(max(at-now, 0)), "deliver_at" // at > 0: no overflow
	}
	switch {
	case d == 0:
		return 0, nil
	case d > g.Limits.MaxDelay:
		return 0, fmt.Errorf("%w: %s is %v away, more than the broker's limit of %v (limits { max_delay }); publish it later, or raise max_delay",
			broker.ErrInvalidMessage, what, d.Round(time.Second), g.Limits.MaxDelay)
	}
	return d, nil
}

func (g *Gate) admit(topic string, payload []byte, headers broker.Headers) (int, error) {
	if g.Closing.Load() {
		return 0, fmt.Errorf("%w: not accepting publishes; retry against the restarted broker", broker.ErrShuttingDown)
	}
	return g.Limits.CheckMessage(topic, payload, headers)
}

// afterHooks checks what the hooks made of d, given their verdict v and error err.
func (g *Gate) afterHooks(d *broker.Draft, v broker.PublishVerdict, err error) (Msg, error) {
	if err != nil {
		return Msg{}, err
	}
	if err := g.Limits.CheckPayload(len(d.Payload), true); err != nil {
		return Msg{}, err
	}
	if v.Drop {
		return Msg{Topic: d.Topic, Drop: true, DroppedBy: v.Plugin, DropReason: v.Reason}, nil
	}
	hb, err := g.Limits.CheckHeaders(d.Headers)
	if err != nil {
		return Msg{}, err
	}
	if err := broker.ValidateKey(d.Key); err != nil {
		return Msg{}, fmt.Errorf("after the plugins ran: %w", err)
	}
	return Msg{Topic: d.Topic, Payload: d.Payload, Headers: d.Headers, HB: hb, Key: d.Key}, nil
}

// emits returns what the hooks emitted, given the error they returned: nothing if they
// failed (a plugin's refusal, a RejectError, is a verdict like any other).
func emits(v broker.PublishVerdict, err error) []broker.Draft {
	var rej *broker.RejectError
	if err == nil || errors.As(err, &rej) {
		return v.Emit
	}
	return nil
}

// Batch is the gate's work on one PublishBatch frame: the messages that passed, in the
// frame's order, for the engine to route (or count as dropped), and what the hooks emitted.
type Batch struct {
	Msgs []Msg
	At   []int // At[j] is the index in the frame of Msgs[j]

	drafts   []broker.Draft
	verdicts []broker.PublishVerdict
	errs     []error
	at       []int // index in the frame of drafts[i]
	emitted  []broker.Draft

	dedupe *Dedupe
	own    []idAt // the ids this frame publishes first
	dups   []idAt // the ids of this frame published already, or being published
}

// idAt is the dedupe entry of message i of a frame (and, for a duplicate whose first is
// under way, what to wait on).
type idAt struct {
	i    int
	k    idKey
	wait <-chan struct{}      // a duplicate's first publish is under way: closed when settled
	res  broker.PublishResult // a duplicate's, when its first was settled already
}

var batches = sync.Pool{New: func() any { return new(Batch) }}

// Batch passes a frame through the gate, as One would message by message, writing why a
// message may not be routed to errs[i] (len(errs) == len(frame)); the hooks see the whole
// frame in one OnPublishBatch call. A message whose ID was published already (or is being
// published) goes neither to the hooks nor into b.Msgs: Settle answers it. The engine routes
// b.Msgs, calls b.Settle, routes b.Emitted(), then calls b.Release.
func (g *Gate) Batch(frame []broker.Draft, errs []error) *Batch {
	b := batches.Get().(*Batch)
	b.dedupe = g.Dedupe
	h := g.Hooks.Load()
	var now time.Time // the frame's, for its ids
	for i, m := range frame {
		hb, err := g.admit(m.Topic, m.Payload, m.Headers)
		if err == nil && m.Key != "" {
			err = broker.ValidateKey(m.Key)
		}
		if err == nil && m.TTL != 0 {
			err = checkTTL(m.TTL)
		}
		if err == nil && m.Priority > grouping.MaxPriority {
			err = fmt.Errorf("%w: priority %s: a message's priority is 0 (the default) to %d, higher first", broker.ErrInvalidMessage, priorityText(m.Priority), grouping.MaxPriority)
		}
		var delay time.Duration
		if err == nil && (m.DeliverAfter != 0 || m.DeliverAt != 0) {
			delay, err = g.checkDelay(m.DeliverAfter, m.DeliverAt)
			m.DeliverAfter, m.DeliverAt = delay, 0 // m is this loop's copy: the hooks' draft carries it
		}
		errs[i] = err
		if err == nil && m.ID != "" && b.dedupe != nil {
			if now.IsZero() {
				now = b.dedupe.now()
			}
			k, mine, wait, res := b.dedupe.begin(m.ID, now)
			if !mine {
				b.dups = append(b.dups, idAt{i: i, k: k, wait: wait, res: res})
				continue
			}
			b.own = append(b.own, idAt{i: i, k: k})
		}
		switch {
		case err != nil:
		case h == nil:
			b.Msgs = append(b.Msgs, Msg{Topic: m.Topic, Payload: m.Payload, Headers: m.Headers, HB: hb, ID: m.ID, Key: m.Key, TTL: m.TTL, Prio: m.Priority, Delay: delay})
			b.At = append(b.At, i)
		default:
			b.drafts = append(b.drafts, m)
			b.at = append(b.at, i)
		}
	}
	if len(b.drafts) == 0 {
		return b
	}
	b.verdicts = append(b.verdicts, make([]broker.PublishVerdict, len(b.drafts))...)
	b.errs = append(b.errs, make([]error, len(b.drafts))...)
	if len(b.drafts) == 1 {
		b.verdicts[0], b.errs[0] = h.OnPublish(&b.drafts[0])
	} else {
		h.OnPublishBatch(b.drafts, b.verdicts, b.errs)
	}
	for j := range b.drafts {
		m, err := g.afterHooks(&b.drafts[j], b.verdicts[j], b.errs[j])
		b.emitted = append(b.emitted, emits(b.verdicts[j], b.errs[j])...)
		if err != nil {
			errs[b.at[j]] = err
			continue
		}
		m.ID, m.TTL, m.Prio, m.Delay = frame[b.at[j]].ID, frame[b.at[j]].TTL, frame[b.at[j]].Priority, b.drafts[j].DeliverAfter
		b.Msgs = append(b.Msgs, m)
		b.At = append(b.At, b.at[j])
	}
	return b
}

// Emitted returns what the hooks emitted over the frame, in order, for Gate.Emitted.
func (b *Batch) Emitted() []broker.Draft { return b.emitted }

// Settle records the outcome of the frame's messages with ids in the dedupe table, given
// every message's result and error as the engine routed the frame (res[i], errs[i]), then
// answers the frame's duplicates with their first publish's result, waiting for those still
// under way elsewhere. It settles the frame's own ids first: a frame never waits for an id
// it holds itself, and two frames never wait for each other.
func (b *Batch) Settle(res []broker.PublishResult, errs []error) {
	if len(b.own) > 0 {
		b.dedupe.settle(b.own, res, errs)
	}
	for _, x := range b.dups {
		res[x.i], errs[x.i] = b.dedupe.duplicate(x)
	}
}

// Release clears the batch (it holds messages) and returns it to the pool.
func (b *Batch) Release() {
	clear(b.Msgs)
	clear(b.drafts)
	clear(b.verdicts)
	clear(b.errs)
	clear(b.emitted)
	clear(b.own)
	clear(b.dups)
	b.Msgs, b.At, b.emitted = b.Msgs[:0], b.At[:0], b.emitted[:0]
	b.own, b.dups, b.dedupe = b.own[:0], b.dups[:0], nil
	b.drafts, b.verdicts, b.errs, b.at = b.drafts[:0], b.verdicts[:0], b.errs[:0], b.at[:0]
	batches.Put(b)
}
