package plugins

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// Chain is a loaded set of plugins, run in their configured order. It implements
// broker.Hooks; install it with Broker.SetHooks. A reload loads a new Chain, swaps it in and
// closes the old one.
type Chain struct {
	all       []*plugin
	publish   []*plugin
	ack       []*plugin
	redeliver []*plugin
}

var _ broker.Hooks = (*Chain)(nil)

func (c *Chain) add(p *plugin) {
	c.all = append(c.all, p)
	if p.has[hookPublish] {
		c.publish = append(c.publish, p)
	}
	if p.has[hookAck] {
		c.ack = append(c.ack, p)
	}
	if p.has[hookRedeliver] {
		c.redeliver = append(c.redeliver, p)
	}
}

// Close unloads every plugin, waiting until ctx is done for calls in progress to finish.
func (c *Chain) Close(ctx context.Context) error {
	var errs []error
	for _, p := range c.all {
		errs = append(errs, p.close(ctx))
	}
	return errors.Join(errs...)
}

// Names lists the plugins in chain order.
func (c *Chain) Names() []string {
	var names []string
	for _, p := range c.all {
		names = append(names, p.spec.Name)
	}
	return names
}

// PluginStats counts one plugin's calls.
type PluginStats struct {
	Name                     string
	Calls, Failures, Skipped uint64 // Skipped: not called because the circuit breaker was open
	BreakerOpen              bool
}

// Stats reports every plugin's counters, in chain order.
func (c *Chain) Stats() []PluginStats {
	var st []PluginStats
	for _, p := range c.all {
		st = append(st, PluginStats{Name: p.spec.Name, Calls: p.calls.Load(), Failures: p.failures.Load(),
			Skipped: p.skipped.Load(), BreakerOpen: p.openUntil.Load() != 0})
	}
	return st
}

func (p *plugin) matchesTopic(topic string) bool {
	for _, pat := range p.spec.Topics {
		if broker.MatchPattern(pat, topic) {
			return true
		}
	}
	return false
}

func (p *plugin) matchesGroup(group string) bool {
	return len(p.spec.Groups) == 0 || slices.Contains(p.spec.Groups, group)
}

// Verdict actions (docs/ABI.md).
const (
	actPass   = 0
	actDrop   = 1
	actReject = 2

	actRedeliver  = 0
	actDelay      = 1
	actDeadLetter = 2
	actForget     = 3
)

var errBreakerOpen = errors.New("circuit breaker open")

// call runs hook k with st unless the circuit breaker is open, checks the verdict with valid,
// and counts the outcome. It returns the verdict, or why there is none.
func (p *plugin) call(k hookKind, st *callState, valid func(action, arg uint32) bool) (uint64, error) {
	if p.breakerOpen() {
		return 0, errBreakerOpen
	}
	v, err := p.invoke(k, st)
	if err == nil && !valid(uint32(v), uint32(v>>32)) {
		err = malformedError{v}
	}
	if err != nil {
		p.failed(k, err)
		return 0, err
	}
	p.succeeded()
	return v, nil
}

func validPublish(action, arg uint32) bool {
	return action == actReject && arg <= 16 || action < actReject && arg == 0
}

func validAck(action, arg uint32) bool { return action == 0 && arg == 0 }

func validRedeliver(action, arg uint32) bool {
	return action == actDelay && arg > 0 && arg <= 1<<31-1 || action != actDelay && action <= actForget && arg == 0
}

type malformedError struct{ verdict uint64 }

func (e malformedError) Error() string {
	return fmt.Sprintf("malformed verdict 0x%x (action %d, argument %d)", e.verdict, uint32(e.verdict), uint32(e.verdict>>32))
}

// OnPublish runs the on_publish plugins whose topics match, each on the previous one's
// output. Implements broker.Hooks.
func (c *Chain) OnPublish(d *broker.Draft) (broker.PublishVerdict, error) {
	var out broker.PublishVerdict
	for _, p := range c.publish {
		if !p.matchesTopic(d.Topic) {
			continue
		}
		st := &callState{hook: hookPublish, topic: d.Topic, payload: d.Payload, headers: d.Headers}
		v, err := p.call(hookPublish, st, validPublish)
		if err != nil {
			switch p.spec.FailurePolicy {
			case FailClosed:
				return out, fmt.Errorf("%w: %q on %s: %v; the message was not published", broker.ErrHookFailed, p.spec.Name, d.Topic, err)
			case FailDeadLetter:
				h := maps.Clone(d.Headers)
				if h == nil {
					h = map[string]string{}
				}
				h[broker.HeaderDeadLetterTopic] = d.Topic
				h[broker.HeaderDeadLetterReason] = "plugin " + p.spec.Name + " failed: " + err.Error()
				d.Topic, d.Headers = "dlq.plugin."+p.spec.Name, h
				return out, nil
			}
			continue // fail open: unchanged
		}
		out.Emit = append(out.Emit, st.emits...)
		switch uint32(v) {
		case actDrop:
			out.Drop, out.Reason = true, st.why
			p.log.Trace("dropped", "topic", d.Topic, "reason", st.why)
			return out, nil
		case actReject:
			why := st.why
			if why == "" {
				why = "no reason given"
			}
			code := int(v >> 32)
			if code == 0 {
				code = 3 // INVALID_ARGUMENT
			}
			return out, &broker.RejectError{Code: code, Plugin: p.spec.Name, Reason: why}
		}
		if st.newTopic != nil {
			d.Topic = *st.newTopic
		}
		if st.payloadSet {
			d.Payload = st.newPayload
		}
		if len(st.setH) > 0 || len(st.delH) > 0 {
			d.Headers = applyHeaders(d.Headers, st.setH, st.delH)
		}
	}
	return out, nil
}

func applyHeaders(h, set map[string]string, del []string) map[string]string {
	out := make(map[string]string, len(h)+len(set))
	maps.Copy(out, h)
	for _, k := range del {
		delete(out, k)
	}
	maps.Copy(out, set)
	return out
}

// WantsAck implements broker.Hooks.
func (c *Chain) WantsAck(group string) bool {
	for _, p := range c.ack {
		if p.matchesGroup(group) {
			return true
		}
	}
	return false
}

// WantsRedeliver implements broker.Hooks.
func (c *Chain) WantsRedeliver(group string) bool {
	for _, p := range c.redeliver {
		if p.matchesGroup(group) {
			return true
		}
	}
	return false
}

// OnAck runs the on_ack plugins of the event's group and returns what they emitted.
func (c *Chain) OnAck(e *broker.AckEvent) []broker.Draft {
	var emits []broker.Draft
	for _, p := range c.ack {
		if !p.matchesGroup(e.Group) {
			continue
		}
		st := &callState{hook: hookAck, topic: e.Msg.Topic, payload: e.Msg.Payload, headers: e.Msg.Headers, id: e.SystemID,
			sub: e.SubscriptionID, group: e.Group, attempt: e.Attempt, inFlight: int64(e.InFlight)}
		if _, err := p.call(hookAck, st, validAck); err != nil {
			continue // nothing to undo: the ack was applied
		}
		emits = append(emits, st.emits...)
	}
	return emits
}

// OnRedeliver runs the on_redeliver plugins of the event's group in order; header changes
// accumulate, and the first verdict other than REDELIVER decides.
func (c *Chain) OnRedeliver(e *broker.RedeliverEvent) broker.RedeliverVerdict {
	var out broker.RedeliverVerdict
	headers := e.Msg.Headers
	for _, p := range c.redeliver {
		if !p.matchesGroup(e.Group) {
			continue
		}
		st := &callState{hook: hookRedeliver, topic: e.Msg.Topic, payload: e.Msg.Payload, headers: headers, id: e.SystemID,
			sub: e.SubscriptionID, group: e.Group, attempt: e.Attempt, reason: e.Reason}
		v, err := p.call(hookRedeliver, st, validRedeliver)
		if err != nil {
			switch p.spec.FailurePolicy {
			case FailClosed:
				return out // treated as a nack: the broker's default
			case FailDeadLetter:
				out.Action, out.Reason = broker.RedeliverDeadLetter, "plugin "+p.spec.Name+" failed: "+err.Error()
				return out
			}
			continue
		}
		out.Emit = append(out.Emit, st.emits...)
		if len(st.setH) > 0 || len(st.delH) > 0 {
			headers = applyHeaders(headers, st.setH, st.delH)
			if out.SetHeaders == nil {
				out.SetHeaders = map[string]string{}
			}
			for _, k := range st.delH {
				delete(out.SetHeaders, k)
				out.DelHeaders = append(out.DelHeaders, k)
			}
			maps.Copy(out.SetHeaders, st.setH)
		}
		switch uint32(v) {
		case actDelay:
			out.Action, out.Delay = broker.RedeliverDelay, time.Duration(v>>32)*time.Millisecond
			return out
		case actDeadLetter:
			out.Action, out.Reason = broker.RedeliverDeadLetter, st.why
			if out.Reason == "" {
				out.Reason = "dead-lettered by plugin " + p.spec.Name + " after attempt " + strconv.Itoa(int(e.Attempt))
			}
			return out
		case actForget:
			out.Action, out.Reason = broker.RedeliverDrop, st.why
			return out
		}
	}
	return out
}
