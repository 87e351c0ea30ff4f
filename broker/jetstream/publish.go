package jetstream

// The path of a publish: through the gate every engine shares (broker/internal/publishing),
// stored in JetStream for the groups that match, then to the local fanout subscriptions.

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
)

// Publish validates the message, runs the OnPublish hook and routes it.
func (e *Engine) Publish(topic string, payload []byte, headers map[string]string) (broker.PublishResult, error) {
	m, emit, err := e.gate.One(topic, payload, broker.MakeHeaders(headers))
	var res [1]broker.PublishResult
	if err == nil {
		errs := [1]error{}
		e.routeBatch([]publishing.Msg{m}, res[:], errs[:])
		err = errs[0]
	}
	e.emit(emit)
	return res[0], err
}

// PublishBatch publishes a frame in order; see broker.Engine.
func (e *Engine) PublishBatch(frame []broker.Draft, res []broker.PublishResult, errs []error) {
	clear(res)
	bt := e.gate.Batch(frame, errs)
	defer bt.Release()
	if len(bt.Msgs) == len(frame) { // every message passed: route in place
		e.routeBatch(bt.Msgs, res, errs)
	} else if len(bt.Msgs) > 0 {
		r, er := make([]broker.PublishResult, len(bt.Msgs)), make([]error, len(bt.Msgs))
		e.routeBatch(bt.Msgs, r, er)
		for j, i := range bt.At {
			res[i], errs[i] = r[j], er[j]
		}
	}
	bt.Settle(res, errs)
	e.emit(bt.Emitted())
}

// dedupeEvicted logs that the table of message ids forgot ids before their window ended
// (at the first eviction, then at every doubling of the count, so as not to flood the log).
func (e *Engine) dedupeEvicted(total uint64) {
	if total&(total-1) == 0 {
		e.log.Warn("the table of message ids is full: the oldest half of the ids is forgotten before its dedupe window ends, and a retry of one of them would be published again; raise limits { dedupe_max_bytes } or shorten dedupe_window",
			"dedupe_max_bytes", e.opts.DedupeMaxBytes, "dedupe_window", e.opts.DedupeWindow, "evicted_total", total)
	}
}

// emit routes the messages hooks emitted, without OnPublish; one refused is logged.
func (e *Engine) emit(ds []broker.Draft) {
	if len(ds) == 0 { // most publishes: no hook emitted anything
		return
	}
	for m, err := range e.gate.Emitted(ds) {
		if err == nil {
			_, err = e.route(&m)
		}
		if err != nil {
			e.log.Warn("message emitted by a plugin refused", "topic", m.Topic, "error", err)
		}
	}
}

// dropped answers a message dropped by a plugin's verdict, and counts it.
func (e *Engine) dropped(m *publishing.Msg) broker.PublishResult {
	e.hookDropped.Add(1)
	e.published.Add(1)
	seq := rand.Uint64() | 1
	return broker.PublishResult{Seq: seq, SystemID: e.ids.format(seq, e.ids.fanout), DroppedBy: m.DroppedBy, DropReason: m.DropReason}
}

// route publishes one valid message, as routeBatch does a frame.
func (e *Engine) route(m *publishing.Msg) (broker.PublishResult, error) {
	var res [1]broker.PublishResult
	var errs [1]error
	e.routeBatch([]publishing.Msg{*m}, res[:], errs[:])
	return res[0], errs[0]
}

// routeBatch routes messages that passed the gate in order, writing each one's result and
// error to res[i] and errs[i]; one a plugin dropped is counted and answered (dropped). Those a consumer group this node knows matches
// are stored in the stream first: every store of the batch is sent at once (asynchronous
// JetStream publishes, at most maxPendingStores outstanding in the engine), then every
// acknowledgement is awaited, so that a message is answered OK only once JetStream has it
// (with replicas 3, a quorum). Then each message goes to fanout subscribers by core NATS,
// in order, carrying its system_id. One round trip to JetStream per frame instead of one
// per message is what makes a frame of 128 publishes to a group cheap (BENCHMARKS.md).
func (e *Engine) routeBatch(ms []publishing.Msg, res []broker.PublishResult, errs []error) {
	for i := range ms {
		if ms[i].Drop {
			res[i] = e.dropped(&ms[i])
		}
	}
	if err := e.unavailable(); err != nil {
		for i := range errs {
			if !ms[i].Drop {
				errs[i] = err
			}
		}
		return
	}
	now := time.Now().UnixNano()
	var deadline time.Time // RequestTimeout from the frame's first store
	ps := make([]pendingStore, len(ms))
	var b *storeBatch              // the engine stream's stores, made for the frame's first
	var own map[*group]*storeBatch // the group streams' (storage.go), made for their first
	var plain nats.Header          // the stored headers of a message without headers of its own
	var db *storeBatch             // the delayed stream's stores (delay.go), made for the first
	for i, m := range ms {
		if m.Drop {
			continue
		}
		p := &ps[i]
		if m.Delay > 0 { // routed when due, by whichever node JetStream hands it to
			if deadline.IsZero() {
				deadline = time.Now().Add(e.opts.RequestTimeout)
			}
			if db == nil {
				db = newStoreBatch(len(ms))
			}
			errs[i] = e.storeDelayed(db, i, &m, now, deadline)
			p.delayed = errs[i] == nil
			continue
		}
		p.mr = e.match(m.Topic)
		if len(p.mr.groups) == 0 {
			continue
		}
		var skip []string
		if skip, errs[i] = e.admit(p, &m); errs[i] != nil || len(p.took) == 0 {
			continue
		}
		var h nats.Header
		if len(m.Headers) == 0 && len(skip) == 0 && m.ID == "" && m.Key == "" && m.TTL == 0 && m.Prio == 0 {
			// The same for every such message of the frame (nats.go only reads it).
			if plain == nil {
				plain = encodeHeaders(nil, now)
			}
			h = plain
		} else {
			h = encodeHeaders(m.Headers, now)
			setKey(h, m.Key)
			setTTL(h, m.TTL)
			setPriority(h, m.Prio)
			if len(skip) > 0 {
				h[hdrSkip] = []string{strings.Join(skip, ",")}
			}
			if m.ID != "" { // JetStream deduplicates it for every node of the cluster
				h[jetstream.MsgIDHeader] = []string{natsMsgID(m.ID)}
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(e.opts.RequestTimeout)
		}
		if p.shared {
			if b == nil {
				b = newStoreBatch(len(ms))
			}
			if err := e.st.send(e.nc, b, i, &nats.Msg{Subject: e.subjG + m.Topic, Data: m.Payload, Header: h}, deadline); err != nil {
				// Not sent anywhere yet: stored nowhere, the other copies are not sent either.
				errs[i] = e.storeError(err)
				p.unadmitShared() // the groups on the engine's stream; those left have their own
				for _, g := range p.took {
					g.release(p.cost, true)
				}
				p.took = nil
				continue
			}
			p.sent = true
		}
		var failed []*group // own streams it could not be sent to
		for _, g := range p.took {
			if !g.ownStream() {
				continue
			}
			gb := own[g]
			if gb == nil {
				if own == nil {
					own = make(map[*group]*storeBatch)
				}
				gb = newStoreBatch(len(ms))
				own[g] = gb
			}
			if err := e.st.send(e.nc, gb, i, &nats.Msg{Subject: g.subj + m.Topic, Data: m.Payload, Header: h}, deadline); err != nil {
				errs[i] = e.storeError(err)
				failed = append(failed, g)
				continue
			}
			p.ownSent = append(p.ownSent, g)
		}
		for _, g := range failed {
			p.unadmitGroup(g)
		}
	}
	if b != nil {
		e.st.wait(b, deadline)
	}
	for _, gb := range own {
		e.st.wait(gb, deadline)
	}
	if db != nil {
		e.st.wait(db, deadline)
	}
	for i := range ps {
		p := &ps[i]
		if p.delayed {
			res[i], errs[i] = e.delayedResult(db, i)
			continue
		}
		stores, dups := 0, 0
		if p.sent {
			switch err := b.errs[i]; {
			case err != nil:
				errs[i] = e.storeError(err)
				p.unadmitShared()
			case b.dups[i]: // stored already, through this node or another
				p.unadmitShared()
				stores, dups = stores+1, dups+1
				p.stored, p.seq, p.secret = true, b.seqs[i], e.ids.stored
			default:
				stores++
				p.stored, p.seq, p.secret = true, b.seqs[i], e.ids.stored
			}
		}
		for _, g := range p.ownSent {
			gb := own[g]
			switch err := gb.errs[i]; {
			case err != nil:
				errs[i] = e.storeError(err)
				p.unadmitGroup(g)
				continue
			case gb.dups[i]:
				p.unadmitGroup(g)
				dups++
			}
			stores++
			if !p.stored {
				p.stored, p.seq, p.secret = true, gb.seqs[i], g.secret
			}
		}
		if stores > 0 && dups == stores && errs[i] == nil {
			// Every copy was stored already: answer with the first, as JetStream does.
			res[i] = e.duplicateStored(p.seq, p.secret)
			p.dup = true
		}
	}
	for i := range ms {
		if errs[i] == nil && !ms[i].Drop && !ps[i].dup && !ps[i].delayed {
			for _, g := range ps[i].took {
				g.published.Add(1)
			}
			res[i], errs[i] = e.fanout(&ms[i], &ps[i], now)
		}
	}
}

// natsMsgID is the Nats-Msg-Id of a message of dedupe key key (broker.Draft.ID): a hash,
// which any id makes a valid NATS header value of fixed length, and which no user can make
// collide with another's key.
func natsMsgID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "tb1-" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

// duplicateStored answers a message JetStream had stored already (its Nats-Msg-Id within
// the stream's duplicate window), at stream sequence seq of the stream whose system_ids
// have secret, perhaps through another node: it is neither stored nor sent to fanout
// subscribers again. Routed is unknown (another node may have routed the first): 0.
func (e *Engine) duplicateStored(seq, secret uint64) broker.PublishResult {
	return broker.PublishResult{Seq: seq, SystemID: e.ids.format(seq, secret), Duplicate: true}
}

// pendingStore is one message of RouteBatch on its way.
type pendingStore struct {
	mr      *matchResult
	took    []*group // the groups that admitted it (see admit) and hold it still
	shared  bool     // one of them is on the engine's stream: stored there
	cost    int64    // what it costs each of them
	sent    bool     // sent to the engine's stream
	ownSent []*group // the groups with a stream of their own that it was sent to
	// Where it was stored first, once it was: its sequence there and that stream's secret.
	stored      bool
	seq, secret uint64
	dup         bool // stored already, every copy (JetStream's deduplication): seq is the first's
	delayed     bool // sent to the delayed stream instead, to be routed when due
}

// admit asks every group m matches to take it (group.admit). The groups on the engine's
// stream that refuse it are named in the message stored there (skip), so that their members
// end it unseen; a group with a stream of its own that refuses it is not sent a copy. If
// every group refused it and no fanout subscription here wants it either, the publish is
// refused with the first group's reason, as the memory engine does.
func (e *Engine) admit(p *pendingStore, m *publishing.Msg) ([]string, error) {
	p.cost = heldCost(m.Topic, m.Key, m.Payload, m.Headers, m.HB)
	var full error
	var skip []string
	for _, g := range p.mr.groups {
		if err := g.admit(p.cost); err != nil {
			if full == nil {
				full = err
			}
			if !g.ownStream() {
				skip = append(skip, g.consumer)
			}
			continue
		}
		p.took = append(p.took, g)
		p.shared = p.shared || !g.ownStream()
	}
	if len(p.took) == 0 && len(p.mr.subs) == 0 {
		e.refused.Add(1)
		return nil, full
	}
	if p.shared { // stored: the refusing groups' consumers will pass it
		for _, g := range p.mr.groups {
			if !g.ownStream() && !slices.Contains(p.took, g) {
				g.skipping(1)
			}
		}
	} else {
		skip = nil
	}
	return skip, nil
}

// heldCost is what a group holding a message is charged (grouping.MessageCost and a holder,
// as in the memory engine), computed alike at publish and when the message is settled.
func heldCost(topic, key string, payload []byte, headers broker.Headers, hb int) int64 {
	return grouping.MessageCost(topic, key, "", payload, len(headers), hb, 1) + idLen + grouping.HolderOverhead
}

// unadmitShared gives back what admit charged the groups on the engine's stream, for a
// message that was not stored there after all (or was already).
func (p *pendingStore) unadmitShared() {
	if !p.shared {
		return
	}
	for _, g := range p.mr.groups {
		switch {
		case g.ownStream():
		case slices.Contains(p.took, g):
			g.release(p.cost, true)
		default:
			g.skipping(-1)
		}
	}
	p.took = slices.DeleteFunc(p.took, func(g *group) bool { return !g.ownStream() })
	p.shared = false
}

// unadmitGroup gives back what admit charged g, which has a stream of its own, for a message
// that was not stored there after all (or was already).
func (p *pendingStore) unadmitGroup(g *group) {
	if i := slices.Index(p.took, g); i >= 0 {
		g.release(p.cost, true)
		p.took = slices.Delete(p.took, i, i+1)
	}
}

// storeError is what a publisher hears when JetStream did not store its message.
func (e *Engine) storeError(err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: the message is larger than the NATS server's max_payload (%d bytes)", broker.ErrInvalidMessage, e.nc.MaxPayload())
	}
	if full(err) && e.opts.MemoryStorage && e.opts.URL == "" && e.opts.Server == nil {
		return fmt.Errorf("%w: the consumer groups' store is full (JetStream: %v); wait for members to ack, or raise engine \"jetstream\" { max_bytes } (the embedded server keeps at most %d bytes in memory storage: max_bytes + 64 MiB, by default a quarter of GOMEMLIMIT)", broker.ErrLimit, err, e.storeLimit)
	}
	if full(err) {
		return fmt.Errorf("%w: the consumer groups' store is full (JetStream: %v); wait for members to ack, or raise engine \"jetstream\" { max_bytes } or the NATS server's storage limits", broker.ErrLimit, err)
	}
	if permanent(err) {
		// Not the publisher's doing (broker.CheckHeaders admitted the message) and not
		// transient: INTERNAL, without the "retry" that would never succeed.
		return fmt.Errorf("JetStream cannot store this message for its consumer groups: %v; storing it again cannot succeed: this is a bug of tinybroker's JetStream engine, please report it with the message's topic and header names", err)
	}
	return fmt.Errorf("%w: JetStream did not store the message for its consumer groups: %v; retry", broker.ErrUnavailable, err)
}

// permanent says whether err, from a store, is one that storing the same message again
// would meet again: nats.go could not encode it. (A refusal by JetStream stays UNAVAILABLE:
// the stream's configuration, which an operator may change, decides it.)
func permanent(err error) bool {
	return errors.Is(err, nats.ErrBadHeaderMsg) || errors.Is(err, nats.ErrInvalidMsg) || errors.Is(err, nats.ErrBadSubject)
}

// full says whether err is JetStream refusing a store for want of room: the stream's
// max_bytes (with discard new), or the account's or the server's storage.
func full(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case 10023, 10028, 10047: // JetStream's JSInsufficientResourcesErr, JSMemoryResourcesExceededErr, JSStorageResourcesExceededErr
		return true
	case 10077: // JSStreamStoreFailedF, which also says why
		return strings.Contains(api.Description, "maximum bytes exceeded") || strings.Contains(api.Description, "maximum messages exceeded")
	}
	return false
}

// fanout publishes m (stored already, as p says, if a group wanted it) to the fanout
// subscribers and returns its result.
func (e *Engine) fanout(m *publishing.Msg, p *pendingStore, publishedAt int64) (broker.PublishResult, error) {
	topic := m.Topic
	seq := p.seq
	var id string
	if p.stored {
		id = e.ids.format(seq, p.secret)
	} else {
		seq = rand.Uint64() | 1
		id = e.ids.format(seq, e.ids.fanout)
	}
	var err error
	if e.local {
		e.deliverLocal(m, p.mr.subs, seq, id, publishedAt)
	} else {
		err = e.publishFanout(m, seq, id, publishedAt)
	}
	if err != nil {
		if !p.stored {
			if errors.Is(err, nats.ErrMaxPayload) {
				return broker.PublishResult{}, e.storeError(err)
			}
			return broker.PublishResult{}, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
		}
		e.log.Warn("fanout publish failed after the message was stored for its groups", "topic", topic, "error", err)
	}
	e.published.Add(1)
	routed := len(p.mr.subs) + len(p.took)
	if routed == 0 {
		e.unrouted.Add(1)
	}
	return broker.PublishResult{Seq: seq, SystemID: id, Routed: routed}, nil
}

// publishFanout publishes m as a fanout envelope, unless no fanout subscription anywhere
// wants it: a consumer group's topic usually has none, and its message then costs no second
// trip through NATS.
func (e *Engine) publishFanout(m *publishing.Msg, seq uint64, id string, publishedAt int64) error {
	subj := e.subjF + m.Topic
	if e.interest != nil && !e.interest(subj) {
		return nil
	}
	data := appendEnvelope(make([]byte, 0, len(m.Payload)+envelopeSize(id, m.Key, m.Headers)), seq, publishedAt, id, m.Key, m.Prio, m.Headers, m.Payload)
	return e.nc.Publish(subj, data)
}

// deliverLocal gives a fanout copy of m to the local subscriptions that want it, as the
// dispatcher does with what NATS brings back (Engine.local): the same message, without the
// envelope and the round trip through the embedded server, which were two fifths of the
// broker's CPU in W1.
func (e *Engine) deliverLocal(m *publishing.Msg, subs []*Subscription, seq uint64, id string, publishedAt int64) {
	if len(subs) == 0 {
		return
	}
	msg := &broker.Message{ID: seq, SystemID: id, Topic: m.Topic, Payload: m.Payload, Headers: m.Headers, Key: m.Key, Priority: m.Prio,
		PublishedAt: publishedAt, HeaderBytes: m.HB, Targets: 1}
	for _, s := range subs {
		s.st.deliverFanout(s, msg)
	}
}

// matchResult is the local fanout subscriptions and the known consumer groups a topic
// matches, cached per topic and tagged with Engine.gen.
type matchResult struct {
	gen    uint64
	subs   []*Subscription
	groups []*group
}

func (e *Engine) match(topic string) *matchResult {
	gen := e.gen.Load()
	if v, ok := e.cache.Load(topic); ok {
		if mr := v.(*matchResult); mr.gen == gen {
			return mr
		}
	}
	mr := &matchResult{gen: gen}
	e.mu.RLock()
	for _, s := range e.fanouts {
		for _, p := range s.patterns {
			if broker.Pattern(p).Match(topic) {
				mr.subs = append(mr.subs, s)
				break
			}
		}
	}
	for _, g := range e.groups {
		if g.matches(topic) {
			mr.groups = append(mr.groups, g)
		}
	}
	e.mu.RUnlock()
	if e.cacheSize.Add(1) > 8192 {
		e.cache.Clear()
		e.cacheSize.Store(0)
	}
	e.cache.Store(topic, mr)
	return mr
}

// changed invalidates the match cache. Engine.mu must be held.
func (e *Engine) changed() { e.gen.Add(1) }

// dispatchFanout hands what the fanout patterns' NATS subscriptions receive to the local
// subscriptions, in the connection's order. A subscription with several patterns that
// match a topic gets it through the first of them only.
func (e *Engine) dispatchFanout() {
	for {
		select {
		case <-e.stop:
			return
		case m := <-e.fanCh:
			e.mu.RLock()
			ps := e.patSubs[strings.TrimPrefix(m.Sub.Subject, e.subjF)]
			var subs []*Subscription
			if ps != nil && ps.sub == m.Sub {
				subs = ps.subs
			}
			e.mu.RUnlock()
			if len(subs) == 0 {
				continue
			}
			msg, err := parseEnvelope(strings.TrimPrefix(m.Subject, e.subjF), m.Data)
			if err != nil {
				e.log.Warn("fanout message dropped", "error", err)
				continue
			}
			for _, s := range subs {
				// With one pattern, NATS matched it already.
				if len(s.patterns) == 1 || s.firstMatch(msg.Topic) == ps.pattern {
					s.st.deliverFanout(s, msg)
				}
			}
		}
	}
}

// decode makes a broker.Message of a stored message JetStream delivered to g.
func (g *group) decode(m *nats.Msg, sseq uint64) *broker.Message {
	h, at, hb := decodeHeaders(m.Header)
	return &broker.Message{ID: sseq, SystemID: g.e.ids.format(sseq, g.secret), Topic: strings.TrimPrefix(m.Subject, g.subj),
		Payload: m.Data, Headers: h, Key: keyOf(m.Header), TTL: ttlOf(m.Header), Priority: priorityOf(m.Header), PublishedAt: at, HeaderBytes: hb, Targets: 1}
}

// maxPendingStores bounds the stores sent to JetStream and not yet acknowledged, over every
// publisher of the engine: past it, a publish waits (up to RequestTimeout) for room.
const maxPendingStores = 4096
