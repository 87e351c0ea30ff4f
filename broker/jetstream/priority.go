package jetstream

// Message and member priorities on the JetStream engine (broker.Dispatch.MaxPriority,
// broker.SubscribeOptions.Priority).
//
// Message priority. JetStream delivers a consumer's messages in stream order, whatever is
// in them, so a group with max_priority dispatches through the node-side queue that ordered
// and fair groups use (keyed.go): the node pulls ahead up to its parking bound (keyParkMax
// messages, keyParkBytes) and, of what it holds that may go now, hands out one of the highest
// level (Dispatch.Level: the message's priority, at most max_priority) first; within a level
// as without priorities: messages without a key in stream order, lanes in turn, the older of
// the two heads first. Each tenant keeps its ready lanes and messages without a key per
// level (tlevels), so a pop looks at ten levels at most, not at every lane. The precedence,
// when ordering and fair_by are on too:
//
//  1. Ordering keys decide what may go: a key's head alone, so a message never overtakes an
//     earlier one of its key; a high-priority message behind a low-priority one of its key
//     waits for it (ordering is a guarantee).
//  2. fair_by's turns decide whose turn it is: another tenant's higher priority does not
//     take a tenant's turn, so a tenant cannot defeat fairness by marking its flood high.
//  3. Priority decides what goes within the turn: the highest level among the tenant's
//     ready lanes' heads and its messages without a key.
//
// Priority is strict among what the node has pulled, not over the whole backlog: a message
// still in the stream behind more than keyParkMax others waits until the node's window
// reaches it, as a FIFO queue would make it. Strictness over a deeper backlog would need the
// level in the message's subject and a consumer per level (JetStream filters a consumer by
// subject, and cannot skip ahead within one): ten consumers and pull loops per group, and a
// layout of the stream that nodes of an older version would not read. When members come to
// a backlog, the node gathers what its pull brings before it hands out (gatheringLocked). A
// group with max_priority and no ordering is not pinned: each node with members takes its
// own window, and priority holds per node.
//
// Member priority. A message goes to a member of the highest priority with room,
// round-robin among those; a member of a lower priority gets nothing while a higher one has
// room. Where members pull for themselves (groups dispatched by JetStream), the consumer's
// priority policy is prioritized (NATS 2.12): JetStream serves the waiting pull requests by
// their priority, 0 first (round-robin within one), so a member of priority p asks at
// grouping.MaxPriority-p; a member that is full has no request open, and the next message
// goes to the next priority's. We read how the server does it (server/consumer.go,
// processNextMsgRequest, waitQueue.addPrioritized, popAndRequeue): the policy may change on
// an update of the consumer; a request that names the priority group is served as any other
// by a consumer without a policy, but one that does not is refused (400) by a prioritized
// consumer. So every pull names the group, and a consumer takes the policy only when a member
// with a priority joins (Engine.join updates it; one made before this version too): until
// then nothing changes, and a node of an older version, whose pulls name no group, keeps
// working. Member priorities need every node on this version. One gap: a member's request
// that expires (pullExpires) is renewed a round trip later, and a message that comes in that
// moment goes to a lower member with a request open.
//
// Where the node dispatches (groups with a keyq), takerLocked chooses among this node's
// members, and the node's pull carries its highest member priority with room, so that in a
// cluster JetStream serves first the node whose members rank higher. Of an ordered group,
// only the members of the node that holds the pin get messages, whatever their priority, as
// they already do without priorities (keyed.go); the other nodes' members stand by.

import (
	"slices"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// localDispatch says whether a group of dispatch d is dispatched by its node, from a keyq,
// rather than by JetStream to each member's own pull requests.
func localDispatch(d broker.Dispatch) bool { return d.Keyed() || d.MaxPriority > 0 }

// tlevels holds a tenant's ready lanes and messages without a key at the levels above 0
// (index level-1), each level as a tenant's level 0 is. It is made only for a tenant that has
// had a message above level 0, so that groups without priorities carry none of it; a tenant
// keeps it while it exists (it exists while the node holds its messages).
type tlevels [grouping.MaxPriority]struct {
	ready []*klane
	free  []*kentry
}

// at returns t's ready lanes and its messages without a key at level, made if need be.
func (t *ktenant) at(level uint8) (*[]*klane, *[]*kentry) {
	if level == 0 {
		return &t.ready, &t.free
	}
	if t.above == nil {
		t.above = new(tlevels)
	}
	l := &t.above[level-1]
	return &l.ready, &l.free
}

// waiting says whether t has a ready lane (or one that was: popLevel skips it) or a message
// without a key, at any level.
func (t *ktenant) waiting() bool {
	if len(t.ready) > 0 || len(t.free) > 0 {
		return true
	}
	if t.above != nil {
		for i := range t.above {
			if len(t.above[i].ready) > 0 || len(t.above[i].free) > 0 {
				return true
			}
		}
	}
	return false
}

// relevel moves l, ready, to the level of its head when that changed while it waited (an
// older message of its key came: JetStream redelivered it after a failover; or its head was
// taken out: a purge, drop_oldest). Rare, so the lane is looked for.
func (k *keyq) relevel(l *klane) {
	lv := k.d.Level(l.q[0].msg.Priority)
	if lv == l.level {
		return
	}
	ready, _ := l.t.at(l.level)
	if i := slices.Index(*ready, l); i >= 0 {
		*ready = slices.Delete(*ready, i, i+1)
	}
	l.level = lv
	ready, _ = l.t.at(lv)
	*ready = append(*ready, l)
}

// gatherMax is how long a node with nothing out may wait for what its pull request is
// bringing before it hands out (gatheringLocked).
const gatherMax = 100 * time.Millisecond

// gatherLocked notes that g's node sent a pull request: while nothing of the group is out
// and JetStream holds messages for it, the node first gathers what the request brings, for
// gatherMax at most. g.mu must be held.
func (g *group) gatherLocked() {
	if g.dispatch.MaxPriority == 0 || g.queued == 0 || g.kq.flying > 0 {
		return
	}
	g.gatherUntil = time.Now().Add(gatherMax)
	time.AfterFunc(gatherMax, func() { // the request may bring less than counted
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.removed && !g.e.closing.Load() {
			g.pumpAllLocked()
		}
	})
}

// gatheringLocked says whether g's node holds back what it parked to let its open pull
// request bring the rest of what JetStream holds: without it, members that join a group
// with a backlog would get the oldest message first, the first to arrive, whatever its
// priority. It holds back while the request is open and may still bring messages
// JetStream holds (the group's queued count, exact on one node), until gatherMax after the
// request: in a cluster the count may be too high (other nodes' members took messages),
// and the members then wait that long once. g.mu must be held.
func (g *group) gatheringLocked() bool {
	return g.kreqID != 0 && g.queued > 0 && g.kq.flying == 0 && !g.kq.full() && time.Now().Before(g.gatherUntil)
}

// pullPriority is the priority of a pull request (0 first) for members of priority p.
func pullPriority(p uint8) int { return grouping.MaxPriority - int(min(p, grouping.MaxPriority)) }

// topPriorityLocked is the highest priority among this node's members with room: the one
// the node's pull for them carries, so that in a cluster a node whose members rank higher
// is served first. g.mu must be held.
func (g *group) topPriorityLocked() uint8 {
	var p uint8
	for _, m := range g.members {
		if len(m.held) < m.maxInFlight {
			p = max(p, m.priority)
		}
	}
	return p
}
