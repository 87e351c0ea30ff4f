package publishing

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// engine is the smallest engine over a Gate, as broker/memory and broker/jetstream use it:
// it records what it routes, answers "full.*" with ErrGroupFull, and counts drops.
type engine struct {
	gate    Gate
	hooks   HookSlot
	closing atomic.Bool
	limits  broker.Limits
	routed  []string
	dropped int
	warned  int
}

func newEngine(h broker.Hooks) *engine {
	e := &engine{limits: broker.Limits{}.WithDefaults()}
	e.gate = Gate{Limits: &e.limits, Hooks: &e.hooks, Closing: &e.closing}
	e.hooks.Set(h)
	return e
}

func (e *engine) route(m *Msg, err error) (broker.PublishResult, error) {
	switch {
	case err != nil:
		return broker.PublishResult{}, err
	case m.Drop:
		e.dropped++
		return broker.PublishResult{DroppedBy: m.DroppedBy, DropReason: m.DropReason}, nil
	case strings.HasPrefix(m.Topic, "full."):
		return broker.PublishResult{}, broker.ErrGroupFull
	}
	e.routed = append(e.routed, m.Topic)
	return broker.PublishResult{Seq: uint64(len(e.routed)), Routed: 1}, nil
}

func (e *engine) emit(ds []broker.Draft) {
	for m, err := range e.gate.Emitted(ds) {
		if err == nil {
			_, err = e.route(&m, nil)
		}
		if err != nil {
			e.warned++
		}
	}
}

func (e *engine) publish(d broker.Draft) (broker.PublishResult, error) {
	m, emit, err := e.gate.One(d.Topic, d.Payload, d.Headers)
	res, err := e.route(&m, err)
	e.emit(emit)
	return res, err
}

func (e *engine) publishBatch(frame []broker.Draft, res []broker.PublishResult, errs []error) {
	clear(res)
	b := e.gate.Batch(frame, errs)
	defer b.Release()
	for j := range b.Msgs {
		i := b.At[j]
		res[i], errs[i] = e.route(&b.Msgs[j], nil)
	}
	e.emit(b.Emitted())
}

// scriptHooks decide by topic: "drop.*" dropped, "reject.*" refused with emits, "fail.*"
// failed with emits (which must not go out), "grow.*" given a payload over the limit,
// "badhdr.*" given an invalid header, "move.*" re-routed to "moved.*"; every message emits
// "emit.<topic>" when it has the header emit.
type scriptHooks struct {
	calls, batchCalls int
}

func (h *scriptHooks) OnPublish(d *broker.Draft) (broker.PublishVerdict, error) {
	h.calls++
	var v broker.PublishVerdict
	if _, ok := d.Headers.Get("emit"); ok {
		v.Emit = []broker.Draft{{Topic: "emit." + d.Topic}}
	}
	first, rest, _ := strings.Cut(d.Topic, ".")
	switch first {
	case "drop":
		v.Drop, v.Plugin, v.Reason = true, "p", "dropped"
	case "reject":
		return v, &broker.RejectError{Code: 7, Plugin: "p", Reason: "no"}
	case "fail":
		return v, errors.New("plugin p trapped")
	case "grow":
		d.Payload = make([]byte, broker.Limits{}.WithDefaults().MaxMessageBytes+1)
	case "badhdr":
		d.Headers = broker.MakeHeaders(map[string]string{"k": "\xff"})
	case "move":
		d.Topic = "moved." + rest
	}
	return v, nil
}

func (h *scriptHooks) OnPublishBatch(ds []broker.Draft, vs []broker.PublishVerdict, errs []error) {
	h.batchCalls++
	for i := range ds {
		vs[i], errs[i] = h.OnPublish(&ds[i])
	}
}

func (*scriptHooks) WantsAck(string) bool                  { return false }
func (*scriptHooks) WantsRedeliver(string) bool            { return false }
func (*scriptHooks) OnAck(*broker.AckEvent) []broker.Draft { return nil }
func (*scriptHooks) OnRedeliver(*broker.RedeliverEvent) broker.RedeliverVerdict {
	return broker.RedeliverVerdict{}
}

// The same frame gets the same outcomes, routes the same messages and emits the same ones
// published one by one and as a batch; the batch runs the hooks once for the frame.
func TestBatchMatchesOne(t *testing.T) {
	emit := broker.MakeHeaders(map[string]string{"emit": "1"})
	frame := []broker.Draft{
		{Topic: "a.b", Headers: emit},
		{Topic: "bad..topic"},
		{Topic: "drop.x", Headers: emit},
		{Topic: "reject.x", Headers: emit},
		{Topic: "fail.x", Headers: emit},
		{Topic: "grow.x"},
		{Topic: "badhdr.x"},
		{Topic: "move.y"},
		{Topic: "full.x"},
		{Topic: "c.d"},
	}
	const wantRouted = "a.b moved.y c.d emit.a.b emit.drop.x emit.reject.x"
	wantErr := []string{"", "invalid topic", "", "refused by plugin", "trapped", "after the plugins ran", "not valid UTF-8", "", "queue full", ""}
	check := func(t *testing.T, e *engine, res []broker.PublishResult, errs []error) {
		t.Helper()
		for i, err := range errs {
			if (wantErr[i] == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), wantErr[i])) {
				t.Errorf("%s: err %v, want %q", frame[i].Topic, err, wantErr[i])
			}
		}
		if got := strings.Join(e.routed, " "); got != wantRouted {
			t.Errorf("routed %q, want %q", got, wantRouted)
		}
		if res[2].DroppedBy != "p" || e.dropped != 1 {
			t.Errorf("drop: result %+v, dropped %d", res[2], e.dropped)
		}
	}

	t.Run("one by one", func(t *testing.T) {
		h := &scriptHooks{}
		e := newEngine(h)
		res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
		for i, d := range frame {
			res[i], errs[i] = e.publish(d)
		}
		// Emits go out after each message: reorder to the batch's order to compare.
		var routed, emitted []string
		for _, tp := range e.routed {
			if strings.HasPrefix(tp, "emit.") {
				emitted = append(emitted, tp)
			} else {
				routed = append(routed, tp)
			}
		}
		e.routed = append(routed, emitted...)
		check(t, e, res, errs)
	})
	t.Run("batch", func(t *testing.T) {
		h := &scriptHooks{}
		e := newEngine(h)
		res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
		e.publishBatch(frame, res, errs)
		check(t, e, res, errs)
		if h.batchCalls != 1 || h.calls != len(frame)-1 {
			t.Errorf("hooks: %d batch calls for %d messages, want 1 for %d", h.batchCalls, h.calls, len(frame)-1)
		}
	})
}

// Without hooks a batch is checked and handed over whole; while shutting down, every
// message is refused.
func TestBatchNoHooks(t *testing.T) {
	e := newEngine(nil)
	frame := []broker.Draft{{Topic: "a"}, {Topic: "b"}, {Topic: "a.>"}}
	res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
	e.publishBatch(frame, res, errs)
	if strings.Join(e.routed, " ") != "a b" || !errors.Is(errs[2], broker.ErrInvalidTopic) {
		t.Fatalf("routed %v, errors %v", e.routed, errs)
	}
	e.closing.Store(true)
	e.publishBatch(frame, res, errs)
	for i, err := range errs {
		if !errors.Is(err, broker.ErrShuttingDown) {
			t.Errorf("message %d while shutting down: %v", i, err)
		}
	}
	if _, err := e.publish(frame[0]); !errors.Is(err, broker.ErrShuttingDown) {
		t.Errorf("one message while shutting down: %v", err)
	}
}

// Emitted messages that break the rules are refused one by one, the others still go out.
func TestEmittedChecked(t *testing.T) {
	e := newEngine(nil)
	e.emit([]broker.Draft{{Topic: "ok.1"}, {Topic: "bad..t"}, {Topic: "ok.2", Headers: broker.MakeHeaders(map[string]string{"": "x"})}, {Topic: "ok.3"}})
	if strings.Join(e.routed, " ") != "ok.1 ok.3" || e.warned != 2 {
		t.Fatalf("routed %v, warned %d", e.routed, e.warned)
	}
}
