package plugins

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// Chain is a loaded set of plugins, run in their configured order. It implements
// broker.Hooks; install it with Broker.SetHooks. A reload loads a new Chain, swaps it in and
// closes the old one.
type Chain struct {
	all       []*plugin
	publish   []*plugin
	ack       []*plugin
	redeliver []*plugin
	tick      []*plugin
	ticking   ticking    // the on_tick loops (tick.go)
	logs      *logTopics // the lines for log topics; nil: no plugin has one (logtopic.go)
}

var _ broker.Hooks = (*Chain)(nil)

func (c *Chain) add(p *plugin) {
	c.all = append(c.all, p)
	if p.has[abi.HookPublish] {
		c.publish = append(c.publish, p)
	}
	if p.has[abi.HookAck] {
		c.ack = append(c.ack, p)
	}
	if p.has[abi.HookRedeliver] {
		c.redeliver = append(c.redeliver, p)
	}
	if p.has[abi.HookTick] {
		c.tick = append(c.tick, p)
	}
	if p.spec.LogTopic != "" {
		if c.logs == nil {
			c.logs = &logTopics{lines: make(chan broker.Draft, logQueueLen)}
		}
		p.logs = c.logs
		if p.cand != nil {
			p.cand.p.logs = c.logs
		}
	}
}

// Close unloads every plugin, waiting until ctx is done for calls in progress to finish.
func (c *Chain) Close(ctx context.Context) error {
	c.ticking.stop() // no tick starts from now on, and no log line is published
	if c.logs != nil {
		c.logs.open.Store(false)
	}
	c.ticking.waitUntil(ctx)
	var errs []error
	for _, p := range c.all {
		errs = append(errs, p.close(ctx)) // stops a tick still running past ctx, with the other calls
	}
	c.ticking.wait()
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
	HostCalls                uint64 // host functions called in those calls, if HostOptions.CountHostCalls
	Batched                  uint64 // of the on_publish calls, those made in batches that did not fail as a whole (docs/ABI.md, "Batches")
	// TicksSkipped counts the ticks not run because the one before was still running at
	// their time (tick.go); ticks skipped while the breaker was open are in Skipped.
	TicksSkipped uint64
	// LogDropped counts the lines the plugin (and its candidate) logged that were not
	// published to its log_topic: over its log_topic_rate, or with the queue full
	// (logtopic.go).
	LogDropped  uint64
	LogTopic    string // Spec.LogTopic: "" if none
	BreakerOpen bool
	Hash        string          // the module's content hash (Spec.Hash)
	Candidate   *CandidateStats // a second version run beside it, if any (candidate.go)
}

// Stats reports every plugin's counters, in chain order.
func (c *Chain) Stats() []PluginStats {
	var st []PluginStats
	for _, p := range c.all {
		p.collect()
		var calls uint64
		for k := range p.metrics.hooks {
			calls += p.metrics.hooks[k].calls.Load()
		}
		ps := PluginStats{Name: p.spec.Name, Calls: calls, Failures: p.failures.Load(), Batched: p.batched.Load(),
			Skipped: p.skipped.Load(), HostCalls: p.hostCalls.Load(), BreakerOpen: p.openUntil.Load() != 0, Hash: p.spec.Hash,
			TicksSkipped: p.ticksSkipped.Load(), LogDropped: p.logDropped.Load(), LogTopic: p.spec.LogTopic}
		if p.cand != nil {
			ps.Candidate = p.cand.stats()
			ps.LogDropped += p.cand.p.logDropped.Load()
		}
		st = append(st, ps)
	}
	return st
}

// A topicPattern is one of a plugin's topics, classified at load so that the common shapes
// (">", "orders.>", "orders.created") are matched without splitting the topic into tokens.
type topicPattern struct {
	kind    uint8
	pattern string // kindPrefix: the pattern without its final ">" (ends with ".")
}

const (
	kindAny     uint8 = iota // ">"
	kindExact                // no wildcard
	kindPrefix               // "a.b.>": a topic that starts with "a.b." (the rest is a valid topic's: not empty)
	kindGeneral              // "*" somewhere: broker.MatchPattern
)

func compilePatterns(patterns []string) []topicPattern {
	out := make([]topicPattern, 0, len(patterns))
	for _, pat := range patterns {
		tp := topicPattern{kind: kindGeneral, pattern: pat}
		head, hasTail := strings.CutSuffix(pat, ">")
		switch {
		case pat == ">":
			tp.kind = kindAny
		case strings.ContainsAny(head, "*>"):
		case !hasTail:
			tp.kind = kindExact
		case strings.HasSuffix(head, "."):
			tp.kind, tp.pattern = kindPrefix, head
		}
		out = append(out, tp)
	}
	return out
}

// matchesTopic reports whether the valid topic matches one of p's topics: inlined for a
// plugin on every topic (">", the default), which it answers with one load.
func (p *plugin) matchesTopic(topic string) bool {
	return p.anyTopic || p.matchesSome(topic)
}

func (p *plugin) matchesSome(topic string) bool {
	for _, tp := range p.topics {
		switch tp.kind {
		case kindAny:
			return true
		case kindExact:
			if topic == tp.pattern {
				return true
			}
		case kindPrefix:
			if len(topic) > len(tp.pattern) && strings.HasPrefix(topic, tp.pattern) {
				return true
			}
		default:
			if broker.Pattern(tp.pattern).Match(topic) {
				return true
			}
		}
	}
	return false
}

func (p *plugin) matchesGroup(group string) bool {
	return len(p.spec.Groups) == 0 || slices.Contains(p.spec.Groups, group)
}

var errBreakerOpen = errors.New("circuit breaker open")

// run calls hook k on inst, whose call state the caller has set up, checks the verdict, and
// counts the outcome. It returns the verdict, or why there is none, and whether inst is still
// usable: after a trap it is discarded; after a malformed answer (the call itself went well)
// its call state is reset and it stays the caller's. A call that tried to grow the memory
// past the plugin's limit failed, even if the plugin went on (memory.grow returned -1 to it).
//
// Every plugin call goes through here, so the common path (no time limit, the call not
// sampled, the message fitting the inbox if there is one) is written out in this one function:
// each layer of calls it went through cost the broker some 20–30 instructions a plugin call
// (docs/benchmarks/plugin-passes.md, "Plugin calls, fifth pass" and "seventh pass").
func (p *plugin) run(inst *instance, k abi.Hook) (v uint64, alive bool, err error) {
	if err = p.host.cores.acquire(p); err != nil {
		p.failed(k, err)
		return 0, true, err
	}
	inst.phase.Add(1)   // the watchdog's: a call runs
	inst.uncounted[k]++ // added to the plugin's counters later (plugin.flush)
	inst.sampled++
	if inst.sampled%latencySample == 1 {
		v, err = p.invokeSampled(inst, k)
	} else { // callHook and writeInbox, written out
		if p.hasInbox {
			r, size := inst.inbox()
			ok := r != nil
			if ok {
				_, ok = inst.writeRecord(r, size, inst.st)
			}
			if !ok {
				err = inst.fillInbox(&inst.ctx)
			}
		}
		if err == nil {
			inst.stack[0] = 0
			err = inst.fns[k].CallWithStack(&inst.ctx, inst.stack)
		}
		v, err = p.called(inst, err)
	}
	inst.phase.Add(1)
	p.host.cores.release()
	alive = err == nil
	if err == nil {
		// Tested by hook rather than with a function value, so that the check is inlined.
		if k == abi.HookPublish && !validPublish(uint32(v), uint32(v>>32)) || k != abi.HookPublish && !validEvent(k, v) {
			err = malformedError{v}
		} else if p.hasInbox && inst.wroteSome() {
			err = inst.takeWrites()
		}
		if err != nil {
			inst.st.reset()
		}
	}
	if err != nil {
		p.failed(k, err)
		return 0, alive, err
	}
	p.succeeded()
	return v, true, nil
}

// call runs hook in.hook of p on in, with an instance from the pool, unless the circuit
// breaker is open or no instance can be had (counted as a failure). It returns the instance,
// whose call state holds the call's outcome, to give to done once that is taken; or, with no
// verdict, why there is none (after a failure of run the instance is gone).
func (p *plugin) call(in *callInput) (*instance, uint64, error) { return p.callWith(in, nil) }

// callWith is call; a shadow candidate's call reads, for the keys in before, the values given
// there rather than the store's (nil: absent).
func (p *plugin) callWith(in *callInput, before map[string]*string) (*instance, uint64, error) {
	if p.breakerOpen() {
		return nil, 0, errBreakerOpen
	}
	inst, err := p.pool.get(p)
	if err != nil {
		p.failed(in.hook, err)
		return nil, 0, err
	}
	inst.st.callInput = *in
	if inst.kvLog != nil {
		inst.resetKV()
		for k, v := range before {
			inst.overlay.put([]byte(k), v)
		}
	}
	v, alive, err := p.run(inst, in.hook)
	if err != nil {
		if alive {
			p.pool.put(inst)
		}
		return nil, 0, err
	}
	return inst, v, nil
}

// done resets the call state of inst, whose outcome the caller has taken, and returns it to
// the pool.
func (p *plugin) done(inst *instance) {
	inst.st.reset()
	p.pool.put(inst)
}

// validEvent reports whether v is a verdict hook k, an event's (not on_publish), may return.
func validEvent(k abi.Hook, v uint64) bool {
	switch k {
	case abi.HookAck:
		return validAck(uint32(v), uint32(v>>32))
	case abi.HookRedeliver:
		return validRedeliver(uint32(v), uint32(v>>32))
	case abi.HookTick:
		return v == 0
	}
	return false
}

// validPublish accepts PASS and DROP, and REJECT with a gRPC status code (0 stands for
// INVALID_ARGUMENT). The host links gRPC anyway, so it names the codes with grpc's package;
// the guest SDK has constants of its own (sdk/go/plugin's Code), as a plugin cannot afford
// to link gRPC.
func validPublish(action, arg uint32) bool {
	return action == abi.ActReject && arg <= uint32(codes.Unauthenticated) || action < abi.ActReject && arg == 0
}

func validAck(action, arg uint32) bool { return action == 0 && arg == 0 }

func validRedeliver(action, arg uint32) bool {
	return action == abi.ActDelay && arg > 0 && arg <= 1<<31-1 || action != abi.ActDelay && action <= abi.ActForget && arg == 0
}

// failure is the reason a message is dead-lettered with when p failed on it with err.
func (p *plugin) failure(err error) string {
	return "plugin " + p.spec.Name + " failed: " + err.Error()
}

type malformedError struct{ verdict uint64 }

func (e malformedError) Error() string {
	return fmt.Sprintf("malformed verdict 0x%x (action %d, argument %d)", e.verdict, uint32(e.verdict), uint32(e.verdict>>32))
}

// OnPublish runs the on_publish plugins whose topics match, each on the previous one's
// output. Implements broker.Hooks.
func (c *Chain) OnPublish(d *broker.Draft) (broker.PublishVerdict, error) {
	var out broker.PublishVerdict
	owned := false // d.Headers is a map made by this call, which later plugins may change in place
	for _, p := range c.publish {
		if !p.matchesTopic(d.Topic) {
			continue
		}
		if p.cand != nil {
			if stop, err := p.publishVersions(d, &out, &owned); stop {
				return out, err
			}
			continue
		}
		var inst *instance
		stop, err := p.publish(&inst, d, &out, &owned)
		if inst != nil {
			p.pool.put(inst)
		}
		if stop {
			return out, err
		}
	}
	return out, nil
}

// OnPublishBatch runs the chain over a frame's messages: each plugin in turn over every
// message still going, on one instance taken from the pool for the whole batch rather than
// one per message. Each message sees the plugins in chain order, as with OnPublish; only the
// interleaving of calls differs, which no plugin can rely on (an instance never sees every
// message). A plugin with a candidate version is called one message at a time
// (plugin.publishVersions), not in batches. Implements broker.BatchHooks.
func (c *Chain) OnPublishBatch(ds []broker.Draft, vs []broker.PublishVerdict, errs []error) {
	var stopped, owned []bool
	var small [2][128]bool // the flags of a usual frame, without an allocation
	if len(ds) <= len(small[0]) {
		stopped, owned = small[0][:len(ds)], small[1][:len(ds)]
	} else {
		stopped, owned = make([]bool, len(ds)), make([]bool, len(ds))
	}
	var idx []int         // with batches: the messages p is called on
	var smallIdx [128]int // a usual frame's (bench and the Go SDK batch 128)
	for _, p := range c.publish {
		if p.cand != nil {
			for i := range ds {
				if !stopped[i] && p.matchesTopic(ds[i].Topic) {
					stopped[i], errs[i] = p.publishVersions(&ds[i], &vs[i], &owned[i])
				}
			}
			continue
		}
		var inst *instance
		if p.hasBatch && len(ds) > 1 {
			idx = smallIdx[:0]
			for i := range ds {
				if !stopped[i] && p.matchesTopic(ds[i].Topic) {
					idx = append(idx, i)
				}
			}
			if len(idx) > 1 {
				p.publishBatch(&inst, ds, idx, batchOut{vs, errs, stopped, owned})
				if inst != nil {
					p.pool.put(inst)
				}
				continue
			}
		}
		for i := range ds {
			if stopped[i] || !p.matchesTopic(ds[i].Topic) {
				continue
			}
			stopped[i], errs[i] = p.publish(&inst, &ds[i], &vs[i], &owned[i]) // takes an instance for the frame's first
		}
		if inst != nil {
			p.pool.put(inst)
		}
	}
}

var _ broker.Hooks = (*Chain)(nil)

// publish runs p's on_publish on d, on *inst, or on an instance from the pool if it is nil
// (unless the circuit breaker is open or none can be had, counted as a failure); it leaves in
// *inst the instance for the caller to use again or put back, nil if there is none (discarded
// after a failure). It adds to out what the call emitted and its verdict, and reports whether
// the chain ends for d, with the error that refuses the publish.
func (p *plugin) publish(inst **instance, d *broker.Draft, out *broker.PublishVerdict, owned *bool) (bool, error) {
	var v uint64
	var err error
	in := *inst
	switch {
	case p.breakerOpen():
		err = errBreakerOpen
	case in == nil:
		if in, err = p.pool.get(p); err != nil {
			p.failed(abi.HookPublish, err)
		}
	}
	if err == nil {
		// The rest of the call's input is zero since the last reset: five fields, not the
		// whole input, are written (and cleared by reset) on the path every message takes.
		st := in.st
		st.hook, st.topic, st.payload, st.headers, st.key = abi.HookPublish, d.Topic, d.Payload, d.Headers, d.Key
		var alive bool
		if v, alive, err = p.run(in, abi.HookPublish); !alive {
			in = nil
		}
	}
	*inst = in
	if err != nil {
		return p.publishFailed(d, err)
	}
	if in.st.passedClean(v) {
		return false, nil
	}
	return p.settle(in.st, v, d, out, owned, nil)
}

// settle applies to d and out the outcome of p's on_publish call on d, verdict v, whose call
// state is st, and resets st; it reports what publish does. A batch's calls share memo.
func (p *plugin) settle(st *callState, v uint64, d *broker.Draft, out *broker.PublishVerdict, owned *bool, memo *headerMemo) (bool, error) {
	if uint32(v) == abi.ActPass && len(st.changes) > 0 {
		// Checked before anything is applied: a failed call leaves the message as it was
		// and emits nothing, whatever it had set (FuzzABI).
		if err := p.headersFit(d.Headers, st.changes); err != nil {
			// The plugin's failure, not the publisher's: its failure policy and breaker apply.
			st.reset()
			p.failed(abi.HookPublish, err)
			return p.publishFailed(d, err)
		}
	}
	if len(st.emits) > 0 {
		out.Emit = append(out.Emit, st.emits...)
	}
	switch uint32(v) {
	case abi.ActDrop:
		out.Drop, out.Reason, out.Plugin = true, st.why, p.spec.Name
		st.reset()
		if p.log.IsTrace() {
			p.log.Trace("dropped", "topic", d.Topic, "reason", out.Reason)
		}
		return true, nil
	case abi.ActReject:
		why := st.why
		st.reset()
		if why == "" {
			why = "no reason given"
		}
		code := codes.Code(v >> 32)
		if code == codes.OK {
			code = codes.InvalidArgument
		}
		return true, &broker.RejectError{Code: int(code), Plugin: p.spec.Name, Reason: why}
	}
	if st.topicSet {
		d.Topic = st.newTopic
	}
	if st.payloadSet {
		d.Payload = st.newPayload
	}
	if st.keySet {
		d.Key = st.newKey
	}
	if len(st.changes) > 0 {
		switch {
		case *owned:
			d.Headers = changeHeaders(d.Headers, st.changes)
		case memo != nil: // the result may be shared with the batch's other messages: not owned
			d.Headers = memo.apply(d.Headers, st.changes)
		default:
			d.Headers, *owned = applyHeaders(d.Headers, st.changes), true
		}
	}
	st.reset()
	return false, nil
}

// headersFit says whether h with a call's changes stays within the broker's limits on the
// number of headers and their bytes (each change was checked alone as it was made). An
// upper bound first, the changes counted as additions; the exact figures, on a copy, only
// when that bound is over a limit.
func (p *plugin) headersFit(h broker.Headers, changes []headerChange) error {
	maxN, maxB := p.host.opts.MaxHeaders, p.host.opts.MaxHeaderBytes
	n, size := len(h), 0
	for _, x := range h {
		size += len(x.Key) + len(x.Value)
	}
	for _, c := range changes {
		if !c.deleted {
			n, size = n+1, size+len(c.key)+len(c.value)
		}
	}
	if n <= maxN && size <= maxB {
		return nil
	}
	out := applyHeaders(h, changes)
	n, size = len(out), 0
	for _, x := range out {
		size += len(x.Key) + len(x.Value)
	}
	if n <= maxN && size <= maxB {
		return nil
	}
	return fmt.Errorf("its header changes leave the message with %d headers of %d bytes, over the broker's limits of %d headers (max_headers) or %d bytes (max_header_bytes)", n, size, maxN, maxB)
}

// publishFailed applies p's failure policy to d, on which p failed with err, as publish
// reports it.
func (p *plugin) publishFailed(d *broker.Draft, err error) (bool, error) {
	switch p.spec.FailurePolicy {
	case FailClosed:
		return true, fmt.Errorf("%w: %q on %s: %v; the message was not published", broker.ErrHookFailed, p.spec.Name, d.Topic, err)
	case FailDeadLetter:
		h := d.Headers.With(deadletter.HeaderTopic, d.Topic).Set(deadletter.HeaderCode, deadletter.CodePluginError).Set(deadletter.HeaderReason, p.failure(err))
		d.Topic, d.Headers = "dlq.plugin."+p.spec.Name, h
		return true, nil
	}
	return false, nil // fail open: unchanged
}

// applyHeaders returns a copy of h with the changes of a call: the message's headers may be
// shared (with the publisher, with a message already delivered), so they are never changed in
// place.
func applyHeaders(h broker.Headers, changes []headerChange) broker.Headers {
	if len(changes) == 1 && !changes[0].deleted { // the usual transform: one header set, one copy
		return h.With(changes[0].key, changes[0].value)
	}
	out := make(broker.Headers, len(h), len(h)+len(changes))
	copy(out, h)
	return changeHeaders(out, changes)
}

// headerMemo is the last header change of a batch's calls, the headers it was applied to
// and the result. A frame's messages mostly come with the same headers and get the same
// change (a transform that tags every message), and then share one copy rather than each
// allocating its own: headers are never changed in place once shared (broker.Headers), and
// a later plugin that changes them copies them first. It lives as long as the batch's call.
type headerMemo struct {
	in, out broker.Headers
	change  headerChange
	set     bool
}

// apply returns applyHeaders(h, changes), the memo's result if h and changes are the same.
func (m *headerMemo) apply(h broker.Headers, changes []headerChange) broker.Headers {
	if len(changes) != 1 {
		return applyHeaders(h, changes)
	}
	if m.set && changes[0] == m.change && h.Equal(m.in) {
		return m.out
	}
	out := applyHeaders(h, changes)
	m.in, m.out, m.change, m.set = h, out, changes[0], true
	return out
}

// changeHeaders applies changes to h, which the caller owns, in place, and returns it.
func changeHeaders(h broker.Headers, changes []headerChange) broker.Headers {
	for _, c := range changes {
		if c.deleted {
			h = h.Delete(c.key)
		} else {
			h = h.Set(c.key, c.value)
		}
	}
	if len(h) == 0 {
		return nil
	}
	return h
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

// OnAck runs the on_ack plugins of the event's group and returns what they emitted. A
// plugin's canary never sees acks (the current version does); its shadow runs on each after
// the current version (plugin.shadow).
func (c *Chain) OnAck(e *broker.AckEvent) []broker.Draft {
	var emits []broker.Draft
	for _, p := range c.ack {
		if !p.matchesGroup(e.Group) {
			continue
		}
		in := callInput{hook: abi.HookAck, topic: e.Msg.Topic, payload: e.Msg.Payload, headers: e.Msg.Headers, key: e.Msg.Key, id: e.SystemID,
			sub: e.SubscriptionID, group: e.Group, attempt: e.Attempt, inFlight: int64(e.InFlight)}
		inst, v, err := p.call(&in)
		if p.cand != nil {
			p.shadow(&in, inst, v, err)
		}
		if err != nil {
			continue // nothing to undo: the ack was applied
		}
		emits = append(emits, inst.st.emits...)
		p.done(inst)
	}
	return emits
}

// OnRedeliver runs the on_redeliver plugins of the event's group in order; header changes
// accumulate, and the first verdict other than REDELIVER decides. As with OnAck, a plugin's
// canary never sees redeliveries, and its shadow runs on each after the current version.
func (c *Chain) OnRedeliver(e *broker.RedeliverEvent) broker.RedeliverVerdict {
	var out broker.RedeliverVerdict
	headers := e.Msg.Headers
	for _, p := range c.redeliver {
		if !p.matchesGroup(e.Group) {
			continue
		}
		in := callInput{hook: abi.HookRedeliver, topic: e.Msg.Topic, payload: e.Msg.Payload, headers: headers, key: e.Msg.Key, id: e.SystemID,
			sub: e.SubscriptionID, group: e.Group, attempt: e.Attempt, reason: e.Reason}
		inst, v, err := p.call(&in)
		if p.cand != nil {
			p.shadow(&in, inst, v, err)
		}
		if err != nil {
			switch p.spec.FailurePolicy {
			case FailClosed:
				return out // treated as a nack: the broker's default
			case FailDeadLetter:
				out.Action, out.Code, out.Reason = broker.RedeliverDeadLetter, deadletter.CodePluginError, p.failure(err)
				return out
			}
			continue
		}
		st := inst.st
		why := st.why
		if len(st.emits) > 0 {
			out.Emit = append(out.Emit, st.emits...)
		}
		if len(st.changes) > 0 {
			headers = applyHeaders(headers, st.changes)
			if out.SetHeaders == nil {
				out.SetHeaders = map[string]string{}
			}
			for _, c := range st.changes {
				if c.deleted {
					delete(out.SetHeaders, c.key)
					out.DelHeaders = append(out.DelHeaders, c.key)
				} else {
					out.SetHeaders[c.key] = c.value
				}
			}
		}
		p.done(inst)
		switch uint32(v) {
		case abi.ActDelay:
			out.Action, out.Delay = broker.RedeliverDelay, time.Duration(v>>32)*time.Millisecond
			return out
		case abi.ActDeadLetter:
			out.Action, out.Reason = broker.RedeliverDeadLetter, why
			if out.Reason == "" {
				out.Reason = "dead-lettered by plugin " + p.spec.Name + " after attempt " + strconv.Itoa(int(e.Attempt))
			}
			return out
		case abi.ActForget:
			out.Action, out.Reason = broker.RedeliverDrop, why
			return out
		}
	}
	return out
}
