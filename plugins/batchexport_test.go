package plugins

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// frame runs c over a frame of messages on topics, each with payload p<i>, and returns the
// drafts as the chain left them, their verdicts and errors.
func frame(c *Chain, payload func(i int) []byte, topics ...string) ([]broker.Draft, []broker.PublishVerdict, []error) {
	ds := make([]broker.Draft, len(topics))
	for i, tp := range topics {
		ds[i] = broker.Draft{Topic: tp, Payload: payload(i)}
	}
	vs, errs := make([]broker.PublishVerdict, len(ds)), make([]error, len(ds))
	c.OnPublishBatch(ds, vs, errs)
	return ds, vs, errs
}

func numbered(i int) []byte { return []byte(fmt.Sprint("p", i)) }

// via is the path that decided message d of batch.wat: "batch" or "one".
func via(d broker.Draft) string { return d.Headers.Map()["via"] }

// A plugin with batches is called once for a frame: every message is decided in the batch,
// with its own write list, verdict, emits and topic change, and without a host call of its
// own for what it reads; a message published alone is given to tb_v1_on_publish.
func TestBatchDecidesEachMessage(t *testing.T) {
	h, err := NewHost(HostOptions{CountHostCalls: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(t.Context())
	c := load(t, h, Spec{Name: "batch", Wasm: fixture(t, "batch"), PoolSize: 1})
	ds, vs, errs := frame(c, numbered, "v.0", "d.1", "t.2", "e.3", "r.4", "b.5", "p.6", "v.7")
	if via(ds[0]) != "batch" || via(ds[7]) != "batch" {
		t.Fatalf("via %q %q: the frame was not given as a batch", via(ds[0]), via(ds[7]))
	}
	if !vs[1].Drop || vs[1].Reason != "dropped" || vs[1].Plugin != "batch" {
		t.Errorf("d.1: %+v, want dropped with its reason", vs[1])
	}
	if ds[2].Headers.Map()["x"] != "1" || len(ds[2].Headers) != 1 {
		t.Errorf("t.2: headers %v, want x=1", ds[2].Headers)
	}
	if len(vs[3].Emit) != 1 || vs[3].Emit[0].Topic != "e.out" || string(vs[3].Emit[0].Payload) != "p3" {
		t.Errorf("e.3: emits %+v, want one to e.out with its payload p3", vs[3].Emit)
	}
	if ds[4].Topic != "moved.x" {
		t.Errorf("r.4: topic %q, want moved.x", ds[4].Topic)
	}
	if errs[5] != nil || ds[5].Topic != "b.5" || vs[5].Drop { // fail_open: unchanged
		t.Errorf("b.5 (malformed verdict, fail_open): %+v %v %v", ds[5], vs[5], errs[5])
	}
	for i := range ds {
		if i != 3 && len(vs[i].Emit) > 0 || i != 1 && vs[i].Drop || i != 4 && ds[i].Topic == "moved.x" || errs[i] != nil {
			t.Errorf("message %d got another's outcome: %+v %+v %v", i, ds[i], vs[i], errs[i])
		}
	}
	st := c.Stats()[0]
	if st.Calls != 8 || st.Batched != 8 || st.Failures != 1 || st.HostCalls != 2 { // the emit and the set_topic
		t.Errorf("stats %+v, want 8 calls, all batched, 1 failure (b.5), 2 host calls", st)
	}
	// Once the call is settled, its instance holds nothing of the frame's messages.
	p := c.publish[0]
	inst, err := p.pool.get(p)
	if err != nil {
		t.Fatal(err)
	}
	for k, st := range inst.batch.states {
		if st.topic != "" || st.payload != nil || st.headers != nil || st.dirty || len(st.changes) > 0 || len(st.emits) > 0 {
			t.Errorf("message %d's call state was kept after the frame: %+v", k, st)
		}
	}
	p.pool.put(inst)
	d := broker.Draft{Topic: "v.alone"}
	if _, err := c.OnPublish(&d); err != nil || via(d) != "one" {
		t.Errorf("a message alone: %v, via %q; want tb_v1_on_publish", err, via(d))
	}
}

// A batch that traps is run again one message at a time on another instance, so that only
// the message that made it trap fails, with the failure policy.
func TestBatchTrapFailsOneMessage(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "batch", Wasm: fixture(t, "batch"), FailurePolicy: FailClosed, PoolSize: 1})
	ds, _, errs := frame(c, numbered, "v.0", "x.1", "v.2")
	if errs[0] != nil || errs[2] != nil || via(ds[0]) != "one" || via(ds[2]) != "one" {
		t.Errorf("the others: %v %v via %q %q; want passed, one at a time", errs[0], errs[2], via(ds[0]), via(ds[2]))
	}
	if !errors.Is(errs[1], broker.ErrHookFailed) {
		t.Errorf("x.1: %v, want the hook failed (fail_closed)", errs[1])
	}
	if st := c.Stats()[0]; st.Failures != 2 || st.Batched != 0 { // the batch, then x.1 alone
		t.Errorf("stats %+v, want 2 failures, no call batched", st)
	}
	// The pool's one instance was replaced: the next frame is a batch again.
	if ds, _, _ := frame(c, numbered, "v.0", "v.1"); via(ds[0]) != "batch" || via(ds[1]) != "batch" {
		t.Errorf("next frame via %q %q, want batch", via(ds[0]), via(ds[1]))
	}
}

// A host call with current out of the batch traps it (then each message runs alone); a batch
// the plugin declines is run one message at a time, with no failure.
func TestBatchCurrentAndDecline(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "batch", Wasm: fixture(t, "batch"), FailurePolicy: FailClosed})
	ds, _, errs := frame(c, numbered, "v.0", "i.1")
	if errs[0] != nil || errs[1] != nil || via(ds[0]) != "one" {
		t.Errorf("bad current: %v %v via %q; want both passed alone", errs[0], errs[1], via(ds[0]))
	}
	if m := c.Metrics()[0].Hooks[0]; m.Failures[FailTrap] != 1 {
		t.Errorf("failures %v, want one trap", m.Failures)
	}
	ds, _, errs = frame(c, numbered, "n.0", "v.1", "v.2")
	if errs[0] != nil || via(ds[1]) != "one" || via(ds[2]) != "one" {
		t.Errorf("declined: %v via %q %q, want one at a time", errs[0], via(ds[1]), via(ds[2]))
	}
	if st := c.Stats()[0]; st.Failures != 1 {
		t.Errorf("stats %+v: a declined batch is no failure", st)
	}
}

// A frame larger than a batch, or than the largest inbox asked for a batch, is split; a
// message that alone needs more than that is given in a batch of its own, with its inbox.
func TestBatchSplits(t *testing.T) {
	for name, size := range map[string]func(i int) int{
		"600 small":    func(int) int { return 10 },
		"300 of 8 KiB": func(int) int { return 8 << 10 },
		"one of 3 MiB": func(i int) int {
			if i == 2 {
				return 3 << 20
			}
			return 100
		},
	} {
		n := 600
		if name != "600 small" {
			n = 300
		}
		topics := make([]string, n)
		for i := range topics {
			topics[i] = fmt.Sprint("v.", i)
		}
		c := load(t, newHost(t), Spec{Name: "batch", Wasm: fixture(t, "batch"), PoolSize: 1})
		ds, _, errs := frame(c, func(i int) []byte { return make([]byte, size(i)) }, topics...)
		for i := range ds {
			if errs[i] != nil || via(ds[i]) != "batch" || len(ds[i].Payload) != size(i) {
				t.Fatalf("%s: message %d: %v via %q, %d bytes", name, i, errs[i], via(ds[i]), len(ds[i].Payload))
			}
		}
		if st := c.Stats()[0]; st.Calls != uint64(n) || st.Failures != 0 {
			t.Errorf("%s: stats %+v", name, st)
		}
	}
}

// With a time limit, the batch is one call under it.
func TestBatchTimeLimit(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "batch", Wasm: fixture(t, "batch"), CallTimeout: time.Second})
	ds, _, errs := frame(c, numbered, "v.0", "t.1")
	if errs[0] != nil || via(ds[0]) != "batch" || ds[1].Headers.Map()["x"] != "1" {
		t.Errorf("%v via %q, %v", errs[0], via(ds[0]), ds[1].Headers)
	}
}

// A plugin whose hooks leave on_publish out is not given batches; one that exports the
// batch without the inbox is refused.
func TestBatchLoad(t *testing.T) {
	h := newHost(t)
	c := load(t, h, Spec{Name: "b", Wasm: fixture(t, "batch"), Hooks: []string{"on_publish"}})
	if !c.publish[0].hasBatch {
		t.Error("hooks = [on_publish]: no batches")
	}
	_, err := h.Load(t.Context(), []Spec{{Name: "b", Wasm: fixture(t, "batchnoinbox")}})
	if err == nil || !strings.Contains(err.Error(), "tb_v1_inbox") {
		t.Errorf("batch without inbox: %v, want refused naming tb_v1_inbox", err)
	}
}

// FuzzBatch: a frame of any messages is decided in batches as one message at a time decides
// it (outcomes, topics, payloads, headers, emits, errors), whatever the plugin does with each:
// drop, header, emit, re-route, trap, malformed verdict, bad current, decline.
func FuzzBatch(f *testing.F) {
	f.Add([]byte("dterbp"), uint8(0))
	f.Add([]byte("pxp"), uint8(1))
	f.Add([]byte("nit"), uint8(2))
	h, err := NewHost(HostOptions{})
	if err != nil {
		f.Fatal(err)
	}
	defer h.Close(f.Context())
	chains := map[FailurePolicy][2]*Chain{}
	for _, fp := range []FailurePolicy{FailOpen, FailClosed, FailDeadLetter} {
		var pair [2]*Chain
		for k := range pair {
			c, err := h.Load(f.Context(), []Spec{{Name: "batch", Wasm: fixture(f, "batch"), FailurePolicy: fp, BreakerFailures: 1 << 30}})
			if err != nil {
				f.Fatal(err)
			}
			defer c.Close(f.Context())
			pair[k] = c
		}
		chains[fp] = pair
	}
	f.Fuzz(func(t *testing.T, letters []byte, policy uint8) {
		if len(letters) > 300 {
			letters = letters[:300]
		}
		pair := chains[FailurePolicy(policy%3)]
		var topics []string
		for i, l := range letters {
			if l == 'v' || l < 'a' || l > 'z' { // v tells the paths apart: not compared
				l = 'p'
			}
			topics = append(topics, fmt.Sprintf("%c.%d", l, i))
		}
		ds, vs, errs := frame(pair[0], numbered, topics...)
		for i, tp := range topics {
			d := broker.Draft{Topic: tp, Payload: numbered(i)}
			v, err := pair[1].OnPublish(&d)
			if !reflect.DeepEqual(d, ds[i]) || !reflect.DeepEqual(v, vs[i]) || fmt.Sprint(err) != fmt.Sprint(errs[i]) {
				t.Fatalf("message %d of %q:\nbatch %+v %+v %v\nalone %+v %+v %v", i, letters, ds[i], vs[i], errs[i], d, v, err)
			}
		}
	})
}

// A message published alone that the plugin passes without writing is settled in place, and
// leaves nothing of itself in the instance either.
func TestPassAloneKeepsNothing(t *testing.T) {
	h, err := NewHost(HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(t.Context())
	c := load(t, h, Spec{Name: "pass", Wasm: fixture(t, "pass"), PoolSize: 1})
	d := broker.Draft{Topic: "a.b", Payload: []byte("body"), Headers: broker.MakeHeaders(map[string]string{"k": "v"})}
	if v, err := c.OnPublish(&d); err != nil || v.Drop || d.Topic != "a.b" || string(d.Payload) != "body" || len(d.Headers) != 1 {
		t.Fatalf("pass: %+v %v, message %+v", v, err, d)
	}
	p := c.publish[0]
	inst, err := p.pool.get(p)
	if err != nil {
		t.Fatal(err)
	}
	defer p.pool.put(inst)
	if st := inst.st; st.topic != "" || st.payload != nil || st.headers != nil || st.dirty {
		t.Errorf("the call state was kept after the call: %+v", st)
	}
}
