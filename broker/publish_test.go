package broker

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// recordingRouter routes into a list; batch says whether it is a BatchRouter too.
type recordingRouter struct {
	routed  []string
	dropped int
	batches int
}

func (r *recordingRouter) Route(topic string, _ []byte, _ Headers, _ int) (PublishResult, error) {
	if strings.HasPrefix(topic, "full.") {
		return PublishResult{}, ErrGroupFull
	}
	r.routed = append(r.routed, topic)
	return PublishResult{Seq: uint64(len(r.routed)), Routed: 1}, nil
}

func (r *recordingRouter) Dropped(v PublishVerdict) PublishResult {
	r.dropped++
	return PublishResult{DroppedBy: v.Plugin, DropReason: v.Reason}
}

type batchRouter struct{ recordingRouter }

func (r *batchRouter) RouteBatch(ms []Routable, out []PublishOutcome) {
	r.batches++
	for i, m := range ms {
		out[i].Result, out[i].Err = r.Route(m.Topic, m.Payload, m.Headers, m.HB)
	}
}

// scriptHooks decide by topic: "drop.*" dropped, "reject.*" refused with emits, "fail.*"
// failed with emits (which must not go out), "grow.*" given a payload over the limit,
// "badhdr.*" given an invalid header, "move.*" re-routed to "moved.*"; every message emits
// "emit.<topic>" when it has the header emit.
type scriptHooks struct {
	calls, batchCalls int
}

func (h *scriptHooks) OnPublish(d *Draft) (PublishVerdict, error) {
	h.calls++
	var v PublishVerdict
	if d.Headers.Map()["emit"] != "" {
		v.Emit = []Draft{{Topic: "emit." + d.Topic}}
	}
	first, rest, _ := strings.Cut(d.Topic, ".")
	switch first {
	case "drop":
		v.Drop, v.Plugin, v.Reason = true, "p", "dropped"
	case "reject":
		return v, &RejectError{Code: 7, Plugin: "p", Reason: "no"}
	case "fail":
		return v, errors.New("plugin p trapped")
	case "grow":
		d.Payload = make([]byte, DefaultMaxMessageBytes+1)
	case "badhdr":
		d.Headers = MakeHeaders(map[string]string{"k": "\xff"})
	case "move":
		d.Topic = "moved." + rest
	}
	return v, nil
}

func (*scriptHooks) WantsAck(string) bool                         { return false }
func (*scriptHooks) WantsRedeliver(string) bool                   { return false }
func (*scriptHooks) OnAck(*AckEvent) []Draft                      { return nil }
func (*scriptHooks) OnRedeliver(*RedeliverEvent) RedeliverVerdict { return RedeliverVerdict{} }

type scriptBatchHooks struct{ scriptHooks }

func (h *scriptBatchHooks) OnPublishBatch(ds []Draft, vs []PublishVerdict, errs []error) {
	h.batchCalls++
	for i := range ds {
		vs[i], errs[i] = h.OnPublish(&ds[i])
	}
}

// The same frame gets the same outcomes and routes the same messages one by one, with
// batch hooks, with a batch router and with both; the batch forms are used once per frame.
func TestPublishBatchMatchesPublish(t *testing.T) {
	emit := map[string]string{"emit": "1"}
	frame := []Publication{
		{Topic: "a.b", Headers: MakeHeaders(emit)},
		{Topic: "bad..topic"},
		{Topic: "drop.x", Headers: MakeHeaders(emit)},
		{Topic: "reject.x", Headers: MakeHeaders(emit)},
		{Topic: "fail.x", Headers: MakeHeaders(emit)},
		{Topic: "grow.x"},
		{Topic: "badhdr.x"},
		{Topic: "move.y"},
		{Topic: "full.x"},
		{Topic: "c.d"},
	}
	wantRouted := "a.b moved.y c.d"
	wantEmits := "emit.a.b emit.drop.x emit.reject.x"
	wantErr := []string{"", "invalid topic", "", "refused by plugin", "trapped", "after the plugins ran", "not valid UTF-8", "", "queue full", ""}

	for _, tc := range []struct {
		name                 string
		batchHooks, batchRtr bool
	}{{"one by one", false, false}, {"batch hooks", true, false}, {"batch router", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var hooks Hooks = &scriptHooks{}
			if tc.batchHooks {
				hooks = &scriptBatchHooks{}
			}
			var r interface {
				Router
				rec() *recordingRouter
			} = &plainRouter{}
			if tc.batchRtr {
				r = &batchRouterRec{}
			}
			var slot HookSlot
			slot.Set(hooks)
			lim := Limits{}.WithDefaults()
			p := &Publisher{Limits: &lim, Hooks: &slot, Closing: new(atomic.Bool), Router: r, Log: nopWarner{}}
			out := make([]PublishOutcome, len(frame))
			p.PublishBatch(frame, out)
			for i, o := range out {
				if (wantErr[i] == "") != (o.Err == nil) || (o.Err != nil && !strings.Contains(o.Err.Error(), wantErr[i])) {
					t.Errorf("%s: err %v, want %q", frame[i].Topic, o.Err, wantErr[i])
				}
			}
			var routed, emitted []string
			for _, tp := range r.rec().routed {
				if strings.HasPrefix(tp, "emit.") {
					emitted = append(emitted, tp)
				} else {
					routed = append(routed, tp)
				}
			}
			if got := strings.Join(routed, " "); got != wantRouted {
				t.Errorf("routed %q, want %q", got, wantRouted)
			}
			if got := strings.Join(emitted, " "); got != wantEmits {
				t.Errorf("emitted %q, want %q", got, wantEmits)
			}
			if out[2].Result.DroppedBy != "p" || r.rec().dropped != 1 {
				t.Errorf("drop: result %+v, dropped %d", out[2].Result, r.rec().dropped)
			}
			if bh, ok := hooks.(*scriptBatchHooks); ok && (bh.batchCalls != 1 || bh.calls != len(frame)-1) {
				t.Errorf("batch hooks: %d batch calls for %d messages, want 1 for %d", bh.batchCalls, bh.calls, len(frame)-1)
			}
			if tc.batchRtr && tc.batchHooks && r.rec().batches != 1 { // hooks one by one: routes too
				t.Errorf("batch router called %d times, want once", r.rec().batches)
			}
		})
	}
}

// A batch without hooks goes to the BatchRouter at once; while shutting down, every
// message is refused.
func TestPublishBatchNoHooks(t *testing.T) {
	lim := Limits{}.WithDefaults()
	r := &batchRouterRec{}
	closing := new(atomic.Bool)
	p := &Publisher{Limits: &lim, Hooks: new(HookSlot), Closing: closing, Router: r, Log: nopWarner{}}
	frame := []Publication{{Topic: "a"}, {Topic: "b"}, {Topic: "a.>"}}
	out := make([]PublishOutcome, len(frame))
	p.PublishBatch(frame, out)
	if r.batches != 1 || strings.Join(r.routed, " ") != "a b" || !errors.Is(out[2].Err, ErrInvalidTopic) {
		t.Fatalf("batches %d, routed %v, outcomes %+v", r.batches, r.routed, out)
	}
	closing.Store(true)
	p.PublishBatch(frame, out)
	for i, o := range out {
		if !errors.Is(o.Err, ErrShuttingDown) {
			t.Errorf("message %d while shutting down: %v", i, o.Err)
		}
	}
}

type plainRouter struct{ recordingRouter }

func (r *plainRouter) rec() *recordingRouter { return &r.recordingRouter }

type batchRouterRec struct{ batchRouter }

func (r *batchRouterRec) rec() *recordingRouter { return &r.recordingRouter }

type nopWarner struct{}

func (nopWarner) Warn(string, ...any) {}
