package memory

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/tinybroker/tinybroker/broker"
)

// The administration of consumer groups and streams (broker.Engine): describe, purge,
// delete, list. The dead letters' are in deadletter.go.

var _ broker.Engine = (*Engine)(nil)

// Group describes the consumer group of subscription_id id: counters, settings, members.
func (b *Engine) Group(id string) (broker.GroupInfo, error) {
	g, err := b.groupByID(id)
	if err != nil {
		return broker.GroupInfo{}, err
	}
	return g.info(), nil
}

func (b *Engine) groupByID(id string) (*group, error) {
	b.mu.RLock()
	g := b.groups[id]
	b.mu.RUnlock()
	if g == nil {
		return nil, fmt.Errorf("%w %q: no consumer group has this subscription_id", broker.ErrUnknownSubscription, id)
	}
	return g, nil
}

// PurgeGroup drops the messages the group holds for a member to take (queued and delayed);
// in-flight ones stay with their members. It returns how many it dropped.
func (b *Engine) PurgeGroup(id string) (int, error) {
	g, err := b.groupByID(id)
	if err != nil {
		return 0, err
	}
	n := g.purge()
	b.log.Info("consumer group purged", "subscription", id, "messages_dropped", n)
	return n, nil
}

func (g *group) purge() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.dropAllLocked() // in-flight entries are the members', not in queue or delayed
	g.noteDrainedLocked()
	return n
}

// PauseGroup pauses or resumes the group; see broker.Admin.
func (b *Engine) PauseGroup(id string, paused bool) error {
	g, err := b.groupByID(id)
	if err != nil {
		return err
	}
	g.mu.Lock()
	changed := g.paused != paused
	g.paused = paused
	if changed && !paused {
		g.dispatchLocked(b.now())
	}
	g.mu.Unlock()
	if changed {
		b.log.Info(map[bool]string{true: "consumer group paused", false: "consumer group resumed"}[paused], "subscription", id)
	}
	return nil
}

// DeleteGroup removes the consumer group, what it holds and its dead letters. Its members'
// subscriptions end with ErrGroupDeleted: a member alone on its stream sees the stream end
// with that error; one whose stream carries other subscriptions gets an Ended event and the
// stream goes on. What the members held unacked is dropped with the group.
func (b *Engine) DeleteGroup(id string) error {
	b.mu.Lock()
	g := b.groups[id]
	if g == nil {
		b.mu.Unlock()
		return fmt.Errorf("%w %q: no consumer group has this subscription_id", broker.ErrUnknownSubscription, id)
	}
	subs, inFlight := g.evict()
	dropped := b.removeGroupLocked(g)
	b.mu.Unlock()
	why := fmt.Errorf("%w: consumer group %q (subscription %q) was deleted by an administrator; this subscription has ended (subscribing again creates a new, empty group)",
		broker.ErrGroupDeleted, g.name, id)
	for _, s := range subs {
		s.evict(why)
	}
	b.log.Info("consumer group deleted", "subscription", id, "group", g.name, "members_ended", len(subs),
		"messages_dropped", dropped+inFlight)
	return nil
}

// evict takes every member out of g and drops what they hold (their unsent deliveries and
// their unacked messages); it returns their subscriptions, to be ended once no lock is held,
// and how many messages they held. b.mu must be held, so that no member joins meanwhile.
func (g *group) evict() (subs []*Subscription, dropped int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.members {
		m.s.takeUnsent(nil)
		for seq, e := range m.owned {
			delete(m.owned, seq)
			g.forgetLocked(e)
			dropped++
		}
		subs = append(subs, m.s)
	}
	g.members, g.rr = nil, 0
	return subs, dropped
}

func (g *group) memberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}

// Streams lists the open streams that carry subscriptions, sorted by id.
func (b *Engine) Streams() []broker.StreamInfo {
	subs := b.allSubscriptions()
	byStream := make(map[*Stream]*broker.StreamInfo)
	var order []*Stream
	for _, s := range subs {
		st := s.st
		info := byStream[st]
		if info == nil {
			info = &broker.StreamInfo{ID: "stream-" + strconv.FormatUint(st.id, 10), Peer: st.subs.Peer()}
			byStream[st] = info
			order = append(order, st)
		}
		info.Subscriptions = append(info.Subscriptions, s.Settings())
	}
	slices.SortFunc(order, func(a, b *Stream) int { return cmp.Compare(a.id, b.id) })
	out := make([]broker.StreamInfo, 0, len(order))
	for _, st := range order {
		info := byStream[st]
		st.out.mu.Lock()
		info.Buffered = st.out.lenLocked()
		st.out.mu.Unlock()
		slices.SortFunc(info.Subscriptions, func(a, b broker.Settings) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, *info)
	}
	return out
}

// Ready says whether the broker serves: nil until Shutdown starts.
func (b *Engine) Ready() error {
	if b.closing.Load() {
		return fmt.Errorf("%w: the broker is shutting down", broker.ErrShuttingDown)
	}
	return nil
}
