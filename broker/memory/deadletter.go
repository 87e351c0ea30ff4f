package memory

import (
	"fmt"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// Every consumer group keeps what it dead-letters in a deadStore, besides publishing it to
// its dead-letter topic: a dead letter published to a topic nobody subscribes to yet would
// otherwise be lost, and an operator needs to see why messages failed and send them back.
// The store is bounded in messages and bytes (GroupLimits.DeadLetterMax, DeadLetterMaxBytes)
// and charged to the engine's memory budget; past a bound it drops its oldest (counted and
// logged once per episode). See RATIONALE.md, "Why does a group keep its dead letters, and
// how many?".

// deadStore is a consumer group's kept dead letters, oldest first. Guarded by group.mu.
type deadStore struct {
	list    []*keptLetter // by pos; removed entries are nil until compacted
	live    int           // non-nil entries of list
	byID    map[string]*keptLetter
	bytes   int64
	pos     uint64 // of the last letter kept
	dropped uint64 // let go of to stay within the bounds
	full    bool   // dropping since the store last had room: logged once
}

type keptLetter struct {
	pos  uint64
	idx  int // in list, until compacted
	dl   broker.DeadLetter
	cost int64
}

func (d *deadStore) len() int { return d.live }

// deadLetterCost is what keeping dl costs the memory budget.
func deadLetterCost(dl *broker.DeadLetter) int64 {
	hb := 0
	for k, v := range dl.Headers {
		hb += len(k) + len(v)
	}
	return grouping.MessageCost(dl.Topic, dl.Key, dl.ID, dl.Payload, len(dl.Headers), hb, 1) + holderOverhead
}

// keepDeadLetterLocked adds a dead letter of e to g's store, dropping the oldest kept to stay
// within the group's bounds and the engine's memory budget. g.mu must be held.
func (g *group) keepDeadLetterLocked(e *entry, d deadLetter, code, reason string) {
	dl := broker.DeadLetter{ID: e.msg.SystemID, Topic: e.msg.Topic, Payload: e.msg.Payload, Headers: d.headers, Key: d.key, Code: code,
		Reason: deadletter.TruncateReason(reason), Attempts: int(e.attempt), DeadAt: time.Now().UnixNano()}
	k := &keptLetter{dl: dl, cost: deadLetterCost(&dl)}
	s := &g.dead
	over := func() string {
		switch {
		case s.live >= g.limits.DeadLetterMax:
			return fmt.Sprintf("its limit of %d dead letters (groups { dead_letters_max })", g.limits.DeadLetterMax)
		case s.bytes+k.cost > g.limits.DeadLetterMaxBytes:
			return fmt.Sprintf("its limit of %d bytes of dead letters (groups { dead_letters_max_bytes })", g.limits.DeadLetterMaxBytes)
		case g.b.mem.used.Load()+k.cost > g.b.mem.limit:
			return fmt.Sprintf("the broker's memory budget (%d bytes, memory { max_bytes })", g.b.mem.limit)
		}
		return ""
	}
	why := over()
	for why != "" && s.live > 0 {
		g.dropDeadLocked(s.oldest())
		s.dropped++
		why = over()
	}
	if why != "" { // alone it does not fit: it is not kept (it was still published)
		s.dropped++
	} else {
		if s.byID == nil {
			s.byID = make(map[string]*keptLetter)
		}
		if old := s.byID[dl.ID]; old != nil { // cannot happen: a system_id dies once
			g.dropDeadLocked(old)
		}
		s.pos++
		k.pos, k.idx = s.pos, len(s.list)
		s.list = append(s.list, k)
		s.live++
		s.byID[dl.ID] = k
		s.bytes += k.cost
		g.b.mem.add(k.cost)
	}
	if s.dropped > 0 && !s.full && (why != "" || s.live >= g.limits.DeadLetterMax) {
		s.full = true
		g.b.log.Warn("dead-letter store full: the group drops its oldest dead letters to keep new ones (they are still published to the dead-letter topic)",
			"subscription", g.id, "group", g.name, "kept", s.live, "bytes", s.bytes, "dropped_total", s.dropped)
	} else if s.full && s.live < g.limits.DeadLetterMax/2 {
		s.full = false
	}
}

// oldest returns the oldest kept letter; the store must not be empty.
func (s *deadStore) oldest() *keptLetter {
	for _, k := range s.list {
		if k != nil {
			return k
		}
	}
	return nil
}

// dropDeadLocked removes k from the store and gives its cost back. g.mu must be held.
func (g *group) dropDeadLocked(k *keptLetter) {
	s := &g.dead
	if s.byID[k.dl.ID] != k {
		return
	}
	delete(s.byID, k.dl.ID)
	s.list[k.idx] = nil
	s.live--
	s.bytes -= k.cost
	g.b.mem.add(-k.cost)
	// Compact when most of the list is holes, or its head is: removal stays O(1) amortised.
	if s.live == 0 {
		s.list = s.list[:0]
	} else if len(s.list) >= 64 && s.live*2 < len(s.list) {
		kept := s.list[:0]
		for _, k := range s.list {
			if k != nil {
				k.idx = len(kept)
				kept = append(kept, k)
			}
		}
		clear(s.list[len(kept):])
		s.list = kept
	}
}

// clearDeadLocked drops every kept letter (the group is removed) and returns how many.
func (g *group) clearDeadLocked() int {
	n := g.dead.live
	g.b.mem.add(-g.dead.bytes)
	g.dead = deadStore{dropped: g.dead.dropped}
	return n
}

// restoreDeadLocked puts back a letter taken out for a replay that failed, at its place.
func (g *group) restoreDeadLocked(k *keptLetter) {
	s := &g.dead
	if s.byID == nil {
		s.byID = make(map[string]*keptLetter)
	}
	if s.byID[k.dl.ID] != nil {
		return
	}
	// Holes make a binary search awkward: find the place linearly (a failed replay is rare).
	i := len(s.list)
	for j, o := range s.list {
		if o != nil && o.pos > k.pos {
			i = j
			break
		}
	}
	s.list = append(s.list, nil)
	copy(s.list[i+1:], s.list[i:])
	s.list[i] = k
	for j := i; j < len(s.list); j++ {
		if s.list[j] != nil {
			s.list[j].idx = j
		}
	}
	s.live++
	s.byID[k.dl.ID] = k
	s.bytes += k.cost
	g.b.mem.add(k.cost)
}

// DeadLetters returns up to limit dead letters of group id, oldest first, after the position
// token, and the token of the rest ("" when there is no more).
func (b *Engine) DeadLetters(id, token string, limit int) ([]broker.DeadLetter, string, error) {
	g, err := b.groupByID(id)
	if err != nil {
		return nil, "", err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := 0 // where to look on: each call asks for a later position than the last
	return grouping.ListDeadLetters(token, limit, func(after uint64) (broker.DeadLetter, uint64, bool, error) {
		for ; i < len(g.dead.list); i++ {
			if k := g.dead.list[i]; k != nil && k.pos > after {
				return k.dl, k.pos, true, nil
			}
		}
		return broker.DeadLetter{}, 0, false, nil
	})
}

// ReplayDeadLetters publishes the dead letters named by ids (all kept now if ids is empty)
// to their original topics through Publish, without their tb-dead-letter-* headers and with
// tb-replay-count one higher. Each is taken out of the store while it is published, so two
// replays never publish it twice; one whose publish is refused goes back.
func (b *Engine) ReplayDeadLetters(id string, ids []string) ([]broker.Replayed, error) {
	g, err := b.groupByID(id)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	taken := g.takeDeadLocked(ids)
	g.mu.Unlock()
	out := make([]broker.Replayed, len(taken))
	for i, k := range taken {
		if k.cost == 0 { // a stand-in for an id the store does not hold
			out[i] = broker.Replayed{ID: k.dl.ID, Err: grouping.UnknownDeadLetter(id, k.dl.ID)}
			continue
		}
		res, err := grouping.Replay(b, &k.dl)
		out[i] = broker.Replayed{ID: k.dl.ID, SystemID: res.SystemID, Routed: res.Routed, Err: err}
		if err != nil {
			g.mu.Lock()
			g.restoreDeadLocked(k)
			g.mu.Unlock()
		}
	}
	return out, nil
}

// takeDeadLocked removes the letters named by ids (all if empty) from the store and returns
// them, with a stand-in of cost 0 for each id it does not hold. g.mu must be held.
func (g *group) takeDeadLocked(ids []string) []*keptLetter {
	s := &g.dead
	var out []*keptLetter
	if len(ids) == 0 {
		for _, k := range s.list {
			if k != nil {
				out = append(out, k)
			}
		}
		for _, k := range out {
			g.dropDeadLocked(k)
		}
		return out
	}
	for _, id := range ids { // taken at once: an id named twice is not held the second time
		if k := s.byID[id]; k != nil {
			g.dropDeadLocked(k)
			out = append(out, k)
		} else {
			out = append(out, &keptLetter{dl: broker.DeadLetter{ID: id}})
		}
	}
	return out
}

// PurgeDeadLetters drops the dead letters named by ids (all if empty) and returns how many.
func (b *Engine) PurgeDeadLetters(id string, ids []string) (int, error) {
	g, err := b.groupByID(id)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	n := 0
	for _, k := range g.takeDeadLocked(ids) {
		if k.cost != 0 {
			n++
		}
	}
	g.mu.Unlock()
	b.log.Info("dead letters purged", "subscription", id, "dead_letters_dropped", n)
	return n, nil
}
