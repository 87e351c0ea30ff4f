package jetstream

// Ordering keys and fair dispatch on the JetStream engine (broker.Dispatch): which node
// dispatches an ordered group, how that node keeps one message of a key out at a time, and
// how a node takes turns across fair_by's tenants.
//
// One node at a time: the consumer of an ordered group has JetStream's priority policy
// pinned_client. JetStream hands the group's messages only to pull requests that carry the
// current pin id; the first request without one, while no pin is held, gets a new pin with
// its message (the Nats-Pin-Id header). Every member on the node that holds the pin pulls
// with it; the other nodes' members ask (one message, no pin) and stand by. The pin moves
// when the node holding it sends no request for pinnedTTL (it died, or its members left), or
// when the consumer's leader changes (the pin is the leader's alone).
//
// A node that gets a pin asks JetStream how many messages the group has out (NumAckPending):
// if they are no more than the node holds, no other node holds any, and it dispatches at
// once. Otherwise the previous holder (dead, or cut off) may still hold messages: the node
// pulls but hands nothing out for takeoverGrace (the consumer's AckWait and two ticks), by
// when JetStream has redelivered what the previous holder held, and it parks those in stream
// order before the keys' later messages. A node that hears that it lost the pin (status 423)
// gives back what it parked and stops passing its members' touches to JetStream, so that what
// they hold expires within the new holder's grace.
//
// On the node: messages pulled wait in lanes, one per order key, in stream order; a lane's
// head alone may be out (held by a member, delayed after a nack, or with the hooks). A nack,
// a timeout or a member leaving puts the message back at the head of its lane, here: it is
// never given back to JetStream while the node holds the pin, so it goes before its key's
// later messages, and the key stays busy until it is acked, dead-lettered or dropped. What
// waits here is kept from JetStream's redelivery with +WPI every tick. Parked messages are
// bounded (keyParkMax, keyParkBytes): at the bound the node stops pulling for the group, and
// the keys it has parked hold back the others (head-of-line blocking past the bound, as SQS
// FIFO's in-flight cap).
//
// Lanes and messages without a key belong to tenants (fair_by's; one without it), and the
// node hands out by turns across tenants with a message that may go. With fair_by it pulls
// ahead (fairWindow; keyParkMax while a tenant is noisy) to have turns to take, and keeps a
// tenth of its members' room for the tenants that are not noisy (keyq.pop); a group with
// fair_by alone is not pinned: each node takes turns among what it pulled. See RATIONALE.md,
// "How do ordering keys and fair dispatch hold on the JetStream engine, and in a cluster?".
// A group with max_priority uses the same queue, and chooses by level within a tenant's turn
// (priority.go, which writes the precedence down).

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

const (
	keyTick         = time.Second   // keepalive of the pin, +WPI of what is parked, the grace's end
	pinnedTTL       = 5 * keyTick   // the consumer's PinnedTTL: a pin not renewed for this long moves
	keyParkMax      = 1024          // messages a node parks for a keyed group
	keyParkBytes    = 8 << 20       // bytes a node parks for a keyed group
	pinGroup        = "tinybroker"  // the consumer's one priority group
	hdrPin          = "Nats-Pin-Id" // the pin a message was delivered under
	keyLaneCost     = 160           // what a lane costs besides its key
	tenantCost      = 192           // what a tenant costs besides its name
	fairWindow      = 256           // with fair_by, a node pulls ahead this many messages to take turns among (keyParkMax while a tenant is noisy)
	metaOrdering    = "tinybroker-ordering"
	metaFairBy      = "tinybroker-fair-by"
	metaMaxPriority = "tinybroker-max-priority"
)

// kentry is a message a keyed group's node pulled and has not settled.
type kentry struct {
	msg     *broker.Message
	reply   string
	info    ackInfo
	attempt uint32   // the attempt it was last handed out as (0: never)
	lane    *klane   // nil: not ordered (no key)
	tn      *ktenant // the tenant it counts for
	out     bool     // held by a member, delayed, or with the hooks
	gone    bool     // settled, or given back to JetStream
	flying  bool     // handed out by pop and not back (keyq.landed)
	quiet   bool     // flying, handed out while its tenant was not noisy
	level   uint8    // the level it waits at (Dispatch.Level of its priority)
	touched time.Time
	timer   *time.Timer // a nack's delay
}

// klane holds the messages of one order key that wait, by stream sequence.
type klane struct {
	key   string
	t     *ktenant
	q     []*kentry
	busy  *kentry // its message out, if any
	ready bool    // among t's ready lanes, at level
	level uint8   // its head's level when it was put there (relevel)
}

// ktenant is fair_by's tenant (one, "", without fair_by): its ready lanes in turn, and its
// waiting messages without an order key, by level (priority.go): ready and free hold level
// 0, every message of a group without priorities.
type ktenant struct {
	name    string
	ready   []*klane
	free    []*kentry // by stream sequence
	above   *tlevels  // levels 1 and up, made when a message of one parks
	inReady bool      // in keyq.ready
	held    int       // its messages this node holds
	noisy   bool
}

// keyq is what a keyed group's node holds: every message it pulled and has not settled.
// Dispatch takes turns across tenants with a message that may go; within a tenant, the older
// of its next ready lane's head and its first message without a key.
type keyq struct {
	d       broker.Dispatch
	lanes   map[string]*klane
	tenants map[string]*ktenant
	ready   []*ktenant // tenants with a message that may go, in turn
	bySeq   map[uint64]*kentry
	parked  int   // waiting (not out)
	pbytes  int64 // their cost
	bytes   int64 // what the lanes and tenants cost
	noisy   []string
	noisyN  int // tenants noisy now
	// flying is how many messages pop handed out and are not back, quietFlying how many of
	// those were handed out while their tenant was not noisy.
	flying, quietFlying int
}

func newKeyq(d broker.Dispatch) *keyq {
	return &keyq{d: d, lanes: make(map[string]*klane), tenants: make(map[string]*ktenant), bySeq: make(map[uint64]*kentry)}
}

func (k *keyq) full() bool { return k.parked >= keyParkMax || k.pbytes >= keyParkBytes }

// insert puts e in q by stream sequence (almost always at the back).
func insert(q []*kentry, e *kentry) []*kentry {
	i := len(q)
	for i > 0 && q[i-1].info.sseq > e.info.sseq {
		i--
	}
	return slices.Insert(q, i, e)
}

// add parks a message JetStream delivered; it returns the lanes' and tenants' cost it
// added, or -1 if the node holds that message already (JetStream redelivered it: the newer
// reply is kept).
func (k *keyq) add(e *kentry) int64 {
	if old := k.bySeq[e.info.sseq]; old != nil {
		old.reply, old.info = e.reply, e.info
		return -1
	}
	k.bySeq[e.info.sseq] = e
	var cost int64
	okey, ordered := k.d.OrderKey(e.msg.Key)
	if ordered {
		e.lane = k.lanes[okey]
	}
	if e.lane != nil {
		e.tn = e.lane.t // a key's messages count for the tenant of its lane
	} else {
		name := k.d.Tenant(e.msg.Key, e.msg.Headers)
		if e.tn = k.tenants[name]; e.tn == nil {
			e.tn = &ktenant{name: name}
			k.tenants[name] = e.tn
			cost += tenantCost + int64(len(name))
		}
		if ordered {
			e.lane = &klane{key: okey, t: e.tn}
			k.lanes[okey] = e.lane
			cost += keyLaneCost + int64(len(okey))
		}
	}
	e.tn.held++
	k.bytes += cost
	if k.d.FairBy != "" {
		k.checkNoisy(e.tn)
	}
	k.park(e)
	return cost
}

// park puts e, not out, where it waits.
func (k *keyq) park(e *kentry) {
	k.landed(e)
	e.out = false
	e.level = k.d.Level(e.msg.Priority)
	k.parked++
	k.pbytes += msgCost(e.msg)
	if l := e.lane; l != nil {
		if l.busy == e {
			l.busy = nil
		}
		l.q = insert(l.q, e)
		if l.ready {
			k.relevel(l)
		} else {
			k.readied(l)
		}
		return
	}
	_, free := e.tn.at(e.level)
	*free = insert(*free, e)
	k.tenantReady(e.tn)
}

func (k *keyq) readied(l *klane) {
	if !l.ready && l.busy == nil && len(l.q) > 0 {
		l.ready, l.level = true, k.d.Level(l.q[0].msg.Priority)
		ready, _ := l.t.at(l.level)
		*ready = append(*ready, l)
		k.tenantReady(l.t)
	}
}

func (k *keyq) tenantReady(t *ktenant) {
	if !t.inReady && t.waiting() {
		t.inReady = true
		k.ready = append(k.ready, t)
	}
}

// pop returns the next message that may go, now out; nil if none may.
//
// Noisy tenants take their turns only while they have, together, fewer messages out than
// room minus headroom, the headroom being what the other tenants have out plus a tenth of
// room (at least one): the rest of the members' room is kept for the others, so that a
// message of a quiet tenant finds a member with room the moment it comes instead of waiting
// for the flood's next ack (as the memory engine's keyed.pop). room is what the node's
// members can hold together.
func (k *keyq) pop(room int) *kentry {
	noisyCap := max(1, room-k.quietFlying-max(1, room/10))
	for turns := len(k.ready); turns > 0 && len(k.ready) > 0; turns-- {
		t := k.ready[0]
		k.ready = k.ready[1:]
		t.inReady = false
		if t.noisy && k.flying-k.quietFlying >= noisyCap {
			k.tenantReady(t) // its turn comes again once room is back
			continue
		}
		e := k.popTenant(t)
		k.tenantReady(t) // its next turn comes after the other tenants'
		if e != nil {
			e.out = true
			k.parked--
			k.pbytes -= msgCost(e.msg)
			e.flying, e.quiet = true, !t.noisy
			k.flying++
			if e.quiet {
				k.quietFlying++
			}
			return e
		}
	}
	return nil
}

// landed records that e, handed out by pop, is back (or gone).
func (k *keyq) landed(e *kentry) {
	if !e.flying {
		return
	}
	e.flying = false
	k.flying--
	if e.quiet {
		k.quietFlying--
	}
}

// popTenant takes t's next message: at its highest level with one (priority.go), the older
// of its first ready lane's head and its first message without a key.
func (k *keyq) popTenant(t *ktenant) *kentry {
	if t.above != nil {
		for lv := len(t.above) - 1; lv >= 0; lv-- {
			if e := popLevel(&t.above[lv].ready, &t.above[lv].free); e != nil {
				return e
			}
		}
	}
	return popLevel(&t.ready, &t.free)
}

// popLevel takes the next message of one level of a tenant: the older of the first ready
// lane's head and the first message without a key.
func popLevel(ready *[]*klane, free *[]*kentry) *kentry {
	r := *ready
	for len(r) > 0 && (len(r[0].q) == 0 || r[0].busy != nil) {
		r[0].ready = false
		r = r[1:]
	}
	*ready = r
	switch {
	case len(r) > 0 && (len(*free) == 0 || r[0].q[0].info.sseq < (*free)[0].info.sseq):
		l := r[0]
		l.ready = false
		*ready = r[1:]
		e := l.q[0]
		l.q = l.q[1:]
		l.busy = e
		return e
	case len(*free) > 0:
		e := (*free)[0]
		*free = (*free)[1:]
		return e
	}
	return nil
}

// unpark takes e, waiting, out of its lane (to give it back or settle it where it waits).
func (k *keyq) unpark(e *kentry) {
	if e.out {
		return
	}
	if l := e.lane; l != nil {
		if i := slices.Index(l.q, e); i >= 0 {
			l.q = slices.Delete(l.q, i, i+1)
			if i == 0 && l.ready && len(l.q) > 0 {
				k.relevel(l)
			}
		}
	} else {
		_, free := e.tn.at(e.level)
		if i := slices.Index(*free, e); i >= 0 {
			*free = slices.Delete(*free, i, i+1)
		}
	}
	e.out = true
	k.parked--
	k.pbytes -= msgCost(e.msg)
}

// release forgets e, settled for good or given back: its key's next message may go. It
// returns what that freed of the lanes' and tenants' cost.
func (k *keyq) release(e *kentry) (freed int64) {
	if e.gone {
		return 0
	}
	k.unpark(e)
	k.landed(e)
	e.gone = true
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(k.bySeq, e.info.sseq)
	if l := e.lane; l != nil {
		if l.busy == e {
			l.busy = nil
			k.readied(l)
		}
		if l.busy == nil && len(l.q) == 0 && k.lanes[l.key] == l {
			delete(k.lanes, l.key)
			freed += keyLaneCost + int64(len(l.key))
		}
	}
	t := e.tn
	t.held--
	if t.noisy && (t.held*20 < len(k.bySeq) || t.held <= 0) {
		t.noisy = false
		k.noisyN--
	}
	if t.held <= 0 && k.tenants[t.name] == t {
		delete(k.tenants, t.name)
		freed += tenantCost + int64(len(t.name))
	}
	k.bytes -= freed
	return freed
}

// checkNoisy marks t noisy when it holds more than a tenth of what this node holds of the
// group (and at least grouping.NoisyMin), once per episode, to be logged.
func (k *keyq) checkNoisy(t *ktenant) {
	if !t.noisy && t.held >= grouping.NoisyMin && t.held*10 > len(k.bySeq)+1 {
		t.noisy = true
		k.noisyN++
		k.noisy = append(k.noisy, t.name)
	}
}

// sorted returns every entry, by stream sequence.
func (k *keyq) sorted() []*kentry {
	es := make([]*kentry, 0, len(k.bySeq))
	for _, e := range k.bySeq {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *kentry) int { return cmp.Compare(a.info.sseq, b.info.sseq) })
	return es
}

// busiest returns how many keys (with fair_by, tenants) hold messages here and the
// grouping.BusiestKeys that hold the most (waiting and out), most first.
func (k *keyq) busiest() (int, []broker.KeyLoad) {
	var top []broker.KeyLoad
	n := len(k.lanes)
	if k.d.FairBy != "" {
		n = len(k.tenants)
		for name, t := range k.tenants {
			top = append(top, broker.KeyLoad{Key: name, Held: t.held, Noisy: t.noisy})
		}
	} else {
		for key, l := range k.lanes {
			held := len(l.q)
			if l.busy != nil {
				held++
			}
			top = append(top, broker.KeyLoad{Key: key, Held: held})
		}
	}
	slices.SortFunc(top, func(a, b broker.KeyLoad) int {
		if c := cmp.Compare(b.Held, a.Held); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(top) > grouping.BusiestKeys {
		top = top[:grouping.BusiestKeys]
	}
	return n, top
}

// ordered says whether g orders by keys: its consumer is pinned (g.kq is set too). g.mu or
// Engine.mu must be held.
func (g *group) ordered() bool { return g.dispatch.Ordering != broker.OrderingNone }

// setDispatchLocked takes g's dispatch, as defined or read. g.mu must be held (or g not yet
// shared).
func (g *group) setDispatchLocked(d broker.Dispatch) {
	g.dispatch = d
	if !localDispatch(d) {
		if g.kq != nil {
			g.flushLocked("ordering, fair_by and max_priority turned off")
			g.kq = nil
		}
		return
	}
	if g.kq == nil {
		g.kq = newKeyq(d)
	}
	g.kq.d = d
}

// charge adds n bytes (negative: gives them back) of the lanes' cost to what g holds.
func (g *group) chargeLocked(n int64) {
	if n == 0 {
		return
	}
	n = max(n, -g.bytes)
	g.bytes += n
	g.quota.AddBytes(n)
}

// maxUnseen bounds group.unseen: an entry goes when its message comes back to this node,
// but one another node of a cluster took stays. Past the bound the map starts again, and a
// message handed back unseen before may count one attempt too many (as one another node
// takes does anyway).
const maxUnseen = 4096

// noteUnseenLocked records that this node hands back JetStream's delivery of seq without a
// member having seen it. g.mu must be held.
func (g *group) noteUnseenLocked(seq uint64) {
	if len(g.unseen) >= maxUnseen {
		clear(g.unseen)
	}
	g.unseen[seq]++
}

// unseenLocked returns how many of JetStream's deliveries of the message info describes
// were handed back by this node unseen (group.unseen): they are no attempts. g.mu must be
// held.
func (g *group) unseenLocked(info ackInfo) uint32 {
	return min(g.unseen[info.sseq], info.delivered-1)
}

// keyedArrivalLocked takes a message JetStream delivered to an ordered group: it parks it,
// hands out what may go, and pulls again. It lets go of g.mu.
func (g *group) keyedArrivalLocked(msg *nats.Msg, info ackInfo) {
	if p := msg.Header.Get(hdrPin); p != "" && p != g.pin && g.ordered() {
		g.acquireLocked(p)
	}
	if g.draining || g.removed {
		g.mu.Unlock()
		_ = g.e.nc.Publish(msg.Reply, []byte("-NAK"))
		return
	}
	if info.delivered == 1 && g.queued > 0 {
		g.queued--
	}
	bm := g.decode(msg, info.sseq)
	if g.maxDeliveries > 0 && int(info.delivered-g.unseenLocked(info)) > g.maxDeliveries && g.kq.bySeq[info.sseq] == nil {
		// JetStream redelivered it by itself (the node that held it went away) past
		// max_deliveries: it is dead.
		h := &held{msg: bm, reply: msg.Reply, info: info, attempt: g.markLocked(info.sseq, info.delivered) - 1, sentAt: time.Now()}
		g.mu.Unlock()
		g.settle([]takeItem{{h: h, reason: deadletter.ReasonAckDeadline}})
		return
	}
	if now := time.Now(); g.kq.bySeq[info.sseq] == nil && expired(g.limits, bm, now) { // never parked (expiry.go)
		h := &held{msg: bm, reply: msg.Reply, info: info, attempt: g.markLocked(info.sseq, info.delivered) - 1, sentAt: now}
		g.mu.Unlock()
		g.settle([]takeItem{{h: h, reason: deadletter.ReasonExpired}})
		return
	}
	e := &kentry{msg: bm, reply: msg.Reply, info: info, touched: time.Now()}
	if cost := g.kq.add(e); cost > 0 {
		g.chargeLocked(cost)
	}
	for _, name := range g.kq.noisy {
		g.e.log.Warn("noisy tenant: it holds more than a tenth of what the group holds here; the others keep their turns",
			"group", g.id, "fair_by", g.dispatch.FairBy, "tenant", name, "holds", g.kq.tenants[name].held, "of", len(g.kq.bySeq))
	}
	g.kq.noisy = g.kq.noisy[:0]
	g.armTickLocked()
	g.pumpAllLocked()
	g.mu.Unlock()
}

// keyedInbox subscribes the inbox this node's pull requests for the group carry, once.
func (g *group) keyedInbox() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.keyedInboxLocked()
}

func (g *group) keyedInboxLocked() error {
	if g.ksub != nil {
		return nil
	}
	inbox := nats.NewInbox()
	sub, err := g.e.nc.Subscribe(inbox+".*", g.onKeyedMsg)
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	g.ksub, g.kinbox = sub, inbox
	return nil
}

// pullKeyedLocked asks JetStream for what the members here have room for, up to the
// parking bound, unless a request is open: an ordered group's node pulls for all its
// members at once, with one inbox, so that what JetStream sends arrives in its order.
// g.mu must be held.
func (g *group) pullKeyedLocked() {
	if g.kreqID != 0 || len(g.members) == 0 || g.draining || g.removed || g.pinChecking || g.kq.full() {
		return
	}
	if err := g.keyedInboxLocked(); err != nil { // ordering came on with members here (another node redefined the group)
		g.e.log.Warn("ordered group: cannot subscribe its inbox", "group", g.id, "error", err)
		return
	}
	room := 0
	for _, m := range g.members {
		room += max(0, m.maxInFlight-len(m.held))
	}
	switch {
	case g.dispatch.MaxPriority > 0 || g.kq.noisyN > 0:
		// Priorities are strict among what the node holds (priority.go); a flood's quiet
		// tenants are found behind it (RATIONALE.md).
		room = max(room, keyParkMax-g.kq.parked)
	case g.dispatch.FairBy != "": // a window to take turns among
		room = max(room, fairWindow-g.kq.parked)
	}
	room = min(room, keyParkMax-g.kq.parked)
	if room <= 0 {
		return
	}
	expires := pullExpires
	if after := g.e.opts.GroupExpireAfter; after > 0 && !g.declared {
		expires = min(expires, after/2)
	}
	if g.pin == "" && g.ordered() {
		room, expires = 1, min(expires, keyTick) // asks for the pin: see the file's comment
	}
	g.kreqSeq++
	rid := g.kreqSeq
	g.kreqID, g.kremaining, g.kreqPin = rid, room, g.pin
	g.gatherLocked()
	req := g.pullRequest(room, expires, g.topPriorityLocked())
	subj := "$JS.API.CONSUMER.MSG.NEXT." + g.stream + "." + g.consumer
	if err := g.e.nc.PublishRequest(subj, g.kinbox+"."+strconv.FormatUint(rid, 10), req); err != nil {
		g.e.log.Warn("pull request failed", "group", g.id, "error", err)
	}
	time.AfterFunc(expires+2*time.Second, func() { // one JetStream lost ends here at the latest
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.kreqID == rid {
			g.kreqID = 0
			g.pullKeyedLocked()
		}
	})
}

// onKeyedMsg handles what JetStream sends to the group's inbox here: a message, or the
// status that ends a pull request (or a keepalive: request 0).
func (g *group) onKeyedMsg(msg *nats.Msg) {
	e := g.e
	if rid, code := pullStatus(msg); code != "" {
		if code == "100" {
			return
		}
		g.mu.Lock()
		pin := g.keepPin
		if rid != 0 {
			pin = g.kreqPin
			if g.kreqID != rid {
				pin = "" // an older request's
			}
		}
		if g.kreqID == rid {
			g.kreqID = 0
		}
		if code == "423" && g.ordered() && pin != "" && pin == g.pin { // another node has the pin now
			g.lostPinLocked()
		}
		deleted := consumerDeleted(msg, code)
		if !deleted {
			g.pullKeyedLocked()
		}
		g.mu.Unlock()
		if deleted {
			e.wg.Go(func() { e.forgetGroup(g.id, g) })
		}
		return
	}
	info, ok := parseAck(msg.Reply)
	if !ok {
		return
	}
	g.mu.Lock()
	if g.kreqID != 0 {
		if g.kremaining--; g.kremaining <= 0 {
			g.kreqID = 0
		}
	}
	if skips(msg, g) { // stored while the group was full: it refused it
		if info.delivered == 1 && g.skipped > 0 {
			g.skipped--
		}
		g.pullKeyedLocked()
		g.mu.Unlock()
		_ = e.nc.Publish(msg.Reply, []byte("+TERM"))
		return
	}
	if g.kq == nil { // ordering went off meanwhile: JetStream gives it to a member
		g.mu.Unlock()
		_ = e.nc.Publish(msg.Reply, []byte("-NAK"))
		return
	}
	g.keyedArrivalLocked(msg, info)
}

// mayDispatchLocked says whether this node may hand out the group's messages now.
func (g *group) mayDispatchLocked() bool {
	if g.paused {
		return false
	}
	return !g.ordered() || g.pin != "" && !g.pinChecking && (g.graceUntil.IsZero() || !time.Now().Before(g.graceUntil))
}

// dispatchLocked hands the messages that may go to members with room. g.mu must be held.
func (g *group) dispatchLocked() {
	if g.kq == nil {
		return
	}
	if len(g.members) == 0 || g.draining || g.removed {
		g.flushLocked("")
		g.endPullLocked()
		return
	}
	if !g.mayDispatchLocked() || g.gatheringLocked() {
		return
	}
	var gone []takeItem // expired while parked: let go of, not handed out (expiry.go)
	defer func() {
		if len(gone) > 0 {
			g.e.wg.Go(func() { g.settle(gone) })
		}
	}()
	now := time.Now()
	room := 0
	for _, m := range g.members {
		room += m.maxInFlight
	}
	for {
		t := g.takerLocked()
		if t == nil {
			return
		}
		e := g.kq.pop(room)
		if e == nil {
			return
		}
		if expired(g.limits, e.msg, now) {
			gone = append(gone, takeItem{h: &held{msg: e.msg, reply: e.reply, info: e.info, attempt: e.attempt, sentAt: now, e: e}, reason: deadletter.ReasonExpired})
			continue
		}
		attempt := e.attempt + 1
		if e.attempt == 0 {
			attempt = g.markLocked(e.info.sseq, e.info.delivered) - g.unseenLocked(e.info)
			delete(g.unseen, e.info.sseq)
		}
		e.attempt = attempt
		if time.Since(e.touched) > keyTick { // parked a while: JetStream's AckWait starts again
			_ = g.e.nc.Publish(e.reply, []byte("+WPI"))
			e.touched = time.Now()
		}
		delete(g.delayed, e.info.sseq)
		g.handLocked(t, &held{msg: e.msg, reply: e.reply, info: e.info, attempt: attempt, sentAt: time.Now(), e: e})
		g.turn = slices.Index(g.members, t) + 1 // the next of its priority comes next
	}
}

// requeueLocked puts e, taken back from its member, at the head of its key's lane (after
// delay, if any: its key stays busy meanwhile). g.mu must be held.
func (g *group) requeueLocked(e *kentry, delay time.Duration) {
	if e.gone || g.kq == nil {
		return
	}
	g.kq.landed(e)
	if delay <= 0 {
		g.kq.park(e)
		return
	}
	g.delayed[e.info.sseq] = time.Now().Add(delay)
	e.timer = time.AfterFunc(delay, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if e.gone || g.kq == nil || !e.out {
			return
		}
		e.timer = nil
		delete(g.delayed, e.info.sseq)
		g.kq.park(e)
		g.pumpAllLocked()
	})
}

// kqEntry returns the entry of seq an ordered group's node holds and no member does (parked
// or delayed), or nil. g.mu must be held.
func (g *group) kqEntry(seq uint64) *kentry {
	if g.kq == nil {
		return nil
	}
	if e := g.kq.bySeq[seq]; e != nil && (!e.out || e.timer != nil) {
		return e
	}
	return nil
}

// releaseKeyLocked forgets e, settled for good. g.mu must be held.
func (g *group) releaseKeyLocked(e *kentry) {
	if e == nil || g.kq == nil {
		return
	}
	delete(g.delayed, e.info.sseq)
	g.chargeLocked(-g.kq.release(e))
}

// flushLocked gives back to JetStream, oldest first, everything this node parked or
// delayed for g (no member left here, the node stops, ordering went off, or it lost the
// pin), and lets go of the pin: another node takes it (and waits out its grace, as JetStream
// still counts these as out until they are redelivered). Messages members hold stay theirs.
// g.mu must be held.
func (g *group) flushLocked(why string) {
	if g.kq == nil {
		return
	}
	held := 0
	for _, e := range g.kq.sorted() {
		if e.out && e.timer == nil {
			held++ // a member's, or with the hooks
			continue
		}
		delete(g.delayed, e.info.sseq)
		g.chargeLocked(-g.kq.release(e))
		g.waiting[e.info.sseq] = e.msg // as any message given back, until JetStream redelivers it
		if e.attempt == 0 {
			// Parked, never handed to a member: JetStream's delivery is no attempt. In a
			// cluster a node without members keeps its open pull (endPullLocked), which
			// brings each message back at once, as often as its batch allows: counted, they
			// dead-lettered what no member had seen.
			g.noteUnseenLocked(e.info.sseq)
		}
		_ = g.e.nc.Publish(e.reply, []byte("-NAK"))
	}
	if why != "" {
		g.e.log.Warn("keyed group: this node gave back what it had parked", "group", g.id, "reason", why, "members_hold", held)
	}
	if len(g.members) == 0 || why != "" {
		g.pin, g.pinChecking, g.graceUntil = "", false, time.Time{}
		g.pinGen++
	}
}

// endPullLocked stops the node's open pull request once no member is left here, on one
// node, by letting go of its inbox: JetStream skips a request that nobody listens to, and
// the next member pulls with a new one. Otherwise each message the request brings would go
// back at once (flushLocked) and come again, a round trip each until the request's batch
// ran out, every one a delivery that counts toward max_deliveries (a group of max_deliveries
// 2 dead-lettered what was published while it had no member). In a cluster the inbox stays,
// as a member's does (inboxDoneLocked): a delivery replicated before the inbox went would be
// sent to nobody and wait for AckWait. g.mu must be held.
func (g *group) endPullLocked() {
	if !g.e.solo || g.ksub == nil || len(g.members) > 0 || g.draining || g.removed {
		return
	}
	if err := g.ksub.Drain(); err != nil {
		_ = g.ksub.Unsubscribe()
	}
	g.ksub, g.kinbox, g.kreqID = nil, "", 0
}

// acquireLocked notes that JetStream gave this node the pin p, and checks whether another
// node may still hold messages of the group (see the file's comment). g.mu must be held.
func (g *group) acquireLocked(p string) {
	g.pin, g.graceUntil = p, time.Time{}
	g.pinGen++
	g.checkTakeoverLocked(true)
}

// checkTakeoverLocked asks JetStream how many messages the group has out: if no more than
// this node holds, no other node holds any (this node counts one before it acks it), and the
// grace, if any, ends; otherwise (first, with first set) the grace starts. It holds back this
// node's pulls until the answer: what this node pulls meanwhile would count as another's.
// g.mu must be held.
func (g *group) checkTakeoverLocked(first bool) {
	if g.pinChecking {
		return
	}
	if g.e.closing.Load() {
		return
	}
	g.pinChecking = true
	gen := g.pinGen
	g.e.wg.Go(func() {
		ctx, cancel := g.e.ctx()
		c, err := g.e.js.Consumer(ctx, g.stream, g.consumer)
		cancel()
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.pinGen != gen || g.removed || g.kq == nil {
			return
		}
		g.pinChecking = false
		switch {
		case err == nil && c.CachedInfo().NumAckPending <= len(g.kq.bySeq):
			if !g.graceUntil.IsZero() {
				g.e.log.Info("ordered group: what another node held is here; this node dispatches", "group", g.id)
			}
			g.graceUntil = time.Time{}
		case first:
			g.graceUntil = time.Now().Add(g.takeoverGrace())
			pending := -1
			if err == nil {
				pending = c.CachedInfo().NumAckPending
			}
			g.e.log.Info("ordered group: this node took the pin from another that may still hold messages; it dispatches after a grace, or once they are redelivered here",
				"group", g.id, "grace", g.takeoverGrace(), "out_in_jetstream", pending, "here", len(g.kq.bySeq))
		}
		g.armTickLocked()
		g.pumpAllLocked()
	})
}

// takeoverGrace is how long a node that took the pin from another waits before it hands
// out messages: what the other held is redelivered by then.
func (g *group) takeoverGrace() time.Duration { return g.ackWait + 2*keyTick }

// armTickLocked makes sure the group's tick runs. g.mu must be held.
func (g *group) armTickLocked() {
	if g.tick != nil || g.kq == nil || g.removed || g.e.closing.Load() {
		return
	}
	g.tick = time.AfterFunc(keyTick, g.onTick)
}

// onTick renews the pin, keeps what is parked from JetStream's redelivery, and ends the
// grace.
func (g *group) onTick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tick = nil
	if g.kq == nil || g.removed || g.e.closing.Load() {
		return
	}
	if g.pin != "" && len(g.members) > 0 && g.ksub != nil {
		// Renews the pin; it never brings a message (one byte is smaller than any), and ends
		// with a status on the member's inbox (request 0: no request of the member's).
		g.keepPin = g.pin
		req := fmt.Appendf(nil, `{"batch":1,"max_bytes":1,"expires":%d,"group":%q,"id":%q}`, int64(keyTick), pinGroup, g.pin)
		_ = g.e.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+g.stream+"."+g.consumer, g.kinbox+".0", req)
	}
	now := time.Now()
	for _, e := range g.kq.bySeq {
		if e.gone || e.out && e.timer == nil { // a member's: its deadline is shorter than AckWait, and touches renew it
			continue
		}
		if now.Sub(e.touched) > g.ackWait/4 {
			_ = g.e.nc.Publish(e.reply, []byte("+WPI"))
			e.touched = now
		}
	}
	if !g.graceUntil.IsZero() {
		if !now.Before(g.graceUntil) {
			g.graceUntil = time.Time{}
		} else {
			g.checkTakeoverLocked(false)
		}
	}
	g.pumpAllLocked()
	if len(g.members) > 0 || len(g.kq.bySeq) > 0 {
		g.tick = time.AfterFunc(keyTick, g.onTick)
	}
}

// lostPinLocked handles JetStream's word that the pin this node used is not the group's
// any more. g.mu must be held.
func (g *group) lostPinLocked() {
	if g.pin == "" {
		return
	}
	g.flushLocked("JetStream moved the pin (a pull request was refused: 423)")
	for _, m := range g.members {
		for _, h := range m.held {
			h.fenced = true
		}
	}
}

// pullRequest is the pull request for room messages, expiring after expires, of members of
// priority prio. g.mu must be held.
func (g *group) pullRequest(room int, expires time.Duration, prio uint8) []byte {
	if !g.ordered() { // a prioritized consumer needs the group, one without a policy ignores it (priority.go)
		return fmt.Appendf(nil, `{"batch":%d,"expires":%d,"group":%q,"priority":%d}`, room, int64(expires), pinGroup, pullPriority(prio))
	}
	if g.pin == "" {
		return fmt.Appendf(nil, `{"batch":1,"expires":%d,"group":%q}`, int64(min(expires, keyTick)), pinGroup)
	}
	return fmt.Appendf(nil, `{"batch":%d,"expires":%d,"group":%q,"id":%q}`, room, int64(expires), pinGroup, g.pin)
}
