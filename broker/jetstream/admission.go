package jetstream

// A consumer group's bounds: what it admits (max_queued, max_queued_bytes, the owner's quota),
// counted here and corrected from JetStream's own counts, and what a full group does.

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
)

// avgCost is the heldCost of the stream's average message, for messages stored before
// this node counted them.
func (e *Engine) avgCost() int64 {
	ctx, cancel := e.ctx()
	defer cancel()
	s, err := e.js.Stream(ctx, e.opts.Stream)
	if err != nil {
		return heldCost("", "", nil, nil, 0)
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return heldCost("", "", nil, nil, 0)
	}
	return heldCost("", "", make([]byte, st.Bytes/st.Msgs), nil, 0)
}

// admit charges a message of cost to g, unless g is at one of its bounds: then a
// "drop_oldest" group makes room by ending its oldest queued message, and a "reject" group
// (or one with nothing queued to drop) refuses it with ErrGroupFull. A group that looks
// full asks JetStream first how much it holds (at most every refreshEvery), since members
// on other nodes may have taken messages meanwhile; in a cluster, so does any group whose
// count is older than refreshEvery, since other nodes may have published to it.
func (g *group) admit(cost int64) error {
	refreshed := false
	for {
		g.mu.Lock()
		if !refreshed && !g.e.solo && g.claimRefreshLocked() {
			// In a cluster, other nodes publish to the group too: look at most every
			// refreshEvery, full or not.
			g.mu.Unlock()
			refreshed = true
			g.refresh()
			continue
		}
		over := g.overLocked(cost)
		if over == "" {
			g.queued++
			g.bytes += cost
			g.noteDrainedLocked()
			g.mu.Unlock()
			g.quota.AddBytes(cost)
			return nil
		}
		stale := !refreshed && g.claimRefreshLocked()
		drop := g.limits.Overflow == broker.OverflowDropOldest && g.queued > 0
		g.mu.Unlock()
		if stale {
			refreshed = true
			g.refresh()
			continue
		}
		if drop && g.dropOldest() {
			continue
		}
		g.mu.Lock()
		g.rejected++
		g.noteFullLocked(over)
		name := g.name
		g.mu.Unlock()
		return fmt.Errorf("%w: consumer group %q (subscription %q) is at %s; add members or ack faster, raise the limit, or use overflow \"drop_oldest\"",
			broker.ErrGroupFull, name, g.id, over)
	}
}

// claimRefreshLocked says whether the group's count is older than refreshEvery, and if so
// marks it fresh, so that one caller asks JetStream while the others go on with the count
// they have. g.mu must be held.
func (g *group) claimRefreshLocked() bool {
	if time.Since(g.refreshed) < refreshEvery {
		return false
	}
	g.refreshed = time.Now()
	return true
}

// overLocked says which bound taking one more message of cost bytes would pass, or "".
func (g *group) overLocked(cost int64) string {
	switch {
	case g.queued+len(g.waiting)-len(g.delayed) >= g.limits.MaxQueued:
		return fmt.Sprintf("its limit of %d queued messages (groups { max_queued })", g.limits.MaxQueued)
	case g.bytes+cost > g.limits.MaxQueuedBytes:
		return fmt.Sprintf("its limit of %d bytes held (groups { max_queued_bytes }; it holds %d)", g.limits.MaxQueuedBytes, g.bytes)
	case g.quota != nil:
		return g.quota.Over(cost)
	}
	return ""
}

// release gives back the cost of a message the group no longer holds (acked, ended), or,
// with queued set, one it never got to a member (not stored after all, dropped, purged).
func (g *group) release(cost int64, queued bool) {
	g.mu.Lock()
	g.releaseLocked(cost, queued)
	g.mu.Unlock()
}

func (g *group) releaseLocked(cost int64, queued bool) {
	if queued && g.queued > 0 {
		g.queued--
	}
	// A message another node stored was never charged here: the count stays at 0 at least.
	cost = min(cost, g.bytes)
	g.bytes -= cost
	g.quota.AddBytes(-cost)
	g.noteDrainedLocked()
}

// skipping counts n more (or fewer) messages stored that g refused.
func (g *group) skipping(n int) {
	g.mu.Lock()
	g.skipped = max(0, g.skipped+n)
	g.mu.Unlock()
}

// refresh takes what JetStream says the group has not delivered, cluster-wide.
func (g *group) refresh() {
	ctx, cancel := g.e.ctx()
	defer cancel()
	c, err := g.e.js.Consumer(ctx, g.stream, g.consumer)
	if err != nil {
		g.mu.Lock()
		g.refreshed = time.Now()
		g.mu.Unlock()
		return
	}
	g.counted(c.CachedInfo())
}

// counted takes the group's state from its consumer's, as JetStream just gave it.
func (g *group) counted(ci *jetstream.ConsumerInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshed = time.Now()
	g.queued = max(0, int(ci.NumPending)-g.skipped)
	g.pruneWaitingLocked(ci)
	if ci.NumPending == 0 && ci.NumAckPending == 0 { // holds nothing: no drift left either
		g.quota.AddBytes(-g.bytes)
		g.bytes = 0
	}
}

// pruneWaitingLocked forgets the messages this node took back that have since been acked,
// as ci's ack floor shows: in a cluster, JetStream may redeliver one to a member on another
// node, and this node would otherwise count it as waiting for ever (queued in its stats, and
// against max_queued). g.mu must be held.
func (g *group) pruneWaitingLocked(ci *jetstream.ConsumerInfo) {
	floor := ci.AckFloor.Stream
	for seq := range g.waiting {
		if seq <= floor {
			delete(g.waiting, seq)
			delete(g.delayed, seq)
		}
	}
}

// dropOldest ends the oldest message JetStream has not delivered to the group yet (no
// member has room for it, or it would have been), for OverflowDropOldest. It says whether
// there was one.
func (g *group) dropOldest() bool {
	n, err := g.e.takeQueued(g, 1)
	if err != nil {
		g.e.log.Warn("could not drop a full group's oldest message", "group", g.id, "error", err)
	}
	if n > 0 {
		g.mu.Lock()
		g.dropped += uint64(n)
		g.mu.Unlock()
	}
	return n > 0
}

// noteFullLocked logs, once per episode, that the group refuses or drops publishes.
func (g *group) noteFullLocked(why string) {
	if g.full {
		return
	}
	g.full = true
	g.e.log.Warn("consumer group full: publishes to it are refused or drop its oldest messages until it drains",
		"subscription", g.id, "group", g.name, "at", why, "overflow", overflowName(g.limits.Overflow), "members", len(g.members), "queued", g.queued, "bytes", g.bytes)
}

// noteDrainedLocked logs the end of a full episode once the group is back under half its
// bounds.
func (g *group) noteDrainedLocked() {
	if !g.full || g.queued > g.limits.MaxQueued/2 || g.bytes > g.limits.MaxQueuedBytes/2 {
		return
	}
	g.full = false
	g.e.log.Warn("consumer group drained: it accepts publishes again", "subscription", g.id, "group", g.name, "queued", g.queued, "bytes", g.bytes)
}

func overflowName(o broker.Overflow) string {
	if o == broker.OverflowDropOldest {
		return "drop_oldest"
	}
	return "reject"
}

// msgCost is heldCost of a message a member received.
func msgCost(m *broker.Message) int64 {
	return heldCost(m.Topic, m.Key, m.Payload, m.Headers, m.HeaderBytes)
}
