package jetstream

// A group's members: pulling messages for them, holding their deliveries, acks, nacks,
// touches, ack deadlines, leaving, and redeliveries and dead letters.

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
)

// pumpLocked asks JetStream for as many messages as m has room for, unless a request of
// m's is still open. g.mu must be held.
func (g *group) pumpLocked(m *member) {
	// A paused group asks for nothing: the breaker pauses it here before JetStream's pause
	// lands (deadLetter), and a request made meanwhile would bring messages only to hand back.
	if m.left || g.draining || g.removed || g.paused || m.reqID != 0 || g.kq != nil { // an ordered group pulls for its members (keyed.go)
		return
	}
	room := m.maxInFlight - len(m.held)
	if room <= 0 {
		return
	}
	m.reqSeq++
	rid := m.reqSeq
	m.reqID, m.remaining = rid, room
	expires := pullExpires
	if after := g.e.opts.GroupExpireAfter; after > 0 && !g.declared {
		// A waiting request keeps the consumer active: one left by a member that has gone
		// must lapse well within the group's expiry.
		expires = min(expires, after/2)
	}
	req := g.pullRequest(room, expires, m.priority)
	subj := "$JS.API.CONSUMER.MSG.NEXT." + g.stream + "." + g.consumer
	if err := g.e.nc.PublishRequest(subj, m.inbox+"."+strconv.FormatUint(rid, 10), req); err != nil {
		g.e.log.Warn("pull request failed", "group", g.id, "error", err)
	}
	// A request JetStream lost (a leader change, a restart) ends here at the latest.
	time.AfterFunc(expires+2*time.Second, func() {
		g.mu.Lock()
		closeInbox := false
		if m.reqID == rid {
			m.reqID = 0
			g.pumpLocked(m)
			closeInbox = m.inboxDoneLocked()
		}
		g.mu.Unlock()
		if closeInbox {
			m.closeInbox()
		}
	})
}

// inboxDoneLocked says whether the inbox of m, a member that has left, may go now: when no
// pull request of m's is open. Until then JetStream may still send it messages, which onMsg
// passes on: a clustered consumer replicates a delivery before it sends it, so a message
// sent to an inbox that had just gone would be lost to the group until the consumer's
// AckWait (issue 25, finding 1). One node alone replicates nothing, and its inbox goes at
// once: what the server sent before is drained. It returns true once; the caller then
// calls closeInbox without g.mu. g.mu must be held.
func (m *member) inboxDoneLocked() bool {
	if !m.left || m.reqID != 0 && !m.g.e.solo || m.inboxClosed {
		return false
	}
	m.inboxClosed = true
	return true
}

// closeInbox unsubscribes m's inbox, after what the server has already sent it.
func (m *member) closeInbox() {
	if m.sub == nil { // an ordered group's: it pulls with the group's inbox
		return
	}
	if err := m.sub.Drain(); err != nil {
		_ = m.sub.Unsubscribe()
	}
}

// takerLocked returns the member on this node to take the next message: of those with room
// for one more beyond what their open pull requests may still bring, one of the highest
// priority, the first from g.turn on (round-robin among them: dispatchLocked moves g.turn
// past the member it handed to); nil if none has room. g.mu must be held.
func (g *group) takerLocked() *member {
	var best *member
	n := len(g.members)
	for j := range n {
		t := g.members[(g.turn+j)%n]
		pending := 0
		if t.reqID != 0 {
			pending = t.remaining
		}
		if t.maxInFlight-len(t.held)-pending > 0 && (best == nil || t.priority > best.priority) {
			best = t
		}
	}
	return best
}

func (g *group) pumpAllLocked() {
	g.dispatchLocked()
	if g.kq != nil {
		g.pullKeyedLocked()
		return
	}
	for _, m := range g.members {
		g.pumpLocked(m)
	}
}

// pullStatus returns the status JetStream ended a pull request with, if msg is one (an empty
// message with a Status header, sent to the request's own reply subject, which ends in its
// id), and the request's id; code is "" for a message.
func pullStatus(msg *nats.Msg) (rid uint64, code string) {
	if len(msg.Data) > 0 {
		return 0, ""
	}
	if code = msg.Header.Get("Status"); code != "" {
		rid, _ = strconv.ParseUint(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:], 10, 64)
	}
	return rid, code
}

// consumerDeleted reports whether a pull status of code says the consumer was deleted.
func consumerDeleted(msg *nats.Msg, code string) bool {
	return code == "409" && strings.Contains(strings.ToLower(msg.Header.Get("Description")), "deleted")
}

// onMsg handles what JetStream sends to a member's inbox: a message, or the status that
// ends a pull request.
func (m *member) onMsg(msg *nats.Msg) {
	g, e := m.g, m.g.e
	if rid, code := pullStatus(msg); code != "" {
		if code == "100" {
			return
		}
		g.mu.Lock()
		if m.reqID == rid {
			m.reqID = 0
		}
		deleted := consumerDeleted(msg, code)
		if !deleted {
			g.pumpLocked(m)
		}
		closeInbox := m.inboxDoneLocked()
		g.mu.Unlock()
		if closeInbox {
			m.closeInbox()
		}
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
	if m.reqID != 0 {
		if m.remaining--; m.remaining <= 0 {
			m.reqID = 0
		}
	}
	// A member that has left: its inbox goes once this was its request's last message.
	if owner := m; m.inboxDoneLocked() {
		defer owner.closeInbox() // every path below lets go of g.mu first
	}
	if skips(msg, g) { // stored while the group was full: it refused it
		if info.delivered == 1 && g.skipped > 0 {
			g.skipped--
		}
		g.pumpLocked(m)
		g.mu.Unlock()
		_ = e.nc.Publish(msg.Reply, []byte("+TERM"))
		return
	}
	if g.kq != nil { // ordering came on meanwhile: the member's last request
		g.keyedArrivalLocked(msg, info)
		return
	}
	if m.left && !g.draining && !g.removed {
		// The open pull request of a member that has left (leave keeps its inbox until the
		// request ends): a member on this node with room takes the message as it is, the
		// way JetStream would have sent it.
		if t := g.takerLocked(); t != nil {
			m = t
		}
	}
	if m.left || g.draining || g.removed || g.paused {
		if !g.draining && !g.removed {
			// Otherwise the message goes back and waits here for JetStream to redeliver it
			// at once, as what a leaving member held does (leave). Counted as waiting, not
			// queued: JetStream no longer counts it as pending, and a refresh of the count
			// would otherwise lose it and let the group take one message past its bound.
			if info.delivered == 1 && g.queued > 0 {
				g.queued--
			}
			if g.waiting[info.sseq] == nil {
				g.waiting[info.sseq] = g.decode(msg, info.sseq)
			}
		}
		if g.paused && !g.draining && !g.removed {
			// Sent before JetStream's pause landed, to a pull request made before this node
			// paused the group: no member saw it, so the delivery JetStream counted is no
			// attempt (against max_deliveries) when it comes again.
			g.noteUnseenLocked(info.sseq)
		}
		g.mu.Unlock()
		_ = e.nc.Publish(msg.Reply, []byte("-NAK"))
		return
	}
	if info.delivered == 1 && g.queued > 0 {
		g.queued--
	}
	bm := g.decode(msg, info.sseq)
	unseen := min(g.unseen[info.sseq], info.delivered-1)
	delete(g.unseen, info.sseq)
	h := &held{msg: bm, reply: msg.Reply, info: info, attempt: g.markLocked(info.sseq, info.delivered) - unseen, sentAt: time.Now()}
	if expired(g.limits, bm, h.sentAt) { // past its ttl or max_age: never handed out (expiry.go)
		h.attempt--
		g.mu.Unlock()
		g.settle([]takeItem{{h: h, reason: deadletter.ReasonExpired}})
		return
	}
	if g.maxDeliveries > 0 && int(info.delivered-unseen) > g.maxDeliveries {
		// JetStream redelivered it by itself (the node that held it went away) past
		// max_deliveries: it is dead.
		h.attempt--
		g.mu.Unlock()
		g.settle([]takeItem{{h: h, reason: deadletter.ReasonAckDeadline}})
		return
	}
	g.handLocked(m, h)
	g.mu.Unlock()
}

// handLocked gives h to member m. g.mu must be held.
func (g *group) handLocked(m *member, h *held) {
	bm := h.msg
	m.held[h.info.sseq] = h
	delete(g.waiting, h.info.sseq)
	delete(g.delayed, h.info.sseq)
	g.delivered++
	if h.attempt > 1 {
		g.redelivered++
	} else {
		g.deliveryLatency.Observe(time.Duration(h.sentAt.UnixNano() - bm.PublishedAt))
	}
	h.due = h.sentAt.Add(m.ackDeadline)
	m.armLocked(h.due)
	st := m.s.st
	st.mu.Lock()
	st.pushLocked(broker.Delivery{Msg: bm, Sub: m.s, Attempt: h.attempt})
	st.mu.Unlock()
}

// findLocked returns the delivery seq held on this node and its member: with only set,
// among pref's alone; otherwise pref's first, then every member's.
func (g *group) findLocked(pref *member, only bool, seq uint64) (*held, *member) {
	return grouping.FindHeld(pref, g.members, only, heldBy, seq)
}

// eachHeld calls f, under g.mu, on each of seqs held on this node, found as findLocked finds
// it, and returns how many were not.
func (g *group) eachHeld(pref *member, only bool, seqs []uint64, f func(seq uint64, h *held, m *member)) (unknown int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return grouping.EachHeld(pref, g.members, only, heldBy, seqs, f)
}

func heldBy(m *member) map[uint64]*held { return m.held }

// holds says whether a member of this node holds seq, or this node took it back and waits
// for JetStream to redeliver it.
func (g *group) holds(seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, _ := g.findLocked(nil, false, seq)
	return h != nil || g.waiting[seq] != nil || g.kq != nil && g.kq.bySeq[seq] != nil
}

// ack settles seqs and returns how many were unknown. In a cluster, an id held by no member
// of this node is passed to JetStream, which settles it if another node's member holds it
// (and ignores it otherwise): it is not counted as unknown.
func (g *group) ack(pref *member, seqs []uint64) (unknown int) {
	if len(seqs) == 0 {
		return 0
	}
	hooks := g.e.currentHooks()
	var events []broker.AckEvent
	g.mu.Lock()
	if hooks != nil && !hooks.WantsAck(g.name) {
		hooks = nil
	}
	now := time.Now()
	for _, seq := range seqs {
		if h, m := g.findLocked(pref, false, seq); h != nil {
			delete(m.held, seq)
			g.acked++
			g.ackLatency.Observe(now.Sub(h.sentAt))
			g.releaseLocked(msgCost(h.msg), false)
			_ = g.e.nc.Publish(h.reply, []byte("+ACK"))
			g.releaseKeyLocked(h.e)
			if hooks != nil {
				events = append(events, broker.AckEvent{Msg: h.msg, SystemID: h.msg.SystemID, SubscriptionID: g.id, Group: g.name, Attempt: h.attempt, InFlight: now.Sub(h.sentAt)})
			}
		} else if msg := g.waiting[seq]; msg != nil {
			delete(g.waiting, seq)
			delete(g.delayed, seq)
			delete(g.unseen, seq)
			g.acked++
			g.releaseLocked(msgCost(msg), false)
			_ = g.e.nc.Publish(ackSubject(g.stream, g.consumer, seq, 0), []byte("+ACK"))
			if hooks != nil {
				events = append(events, broker.AckEvent{Msg: msg, SystemID: msg.SystemID, SubscriptionID: g.id, Group: g.name})
			}
		} else if e := g.kqEntry(seq); e != nil { // an ordered group's, taken back and waiting here
			g.acked++
			g.releaseLocked(msgCost(e.msg), false)
			_ = g.e.nc.Publish(e.reply, []byte("+ACK"))
			g.releaseKeyLocked(e)
			if hooks != nil {
				events = append(events, broker.AckEvent{Msg: e.msg, SystemID: e.msg.SystemID, SubscriptionID: g.id, Group: g.name})
			}
		} else if !g.e.solo {
			_ = g.e.nc.Publish(ackSubject(g.stream, g.consumer, seq, 0), []byte("+ACK"))
		} else {
			unknown++
		}
	}
	g.pumpAllLocked()
	g.mu.Unlock()
	for i := range events {
		g.e.emit(hooks.OnAck(&events[i]))
	}
	return unknown
}

// atOnce is the delay of a delivery whose member left: it goes back to JetStream for the
// other members at once, without the redelivery back-off (it did not fail).
const atOnce time.Duration = -1

// takeItem is a delivery taken back from its member, to be redelivered or dead-lettered.
type takeItem struct {
	h      *held
	reason string
	delay  time.Duration
}

// nack takes back seqs for redelivery after delay; with owner set, only its own.
func (g *group) nack(owner *member, seqs []uint64, delay time.Duration, reason string) (unknown int) {
	if reason == "" {
		reason = deadletter.ReasonNack
	}
	var items []takeItem
	unknown = g.eachHeld(owner, owner != nil, seqs, func(seq uint64, h *held, m *member) {
		delete(m.held, seq)
		g.nacked++
		items = append(items, takeItem{h: h, reason: reason, delay: delay})
	})
	g.settle(items)
	return unknown
}

// touch restarts the deadline of owner's deliveries, here and in JetStream.
func (g *group) touch(owner *member, seqs []uint64) (unknown int) {
	return g.eachHeld(owner, true, seqs, func(_ uint64, h *held, m *member) {
		if h.fenced { // its node lost the pin: it expires within the new holder's grace
			return
		}
		h.due = time.Now().Add(m.ackDeadline) // the timer, if earlier, finds it later
		_ = g.e.nc.Publish(h.reply, []byte("+WPI"))
	})
}

// sweepSlack is how late the deadline timer may fire, so that one firing takes back the
// deliveries of a burst together.
const sweepSlack = time.Millisecond

// armLocked makes m's deadline timer fire by due (and sweepSlack). g.mu must be held.
func (m *member) armLocked(due time.Time) {
	if !m.timerAt.IsZero() && !due.Before(m.timerAt) {
		return // it fires earlier, and sweeps again
	}
	m.timerAt = due
	d := time.Until(due) + sweepSlack
	if m.timer == nil {
		m.timer = time.AfterFunc(d, func() { m.g.sweep(m) })
	} else {
		m.timer.Reset(d)
	}
}

// sweep takes back what m holds past its ack deadline, and arms the timer for the next.
func (g *group) sweep(m *member) {
	g.mu.Lock()
	m.timerAt = time.Time{}
	if m.left {
		g.mu.Unlock()
		return
	}
	now := time.Now()
	var items []takeItem
	var next time.Time
	for seq, h := range m.held {
		if !h.due.After(now) {
			delete(m.held, seq)
			g.timedOut++
			items = append(items, takeItem{h: h, reason: deadletter.ReasonAckDeadline})
		} else if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	if !next.IsZero() {
		m.armLocked(next)
	}
	g.mu.Unlock()
	g.settle(items)
}

// stopTimerLocked stops m's deadline timer, for good (m left). g.mu must be held.
func (m *member) stopTimerLocked() {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timerAt = time.Time{}
}

// leave removes m: what it held goes back to JetStream at once, oldest first, for the other
// members. Its inbox stays until its open pull request ends (inboxDoneLocked): what
// JetStream still sends it goes to a member on this node with room, or back to JetStream.
func (g *group) leave(m *member) {
	g.mu.Lock()
	if grouping.Leave(&g.members, m) < 0 {
		g.mu.Unlock()
		return
	}
	m.left = true
	m.stopTimerLocked()
	st := m.s.st
	st.mu.Lock()
	st.removeLocked(m.s, nil)
	st.mu.Unlock()
	items := make([]takeItem, 0, len(m.held))
	for seq, h := range m.held {
		delete(m.held, seq)
		g.leftBehind++
		// Waiting from now on, as the member is gone from the group (settle decides its fate).
		if h.e == nil {
			g.waiting[seq] = h.msg
		}
		items = append(items, takeItem{h: h, reason: deadletter.ReasonMemberLeft, delay: atOnce})
	}
	closeInbox := m.inboxDoneLocked()
	g.mu.Unlock()
	if closeInbox {
		m.closeInbox()
	}
	g.settle(items)
}

// settle applies the hooks' verdicts (or the defaults) to deliveries taken back from their
// members: a nak (with its delay) for another attempt, past max_deliveries a dead letter,
// or a drop. Oldest first, so that JetStream redelivers them in publish order. No lock may
// be held.
func (g *group) settle(items []takeItem) {
	if len(items) == 0 {
		g.mu.Lock()
		g.pumpAllLocked()
		g.mu.Unlock()
		return
	}
	slices.SortFunc(items, func(a, b takeItem) int { return cmp.Compare(a.h.info.sseq, b.h.info.sseq) })
	hooks := g.e.currentHooks()
	g.mu.Lock()
	name, limits, maxDeliveries := g.name, g.limits, g.maxDeliveries // learn changes them (another node's change)
	g.mu.Unlock()
	if hooks != nil && !hooks.WantsRedeliver(name) {
		hooks = nil
	}
	var emits []broker.Draft
	now := time.Now()
	for _, it := range items {
		h := it.h
		action, delay, reason := broker.RedeliverDefault, it.delay, it.reason
		code := "" // a dead letter's: which path sent it (deadletter.Code*)
		if expired(limits, h.msg, now) {
			// Past its ttl or max_age: let go of without the hooks, as the memory engine does.
			action, reason, code = broker.RedeliverDeadLetter, deadletter.ReasonExpired, deadletter.CodeExpired
			if limits.DropExpired() {
				action = broker.RedeliverDrop
			}
			g.mu.Lock()
			g.expiredMsgs++
			g.mu.Unlock()
		} else if hooks != nil {
			v := hooks.OnRedeliver(&broker.RedeliverEvent{Msg: h.msg, SystemID: h.msg.SystemID, SubscriptionID: g.id, Group: name,
				Attempt: h.attempt, Reason: it.reason})
			emits = append(emits, v.Emit...)
			action = v.Action
			if action == broker.RedeliverDelay {
				delay = v.Delay
			}
			if v.Reason != "" {
				reason = v.Reason
			}
			if action == broker.RedeliverDeadLetter {
				code = grouping.VerdictCode(&v)
			}
		}
		if action == broker.RedeliverDefault && maxDeliveries > 0 && int(h.attempt) >= maxDeliveries {
			action, code = broker.RedeliverDeadLetter, deadletter.CodeMaxDeliveries
		}
		if delay != atOnce || action == broker.RedeliverDelay { // the redelivery back-off
			delay = limits.RedeliveryDelay(delay, h.attempt, h.info.sseq)
		}
		if at := expiresAt(limits, h.msg); at != 0 && delay > 0 {
			// A delay past its expiry ends there: JetStream redelivers it then, and it is let
			// go of as it arrives (expiry.go).
			delay = min(delay, time.Duration(at-now.UnixNano())+time.Millisecond)
		}
		if h.e != nil && action != broker.RedeliverDeadLetter && action != broker.RedeliverDrop {
			// An ordered group's: another attempt here, before its key's next (keyed.go),
			// unless its node lost the pin.
			g.mu.Lock()
			if !h.fenced && g.kq != nil && !h.e.gone {
				h.e.attempt = h.attempt
				g.requeueLocked(h.e, max(delay, 0))
				g.mu.Unlock()
				continue
			}
			g.releaseKeyLocked(h.e)
			g.mu.Unlock()
			_ = g.e.nc.Publish(h.reply, []byte("-NAK"))
			continue
		}
		switch action {
		case broker.RedeliverDeadLetter:
			g.mu.Lock()
			delete(g.waiting, h.info.sseq)
			g.mu.Unlock()
			g.deadLetter(h, code, reason)
		case broker.RedeliverDrop:
			g.mu.Lock()
			delete(g.waiting, h.info.sseq)
			g.dropped++
			g.releaseLocked(msgCost(h.msg), false)
			g.releaseKeyLocked(h.e)
			g.mu.Unlock()
			_ = g.e.nc.Publish(h.reply, []byte("+TERM"))
		default:
			g.mu.Lock()
			g.waiting[h.info.sseq] = h.msg
			if delay > 0 {
				g.delayed[h.info.sseq] = time.Now().Add(delay)
				_ = g.e.nc.Publish(h.reply, fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(delay)))
			} else {
				_ = g.e.nc.Publish(h.reply, []byte("-NAK"))
			}
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	g.pumpAllLocked()
	g.mu.Unlock()
	g.e.emit(emits)
}

// deadLetter publishes h's message to the group's dead-letter topic with the
// tb-dead-letter-* headers (code, a deadletter.Code*, and reason among them), then ends it in
// JetStream (+TERM).
func (g *group) deadLetter(h *held, code, reason string) {
	g.mu.Lock()
	g.deadLettered++
	name, dlq := g.name, g.dlq
	if g.breaker.Note(time.Now().UnixNano(), g.limits) && !g.paused {
		// Paused here at once: this node asks JetStream for nothing more and hands back,
		// unseen, what a request made before brings (onMsg). The other nodes of a cluster
		// deliver until JetStream's pause, which PauseGroup sets, reaches their requests.
		g.paused = true
		limits := g.limits
		g.e.wg.Go(func() {
			g.e.log.Warn("dead-letter breaker tripped: consumer group paused; find why its messages fail, then resume it (tinybroker groups resume)",
				"subscription", g.id, "dead_letters", limits.DeadLetterBreaker, "within", limits.DeadLetterBreakerWindow)
			if err := g.e.PauseGroup(g.id, true); err != nil {
				g.e.log.Warn("dead-letter breaker: could not pause the consumer group", "subscription", g.id, "error", err)
			}
		})
	}
	g.mu.Unlock()
	hd := grouping.DeadLetterHeaders(h.msg, code, reason, g.id, name, h.attempt)
	if _, err := g.e.route(&publishing.Msg{Topic: dlq, Payload: h.msg.Payload, Headers: broker.MakeHeaders(hd), Key: h.msg.Key}); err != nil {
		g.e.log.Warn("dead letter refused; it stays in the group for another attempt", "topic", dlq, "error", err)
		if h.e != nil {
			g.mu.Lock()
			if !h.fenced && g.kq != nil && !h.e.gone {
				g.requeueLocked(h.e, time.Second)
				g.mu.Unlock()
				return
			}
			g.releaseKeyLocked(h.e)
			g.mu.Unlock()
		}
		_ = g.e.nc.Publish(h.reply, []byte(`-NAK {"delay":1000000000}`))
		return
	}
	g.mu.Lock()
	g.releaseLocked(msgCost(h.msg), false)
	g.releaseKeyLocked(h.e)
	g.mu.Unlock()
	_ = g.e.nc.Publish(h.reply, []byte("+TERM"))
	g.e.keepDeadLetter(g, h.msg, hd)
}

func (g *group) setDraining() {
	g.mu.Lock()
	g.draining = true
	g.dispatchLocked() // gives back what an ordered group parked here
	g.mu.Unlock()
}

func (g *group) inFlight() (n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.members {
		n += len(m.held)
	}
	return n
}

// evict ends a member's subscription for the engine: an Ended event on its stream, and the
// stream ends with err if it carried nothing else.
func (s *Subscription) evict(err error) {
	st := s.st
	st.mu.Lock()
	left := st.subs.Remove(s.id, s)
	s.closed = true
	st.removeLocked(s, nil)
	if !st.fin.Ended() {
		st.pushLocked(broker.Delivery{Sub: s, Ended: err})
	}
	st.mu.Unlock()
	if left == 0 {
		st.end(err)
	}
}
