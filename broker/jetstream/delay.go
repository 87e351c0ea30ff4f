package jetstream

// Delayed publish (Draft.DeliverAfter, DeliverAt) on JetStream, with NATS's own message
// schedules (nats-server 2.12 and later): a delayed message is stored, when it is published,
// in a stream of its own (<Stream>_DELAYED) as a one-shot schedule ("Nats-Schedule: @at T")
// whose target is <prefix>.t.<topic> in the same stream. At T the stream's leader stores
// the message on its target and purges the schedule; a durable pull consumer every node
// shares takes it from there, and whichever node gets it routes it as a message published
// then (without the hooks, which ran at its publish): to the fanout subscriptions and the
// groups that match at that moment, as on the memory engine. Then it is acked, and the
// work-queue stream lets it go.
//
// So a delayed message survives a restart and, with replicas 3, the loss of a node: the
// schedule is in the stream, the stream's leader fires it, and a fired message not yet
// routed is redelivered to a node after the consumer's ack wait. Routing one twice (a node
// gone between routing and its ack) stores it once for the groups: its store carries a
// Nats-Msg-Id made of the fired message's sequence, which JetStream deduplicates within the
// group stream's duplicate window; a fanout subscription may then see it twice. See
// RATIONALE.md, "Why is a delayed message published at its time?".

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
)

const (
	// delayConsumer is the durable consumer of fired messages every node pulls from.
	delayConsumer = "tb-delayed"
	// delayAckWait is how long a fired message taken by a node that then went away waits
	// before another node routes it.
	delayAckWait = 30 * time.Second
	// delayFetch is how many fired messages a node routes at once (one round trip to
	// JetStream for the groups' stores).
	delayFetch = 256
	// delayStale is how old the delayed stream's counts may be when a delayed publish is
	// checked against limits { max_delayed, max_delayed_bytes }.
	delayStale = 200 * time.Millisecond
)

// delays is the engine's side of its delayed stream.
type delays struct {
	stream   jetstream.Stream
	cons     jetstream.Consumer
	subjW    string          // <prefix>.w.<unique>: a schedule, one per delayed message
	subjT    string          // <prefix>.t.<topic>: a fired message, to be routed
	idPrefix string          // of the Nats-Msg-Id of a fired message's stores (see fire)
	ctx      context.Context // fireDue's, cancelled by stop
	stop     context.CancelFunc
	msgs     atomic.Int64 // the stream's messages as last read, plus this node's since
	bytes    atomic.Int64
	read     atomic.Int64 // when they were read, Unix nanoseconds
	reading  atomic.Bool
	refused  atomic.Uint64 // fired messages every target refused (full groups): logged
}

// ensureDelays creates the delayed stream and its consumer, or opens them; New starts the
// goroutine that routes what falls due (fireDue) once it knows the groups.
func (e *Engine) ensureDelays() error {
	d := &delays{subjW: e.opts.Prefix + ".w.", subjT: e.opts.Prefix + ".t."}
	cfg := jetstream.StreamConfig{Name: e.opts.Stream + "_DELAYED", Subjects: []string{d.subjW + "*", d.subjT + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: e.opts.Replicas,
		// Message schedules need discard old and roll-ups; nothing is ever discarded, as the
		// stream has no limit of its own: the engine checks max_delayed and
		// max_delayed_bytes before it stores a message (over).
		Discard: jetstream.DiscardOld, AllowMsgSchedules: true, AllowRollup: true,
		Duplicates:  e.opts.DedupeWindow, // a retried publish's message id
		Description: "tinybroker: delayed messages, until they are published"}
	if e.opts.MemoryStorage {
		cfg.Storage = jetstream.MemoryStorage
	}
	s, err := e.openStream(cfg)
	if err != nil {
		return err
	}
	if !s.CachedInfo().Config.AllowMsgSchedules {
		return fmt.Errorf("%w: JetStream stream %s exists without message schedules (allow_msg_schedules); delete it, or choose another stream name", broker.ErrUnavailable, cfg.Name)
	}
	d.stream = s
	// The stream's creation time makes the ids of its fired messages unique across a stream
	// deleted and made again within the groups' duplicate window.
	d.idPrefix = "delayed:" + strconv.FormatInt(s.CachedInfo().Created.UnixNano(), 36) + ":"
	ctx, cancel := e.ctx()
	defer cancel()
	d.cons, err = s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: delayConsumer, FilterSubject: d.subjT + ">",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: delayAckWait, MaxDeliver: -1, MaxAckPending: 4 * delayFetch,
		Description: "tinybroker: delayed messages due, for a node to publish"})
	if err != nil {
		return fmt.Errorf("%w: JetStream consumer %s of stream %s: %v", broker.ErrUnavailable, delayConsumer, cfg.Name, err)
	}
	if e.opts.MaxDelayedBytes <= 0 {
		// 1 GiB, or an eighth of what JetStream may store if that is less.
		e.opts.MaxDelayedBytes = 1 << 30
		if e.storeLimit > 0 {
			e.opts.MaxDelayedBytes = min(e.opts.MaxDelayedBytes, e.storeLimit/8)
		}
	}
	d.ctx, d.stop = context.WithCancel(context.Background())
	e.delays = d
	return nil
}

// storeDelayed sends m, which passed the gate with m.Delay > 0, to the delayed stream in
// batch b at index i, or says why not: one past limits { max_delayed, max_delayed_bytes }
// is refused with ErrLimit.
func (e *Engine) storeDelayed(b *storeBatch, i int, m *publishing.Msg, now int64, deadline time.Time) error {
	d := e.delays
	h := encodeHeaders(m.Headers, now)
	setKey(h, m.Key)
	setTTL(h, m.TTL)
	setPriority(h, m.Prio)
	h["Nats-Schedule"] = []string{"@at " + time.Unix(0, now+int64(m.Delay)).UTC().Format(time.RFC3339Nano)}
	h["Nats-Schedule-Target"] = []string{d.subjT + m.Topic}
	if m.ID != "" { // a retry is stored once, on every node
		h[jetstream.MsgIDHeader] = []string{natsMsgID(m.ID)}
	}
	msg := &nats.Msg{Subject: d.subjW + nuid.Next(), Data: m.Payload, Header: h}
	size := int64(msg.Size())
	if err := d.take(e, size); err != nil {
		return err
	}
	if err := e.st.send(e.nc, b, i, msg, deadline); err != nil {
		d.give(size)
		return e.storeError(err)
	}
	return nil
}

// delayedResult is the answer to a delayed message sent as storeDelayed does, once its store
// was answered: its system_id names the schedule. The message the schedule publishes is
// stored anew, and delivered with that store's own system_id, as NATS's schedules do.
func (e *Engine) delayedResult(b *storeBatch, i int) (broker.PublishResult, error) {
	switch {
	case b.errs[i] != nil:
		return broker.PublishResult{}, e.storeError(b.errs[i])
	case b.dups[i]:
		return broker.PublishResult{Seq: b.seqs[i], SystemID: e.ids.format(b.seqs[i], e.ids.delayed), Duplicate: true}, nil
	}
	return broker.PublishResult{Seq: b.seqs[i], SystemID: e.ids.format(b.seqs[i], e.ids.delayed)}, nil // counted published when routed
}

// take counts a delayed message of size bytes in, or says which limit it would pass. The
// counts are the stream's, read at most delayStale ago, and this node's stores since: in a
// cluster the nodes together may pass a limit by what the others stored in that time.
func (d *delays) take(e *Engine, size int64) error {
	d.refresh(e)
	l := &e.opts.Limits
	for {
		n := d.msgs.Load()
		if n >= int64(l.MaxDelayed) {
			return d.refusal(fmt.Sprintf("its limit of %d delayed messages (limits { max_delayed })", l.MaxDelayed))
		}
		if d.bytes.Load()+size > l.MaxDelayedBytes {
			return d.refusal(fmt.Sprintf("its limit of %d bytes of delayed messages (limits { max_delayed_bytes })", l.MaxDelayedBytes))
		}
		if d.msgs.CompareAndSwap(n, n+1) {
			d.bytes.Add(size)
			return nil
		}
	}
}

func (d *delays) refusal(over string) error {
	return fmt.Errorf("%w: the broker holds %d delayed messages of %d bytes, and this one would take it past %s; publish it later, or with a shorter delay",
		broker.ErrLimit, d.msgs.Load(), d.bytes.Load(), over)
}

// give takes back what take counted for a message not stored.
func (d *delays) give(size int64) {
	d.msgs.Add(-1)
	d.bytes.Add(-size)
}

// refresh reads the stream's counts if they are older than delayStale, one caller at a time
// (the others go on with the old counts).
func (d *delays) refresh(e *Engine) {
	if time.Now().UnixNano()-d.read.Load() < int64(delayStale) || !d.reading.CompareAndSwap(false, true) {
		return
	}
	defer d.reading.Store(false)
	ctx, cancel := e.ctx()
	defer cancel()
	info, err := d.stream.Info(ctx)
	if err != nil {
		return // the old counts stand; the store that follows meets the same trouble
	}
	d.msgs.Store(int64(info.State.Msgs))
	d.bytes.Store(int64(info.State.Bytes))
	d.read.Store(time.Now().UnixNano())
}

// fireDue routes the delayed messages JetStream fires, in batches, until stopDelays.
func (e *Engine) fireDue() {
	ctx := e.delays.ctx
	var got []jetstream.Msg
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		batch, err := e.delays.cons.Fetch(delayFetch, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				e.log.Debug("delayed messages: pull failed; trying again", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		ch := batch.Messages()
		for jm := range ch {
			// What else has arrived goes in the same batch.
			got = append(got[:0], jm)
		more:
			for len(got) < delayFetch {
				select {
				case jm, ok := <-ch:
					if !ok {
						break more
					}
					got = append(got, jm)
				default:
					break more
				}
			}
			e.fire(got)
		}
		cancel()
	}
}

// fire routes fired messages as published now, and acks each it is done with: routed, or
// refused by every target (full groups; logged and counted, as no publisher is there to be
// told). One JetStream did not store for its groups is nacked, to be routed again shortly.
func (e *Engine) fire(got []jetstream.Msg) {
	d := e.delays
	ms := make([]publishing.Msg, len(got))
	for i, jm := range got {
		nh := jm.Headers()
		h, _, hb := decodeHeaders(nh)
		ms[i] = publishing.Msg{Topic: strings.TrimPrefix(jm.Subject(), d.subjT), Payload: jm.Data(), Headers: h, HB: hb, Key: keyOf(nh), TTL: ttlOf(nh), Prio: priorityOf(nh)}
		if meta, err := jm.Metadata(); err == nil {
			ms[i].ID = d.idPrefix + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
	}
	res, errs := make([]broker.PublishResult, len(ms)), make([]error, len(ms))
	e.routeBatch(ms, res, errs)
	for i, jm := range got {
		switch err := errs[i]; {
		case err == nil:
		case errors.Is(err, broker.ErrUnavailable) && !e.closing.Load():
			_ = jm.NakWithDelay(time.Second)
			continue
		default:
			d.refused.Add(1)
			e.log.Warn("delayed message refused when due", "topic", ms[i].Topic, "error", err)
		}
		_ = jm.Ack()
	}
}

// stopDelays stops routing what falls due (Shutdown): another node, or this one restarted,
// routes it.
func (e *Engine) stopDelays() {
	if e.delays != nil {
		e.delays.stop()
	}
}

// delayedStats returns how many delayed messages the stream holds, their bytes, and how many
// this node found refused by every target when due.
func (e *Engine) delayedStats() (n int, bytes int64, refused uint64) {
	d := e.delays
	d.refresh(e)
	return int(d.msgs.Load()), d.bytes.Load(), d.refused.Load()
}
