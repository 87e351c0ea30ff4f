package broker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Publication is one message of a PublishBatch. Its Headers must be sorted, each key once
// (MakeHeaders from a map, SortHeaders from pairs in any order): the batch refuses them
// otherwise.
type Publication struct {
	Topic   string
	Payload []byte
	Headers Headers
}

// PublishOutcome is what became of one message of a PublishBatch: what Publish would have
// returned for it.
type PublishOutcome struct {
	Result PublishResult
	Err    error
}

// BatchHooks is implemented by Hooks that can run OnPublish over several messages at once,
// more cheaply than one by one (the plugin chain takes one instance of each plugin for the
// whole batch). vs[i] and errs[i] must be what OnPublish(&ds[i]) would have returned; the
// three slices have the same length.
type BatchHooks interface {
	OnPublishBatch(ds []Draft, vs []PublishVerdict, errs []error)
}

// Router is the part of a publish that differs from engine to engine; Publisher does the rest.
type Router interface {
	// Route delivers a valid message (hb: the sum of its headers' lengths) to its targets.
	Route(topic string, payload []byte, headers Headers, hb int) (PublishResult, error)
	// Dropped returns the result of a message an OnPublish verdict dropped, and counts it.
	Dropped(v PublishVerdict) PublishResult
}

// BatchRouter is implemented by a Router that routes several messages at once more cheaply
// than one by one (an engine whose stores answer asynchronously, for example). out[i] is
// what Route would have returned for ms[i]; the messages are routed in order.
type BatchRouter interface {
	RouteBatch(ms []Routable, out []PublishOutcome)
}

// Routable is a valid message ready for Router.Route.
type Routable struct {
	Topic   string
	Payload []byte
	Headers Headers
	HB      int // the sum of its headers' lengths
}

// Warner is where Publisher reports what it cannot return to a publisher: an hclog.Logger.
type Warner interface {
	Warn(msg string, args ...any)
}

// Publisher runs the steps of a publish that every engine takes the same way, so that a
// message meets the same checks and the same plugins whatever the engine: refuse while
// shutting down, check the message against the Limits, run the OnPublish hooks, check what
// they changed, hand it to the engine's Router, then route what the hooks emitted (without
// OnPublish, so a plugin cannot loop).
type Publisher struct {
	Limits  *Limits
	Hooks   *HookSlot
	Closing *atomic.Bool
	Router  Router
	Log     Warner
}

// Publish publishes one message: Engine.Publish.
func (p *Publisher) Publish(topic string, payload []byte, headers map[string]string) (PublishResult, error) {
	return p.publish(topic, payload, MakeHeaders(headers))
}

func (p *Publisher) publish(topic string, payload []byte, headers Headers) (PublishResult, error) {
	hb, err := p.admit(topic, payload, headers)
	if err != nil {
		return PublishResult{}, err
	}
	h := p.Hooks.Load()
	if h == nil {
		return p.Router.Route(topic, payload, headers, hb)
	}
	d := Draft{Topic: topic, Payload: payload, Headers: headers}
	v, herr := h.OnPublish(&d)
	r, err := p.afterHooks(&d, v, herr)
	res := r.dropped
	if err == nil && r.HB >= 0 {
		res, err = p.Router.Route(r.Topic, r.Payload, r.Headers, r.HB)
	}
	if emits(herr) {
		p.Emit(v.Emit)
	}
	return res, err
}

// emits says whether what the hooks emitted goes out after they returned err: it does
// unless they failed (a plugin's refusal, a RejectError, is a verdict like any other).
func emits(err error) bool {
	var rej *RejectError
	return err == nil || errors.As(err, &rej)
}

func (p *Publisher) admit(topic string, payload []byte, headers Headers) (int, error) {
	if p.Closing.Load() {
		return 0, fmt.Errorf("%w: not accepting publishes; retry against the restarted broker", ErrShuttingDown)
	}
	return p.Limits.CheckMessage(topic, payload, headers)
}

// afterHooks checks what the hooks made of d, given their verdict v and error err. A
// message to route comes back with HB ≥ 0; one the verdict dropped with HB < 0 and its
// result in dropped.
func (p *Publisher) afterHooks(d *Draft, v PublishVerdict, err error) (hooked, error) {
	if err != nil {
		return hooked{Routable: Routable{HB: -1}}, err
	}
	if err := p.Limits.CheckPayload(len(d.Payload), true); err != nil {
		return hooked{Routable: Routable{HB: -1}}, err
	}
	if v.Drop {
		return hooked{Routable: Routable{HB: -1}, dropped: p.Router.Dropped(v)}, nil
	}
	hb, err := p.Limits.CheckHeaders(d.Headers)
	if err != nil {
		return hooked{Routable: Routable{HB: -1}}, err
	}
	return hooked{Routable: Routable{Topic: d.Topic, Payload: d.Payload, Headers: d.Headers, HB: hb}}, nil
}

type hooked struct {
	Routable
	dropped PublishResult
}

// Emit routes messages emitted by hooks, without OnPublish; a refused one is logged.
func (p *Publisher) Emit(ds []Draft) {
	for _, d := range ds {
		hb, err := p.Limits.CheckMessage(d.Topic, d.Payload, d.Headers)
		if err == nil {
			_, err = p.Router.Route(d.Topic, d.Payload, d.Headers, hb)
		}
		if err != nil {
			p.Log.Warn("message emitted by a plugin refused", "topic", d.Topic, "error", err)
		}
	}
}

// batch is the scratch space of one PublishBatch.
type batch struct {
	drafts   []Draft
	verdicts []PublishVerdict
	errs     []error
	at       []int // index in the batch of drafts[i]
	routes   []Routable
	routeAt  []int
	outs     []PublishOutcome
}

var batches = sync.Pool{New: func() any { return new(batch) }}

// PublishBatch publishes msgs in order, as Publish would one by one, and writes each
// outcome to out[i] (len(out) must be len(msgs)). The hooks run over the whole batch at
// once where they implement BatchHooks, and the Router routes it at once where it
// implements BatchRouter; what the hooks emit is then routed after the batch.
func (p *Publisher) PublishBatch(msgs []Publication, out []PublishOutcome) {
	h := p.Hooks.Load()
	bh, _ := h.(BatchHooks)
	br, _ := p.Router.(BatchRouter)
	if (h != nil && bh == nil) || (h == nil && br == nil) || len(msgs) == 1 {
		for i, m := range msgs {
			out[i].Result, out[i].Err = p.publish(m.Topic, m.Payload, m.Headers)
		}
		return
	}
	b := batches.Get().(*batch)
	defer b.release()
	for i, m := range msgs {
		hb, err := p.admit(m.Topic, m.Payload, m.Headers)
		if err != nil {
			out[i] = PublishOutcome{Err: err}
			continue
		}
		if h == nil {
			b.route(i, Routable{Topic: m.Topic, Payload: m.Payload, Headers: m.Headers, HB: hb})
			continue
		}
		b.drafts = append(b.drafts, Draft(m))
		b.at = append(b.at, i)
	}
	if bh != nil && len(b.drafts) > 0 {
		b.verdicts = append(b.verdicts, make([]PublishVerdict, len(b.drafts))...)
		b.errs = append(b.errs, make([]error, len(b.drafts))...)
		bh.OnPublishBatch(b.drafts, b.verdicts, b.errs)
	}
	var emitted bool
	for j := range b.drafts {
		v := b.verdicts[j]
		r, err := p.afterHooks(&b.drafts[j], v, b.errs[j])
		emitted = emitted || len(v.Emit) > 0
		if err != nil || r.HB < 0 {
			out[b.at[j]] = PublishOutcome{Result: r.dropped, Err: err}
			continue
		}
		b.route(b.at[j], r.Routable)
	}
	p.routeAll(br, b, out)
	if emitted {
		for j := range b.drafts {
			if emits(b.errs[j]) {
				p.Emit(b.verdicts[j].Emit)
			}
		}
	}
}

func (b *batch) route(i int, r Routable) {
	b.routes = append(b.routes, r)
	b.routeAt = append(b.routeAt, i)
}

func (p *Publisher) routeAll(br BatchRouter, b *batch, out []PublishOutcome) {
	if br == nil {
		for j, r := range b.routes {
			i := b.routeAt[j]
			out[i].Result, out[i].Err = p.Router.Route(r.Topic, r.Payload, r.Headers, r.HB)
		}
		return
	}
	b.outs = append(b.outs, make([]PublishOutcome, len(b.routes))...)
	br.RouteBatch(b.routes, b.outs)
	for j, o := range b.outs {
		out[b.routeAt[j]] = o
	}
}

// release clears the scratch space (it holds messages) and returns it to the pool.
func (b *batch) release() {
	clear(b.drafts)
	clear(b.verdicts)
	clear(b.errs)
	clear(b.routes)
	clear(b.outs)
	b.drafts, b.verdicts, b.errs, b.at = b.drafts[:0], b.verdicts[:0], b.errs[:0], b.at[:0]
	b.routes, b.routeAt, b.outs = b.routes[:0], b.routeAt[:0], b.outs[:0]
	batches.Put(b)
}
