package memory

import (
	"fmt"

	"github.com/tinybroker/tinybroker/broker"
)

// The administration of consumer groups (broker.Engine): describe, purge, delete.

var _ broker.Engine = (*Engine)(nil)

// Group describes the consumer group of subscription_id id.
func (b *Engine) Group(id string) (broker.GroupStats, error) {
	g, err := b.groupByID(id)
	if err != nil {
		return broker.GroupStats{}, err
	}
	return g.stats(), nil
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

// DeleteGroup removes the consumer group and what it holds. A group with members is not
// deleted: its members would have to be ended behind their clients' backs.
func (b *Engine) DeleteGroup(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[id]
	if g == nil {
		return fmt.Errorf("%w %q: no consumer group has this subscription_id", broker.ErrUnknownSubscription, id)
	}
	if n := g.memberCount(); n > 0 {
		return fmt.Errorf("%w: consumer group %q has %d members; close their subscriptions first, then delete it", broker.ErrGroupInUse, id, n)
	}
	dropped := b.removeGroupLocked(g)
	b.log.Info("consumer group deleted", "subscription", id, "messages_dropped", dropped)
	return nil
}

func (g *group) memberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}
