package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// Every consumer group keeps what it dead-letters, besides publishing it to its dead-letter
// topic, in the engine's dead-letter stream (<Stream>_DLQ, limits retention, replicated as
// the main stream), so that a dead letter published to a topic nobody subscribes to is not
// lost, and every node (and a restarted one) lists, replays and purges the same letters. A
// letter is the message as published to the dead-letter topic, on the subject
// <prefix>.d.<consumer>.<system_id>: one request finds a letter by its id, and the wildcard
// <prefix>.d.<consumer>.* lists a group's letters in the order they died. A group keeps at
// most its dead_letters_max letters and about its dead_letters_max_bytes (estimated from the
// stream's average letter); past either, its oldest are deleted (counted). See RATIONALE.md.

// dlqSubject is the subject of group consumer's dead letter of system_id id; with id "*",
// of all its letters.
func (e *Engine) dlqSubject(consumer, id string) string { return e.subjD + consumer + "." + id }

// ensureDLQ creates the dead-letter stream, or opens the existing one.
func (e *Engine) ensureDLQ() error {
	cfg := jetstream.StreamConfig{Name: e.opts.Stream + "_DLQ", Subjects: []string{e.subjD + ">"}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Replicas: e.opts.Replicas, Discard: jetstream.DiscardOld,
		Description: "tinybroker: the dead letters each consumer group keeps for the admin API"}
	if e.opts.MemoryStorage {
		cfg.Storage = jetstream.MemoryStorage
	}
	s, err := e.openStream(cfg)
	if err != nil {
		return err
	}
	e.dlq = s
	return nil
}

// keepDeadLetter stores m, dead-lettered by g with headers (the tb-dead-letter-* ones
// included), then deletes g's oldest letters past its bounds. A letter JetStream does not
// store is counted as dropped: it was still published to the dead-letter topic.
func (e *Engine) keepDeadLetter(g *group, m *broker.Message, headers map[string]string) {
	ctx, cancel := e.ctx()
	defer cancel()
	msg := &nats.Msg{Subject: e.dlqSubject(g.consumer, m.SystemID), Data: m.Payload, Header: encodeHeaders(broker.MakeHeaders(headers), time.Now().UnixNano())}
	setKey(msg.Header, m.Key)
	g.deadMu.RLock()
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		g.deadMu.RUnlock()
		e.log.Warn("dead letter not kept for the admin API (it was published to the dead-letter topic)", "subscription", g.id, "error", err)
		g.mu.Lock()
		g.deadDropped++
		g.mu.Unlock()
		return
	}
	// Counted here once, then kept by this node (+1 a letter, -1 a deletion): counting asks
	// JetStream for a subject per letter, too much to do for every letter of a full store.
	g.mu.Lock()
	counted := g.deadCount >= 0
	if counted {
		g.deadCount++
		if g.deadAvg == 0 { // counted while the store was empty (Stats): this letter's size
			g.deadAvg = heldCost("", "", nil, nil, msg.Size())
		}
	}
	g.mu.Unlock()
	g.deadMu.RUnlock()
	if !counted {
		if _, err := e.countDeadLetters(ctx, g); err != nil {
			e.log.Warn("could not count a group's dead letters", "subscription", g.id, "error", err)
			return
		}
	}
	for e.dropOldestDeadLetter(ctx, g) {
	}
}

// dropOldestDeadLetter deletes g's oldest letter if g keeps more than its bounds allow, and
// says whether it did.
func (e *Engine) dropOldestDeadLetter(ctx context.Context, g *group) bool {
	g.deadMu.RLock()
	defer g.deadMu.RUnlock()
	g.mu.Lock()
	over := g.deadCount > 1 && (g.deadCount > g.limits.DeadLetterMax || g.deadBytesLocked() > g.limits.DeadLetterMaxBytes)
	g.mu.Unlock()
	if !over {
		return false
	}
	first, err := e.dlq.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(e.dlqSubject(g.consumer, "*")))
	if err != nil || e.dlq.DeleteMsg(ctx, first.Sequence) != nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deadCount--
	g.deadDropped++
	if !g.deadFull {
		g.deadFull = true
		e.log.Warn("dead-letter store full: the group drops its oldest dead letters to keep new ones (they are still published to the dead-letter topic)",
			"subscription", g.id, "group", g.name, "kept", g.deadCount, "dropped_total", g.deadDropped)
	}
	return true
}

// deadBytesLocked is about what g's dead letters cost: JetStream does not count bytes per
// subject, so each is taken at the stream's average. g.mu must be held.
func (g *group) deadBytesLocked() int64 { return int64(max(0, g.deadCount)) * g.deadAvg }

// countDeadLetters returns how many letters g keeps, and remembers it for Stats with what a
// letter costs: heldCost of the stream's average letter.
func (e *Engine) countDeadLetters(ctx context.Context, g *group) (int, error) {
	g.deadMu.Lock()
	defer g.deadMu.Unlock()
	return e.countDeadLettersLocked(ctx, g)
}

// countDeadLettersLocked is countDeadLetters with g.deadMu held alone.
func (e *Engine) countDeadLettersLocked(ctx context.Context, g *group) (int, error) {
	si, err := e.dlq.Info(ctx, jetstream.WithSubjectFilter(e.dlqSubject(g.consumer, "*")))
	if err != nil {
		return 0, fmt.Errorf("%w: reading the dead letters of consumer group %q: %v", broker.ErrUnavailable, g.id, err)
	}
	n := len(si.State.Subjects) // a subject per letter
	var avg int64
	if si.State.Msgs > 0 {
		avg = heldCost("", "", nil, nil, int(si.State.Bytes/si.State.Msgs))
	}
	g.mu.Lock()
	g.deadCount, g.deadAvg = n, avg
	if g.deadFull && n < g.limits.DeadLetterMax/2 {
		g.deadFull = false
	}
	g.mu.Unlock()
	return n, nil
}

// deadGroup returns the consumer group of subscription id for the dead-letter calls.
func (e *Engine) deadGroup(id string) (*group, error) {
	g, err := e.findGroup(id)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, fmt.Errorf("%w %q: no consumer group has this subscription_id", broker.ErrUnknownSubscription, id)
	}
	return g, nil
}

// DeadLetters returns up to limit dead letters of group id, oldest first, after the position
// token (a sequence of the dead-letter stream), and the token of the rest ("" if no more).
func (e *Engine) DeadLetters(id, token string, limit int) ([]broker.DeadLetter, string, error) {
	g, err := e.deadGroup(id)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	return grouping.ListDeadLetters(token, limit, func(after uint64) (broker.DeadLetter, uint64, bool, error) {
		rm, err := e.dlq.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(e.dlqSubject(g.consumer, "*")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return broker.DeadLetter{}, 0, false, nil
		}
		if err != nil {
			return broker.DeadLetter{}, 0, false, fmt.Errorf("%w: reading the dead letters of consumer group %q: %v", broker.ErrUnavailable, id, err)
		}
		return deadLetterOf(rm), rm.Sequence, true, nil
	})
}

// deadLetterOf reads a letter of the dead-letter stream.
func deadLetterOf(rm *jetstream.RawStreamMsg) broker.DeadLetter {
	hs, at, _ := decodeHeaders(rm.Header)
	h := hs.Map()
	attempts, _ := strconv.Atoi(h[deadletter.HeaderAttempts])
	return broker.DeadLetter{ID: rm.Subject[strings.LastIndexByte(rm.Subject, '.')+1:], Topic: h[deadletter.HeaderTopic], Payload: rm.Data,
		Headers: h, Key: keyOf(rm.Header), Code: h[deadletter.HeaderCode], Reason: h[deadletter.HeaderReason], Attempts: attempts, DeadAt: at}
}

// takeDeadLetters deletes the letters of g named by ids (every one kept now, if empty) from
// the store and returns them, oldest first for all, with a nil stand-in for an id the store
// does not keep. Taking before replaying means that two replays never publish one twice.
func (e *Engine) takeDeadLetters(g *group, ids []string) ([]*broker.DeadLetter, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	var out []*broker.DeadLetter
	take := func(rm *jetstream.RawStreamMsg) *broker.DeadLetter {
		g.deadMu.RLock()
		defer g.deadMu.RUnlock()
		if err := e.dlq.DeleteMsg(ctx, rm.Sequence); err != nil { // another call took it
			return nil
		}
		g.mu.Lock()
		if g.deadCount > 0 {
			g.deadCount--
		}
		g.mu.Unlock()
		dl := deadLetterOf(rm)
		return &dl
	}
	if len(ids) == 0 {
		for seq := uint64(1); ; {
			rm, err := e.dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(e.dlqSubject(g.consumer, "*")))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return out, fmt.Errorf("%w: reading the dead letters of consumer group %q: %v", broker.ErrUnavailable, g.id, err)
			}
			if dl := take(rm); dl != nil {
				out = append(out, dl)
			}
			seq = rm.Sequence + 1
		}
		return out, nil
	}
	for _, id := range ids {
		if !validID(id) {
			out = append(out, nil)
			continue
		}
		rm, err := e.dlq.GetLastMsgForSubject(ctx, e.dlqSubject(g.consumer, id))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			out = append(out, nil)
		case err != nil:
			return out, fmt.Errorf("%w: reading the dead letters of consumer group %q: %v", broker.ErrUnavailable, g.id, err)
		default:
			out = append(out, take(rm))
		}
	}
	return out, nil
}

// validID says whether id can be a token of a subject: a system_id is base64url.
func validID(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ReplayDeadLetters publishes the dead letters named by ids (every one kept now, if ids is
// empty) again to their original topics through Publish, without their tb-dead-letter-*
// headers and with tb-replay-count one higher. One whose publish is refused is kept again
// (as the newest: JetStream cannot put it back in its place).
func (e *Engine) ReplayDeadLetters(id string, ids []string) ([]broker.Replayed, error) {
	g, err := e.deadGroup(id)
	if err != nil {
		return nil, err
	}
	taken, err := e.takeDeadLetters(g, ids)
	out := make([]broker.Replayed, len(taken))
	for i, dl := range taken {
		if dl == nil {
			out[i] = broker.Replayed{ID: ids[i], Err: grouping.UnknownDeadLetter(id, ids[i])}
			continue
		}
		res, perr := grouping.Replay(e, dl)
		out[i] = broker.Replayed{ID: dl.ID, SystemID: res.SystemID, Routed: res.Routed, Err: perr}
		if perr != nil {
			e.keepDeadLetter(g, &broker.Message{SystemID: dl.ID, Payload: dl.Payload, Key: dl.Key}, dl.Headers)
		}
	}
	return out, err
}

// PurgeDeadLetters drops the dead letters of group id named by ids (every one, if empty)
// and returns how many it dropped.
func (e *Engine) PurgeDeadLetters(id string, ids []string) (int, error) {
	g, err := e.deadGroup(id)
	if err != nil {
		return 0, err
	}
	n := 0
	if len(ids) == 0 {
		n, err = e.purgeDeadLetters(g)
	} else {
		var taken []*broker.DeadLetter
		taken, err = e.takeDeadLetters(g, ids)
		for _, dl := range taken {
			if dl != nil {
				n++
			}
		}
	}
	e.log.Info("dead letters purged", "subscription", id, "dead_letters_dropped", n)
	return n, err
}

// purgeDeadLetters drops every letter g keeps (PurgeDeadLetters of all, DeleteGroup).
func (e *Engine) purgeDeadLetters(g *group) (int, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	g.deadMu.Lock()
	defer g.deadMu.Unlock()
	n, err := e.countDeadLettersLocked(ctx, g)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	if err := e.dlq.Purge(ctx, jetstream.WithPurgeSubject(e.dlqSubject(g.consumer, "*"))); err != nil {
		return 0, fmt.Errorf("%w: purging the dead letters of consumer group %q: %v", broker.ErrUnavailable, g.id, err)
	}
	g.mu.Lock()
	g.deadCount, g.deadFull = 0, false // deadAvg stays: the size of its letters
	g.mu.Unlock()
	return n, nil
}
