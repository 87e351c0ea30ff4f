package e2e_test

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/plugins"
)

// sdkcheck runs the sdkcheck plugin on every topic under sdk., with one instance (so that a
// Message kept from one call is seen by the next) and max_emits 3.
func sdkcheck(t *testing.T, cfg map[string]string) *env {
	return start(t, plugins.Spec{Name: "sdkcheck", Wasm: wasm(t, "sdkcheck"), Topics: []string{"sdk.>"},
		Groups: []string{"g"}, PoolSize: 1, MaxEmits: 3, Config: cfg})
}

func report(t *testing.T, d broker.Delivery) []string {
	t.Helper()
	r, ok := d.Msg.Headers.Map()["report"]
	if !ok {
		t.Fatalf("%s: no report header in %v", d.Msg.Topic, d.Msg.Headers)
	}
	return strings.Split(r, ";")
}

func wantReport(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("report:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// The Message view: headers enumerated and looked up, changes reflected at once, ID empty
// in on_publish; values over the scratch buffer's initial size.
func TestSDKMessageView(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, ">")
	big := strings.Repeat("b", 5000)
	e.publish(t, "sdk.view", "", map[string]string{"a": "1", "b": "2", "big": big})
	d := s.Next(t)
	wantReport(t, report(t, d),
		"before=a=1,b=2,big#5000",
		"set=nil",
		"del=nil",
		"after=b=2,big#5000,c=3",
		"a=/false",
		"c=3/true",
		"big=5000/true",
		"missing=false",
		"id=",
		"settopic=nil",
		"topic=sdk.view.done",
	)
	if d.Msg.Topic != "sdk.view.done" {
		t.Errorf("topic %s, want sdk.view.done", d.Msg.Topic)
	}
	h := d.Msg.Headers
	if _, ok := h.Map()["a"]; ok || h.Map()["b"] != "2" || h.Map()["c"] != "3" || h.Map()["big"] != big || len(h) != 4 {
		t.Errorf("headers %v", h)
	}

	// The SDK reuses the Message: nothing of the previous call's must show.
	e.publish(t, "sdk.view", "", map[string]string{"a": "x", "z": "26"})
	r := report(t, s.Next(t))
	wantReport(t, r[:4], "before=a=x,z=26", "set=nil", "del=nil", "after=c=3,z=26")
	wantReport(t, r[6:7], "big=0/false")
}

// Payloads below and above the size read through the scratch buffer (64 KiB) round-trip.
func TestSDKPayloads(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, ">")
	for _, n := range []int{1, 1024, 1025, 5000, 64 << 10, 64<<10 + 1, 700 << 10} {
		p := bytes.Repeat([]byte{'p'}, n)
		p[0], p[n-1] = 'a', 'z'
		if _, err := e.b.Publish("sdk.big", p, nil); err != nil {
			t.Fatal(err)
		}
		d := s.Next(t)
		if !bytes.Equal(d.Msg.Payload, append(p, '!')) {
			t.Errorf("%d bytes: payload came back as %d bytes", n, len(d.Msg.Payload))
		}
		wantReport(t, report(t, d), "len="+strconv.Itoa(n), "setpayload=nil", "same=true")
	}
}

// Writes the broker refuses come back as the ABI's errors; Emit honours max_emits.
func TestSDKErrorsAndEmits(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, "sdk.errors")
	emitted := e.fanout(t, "sdk.emitted")
	e.publish(t, "sdk.errors", "", nil)
	wantReport(t, report(t, s.Next(t)),
		"badtopic=invalid",
		"emptyheader=invalid",
		"toolarge=too_large",
		"emitemptyheader=invalid",
		"emitbadtopic=invalid",
		"emit0=nil",
		"emit1=nil",
		"emit2=nil",
		"emit3=limit",
		`status=-1 tinybroker: SetTopic "bad topic": invalid value`,
	)
	for i := range 3 {
		d := emitted.Next(t)
		if string(d.Msg.Payload) != strconv.Itoa(i) || d.Msg.Headers.Map()["n"] != strconv.Itoa(i) {
			t.Errorf("emitted message %d: %q %v", i, d.Msg.Payload, d.Msg.Headers)
		}
	}
	emitted.None(t, 10*time.Millisecond)
}

// Ordering keys (issue 27): Key reads the message's key, SetKey changes it and refuses what
// the broker would, EmitKeyed gives an emit its key and refuses a bad one before emitting;
// through a publish frame, so on the SDK's batch loop (each message's host calls its own).
func TestSDKKeys(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, "sdk.key")
	emitted := e.fanout(t, "sdk.emitted")
	frame := make([]broker.Draft, 3)
	for i := range frame {
		n := strconv.Itoa(i)
		frame[i] = broker.Draft{Topic: "sdk.key", Key: "k" + n, Headers: broker.MakeHeaders(map[string]string{"tenant": "t" + n})}
	}
	res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
	e.b.PublishBatch(frame, res, errs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range frame {
		n := strconv.Itoa(i)
		d := s.Next(t)
		wantReport(t, report(t, d), "key=k"+n, "set=nil", "now=t"+n, "bad=invalid", "long=too_large", "after=t"+n, "emit=nil", "emitbad=invalid")
		if d.Msg.Key != "t"+n {
			t.Errorf("message %d delivered with key %q, want t%s", i, d.Msg.Key, n)
		}
	}
	for i := range frame {
		n := strconv.Itoa(i)
		if d := emitted.Next(t); d.Msg.Key != "e-t"+n || string(d.Msg.Payload) != "t"+n {
			t.Errorf("emit %d: key %q payload %q, want e-t%s", i, d.Msg.Key, d.Msg.Payload, n)
		}
	}
	emitted.None(t, 10*time.Millisecond) // the bad key's emit did not go out
	if st := e.chain.Stats()[0]; st.Batched != uint64(len(frame)) {
		t.Errorf("%d of the frame's %d messages given in a batch", st.Batched, len(frame))
	}
}

// Configuration reaches Init, Config and ConfigValue, escapes and all; Init can refuse.
func TestSDKConfig(t *testing.T) {
	e := sdkcheck(t, map[string]string{"multi": "line1\nline2\\end\r", "plain": "x", "empty": ""})
	e.log.WaitFor(t, "sdkcheck: Init saw 3 keys")
	s := e.fanout(t, ">")
	e.publish(t, "sdk.config", "", nil)
	wantReport(t, report(t, s.Next(t)),
		`config=empty=,multi=line1\nline2\\end`+"\r"+`,plain=x`,
		`multi="line1\nline2\\end\r"/true`,
		"nope=false",
	)

	_, _, err := load(t, plugins.Spec{Name: "sdkcheck", Wasm: wasm(t, "sdkcheck"), Config: map[string]string{"refuse": "as asked"}})
	if err == nil || !strings.Contains(err.Error(), "sdkcheck refuses: as asked") {
		t.Errorf("Init's error: %v", err)
	}
}

// Drop and Reject carry their reasons; Now is the broker's clock; Logf reaches the log.
func TestSDKVerdictsClockAndLog(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, ">")
	if res := e.publish(t, "sdk.drop", "", nil); res.Routed != 0 {
		t.Errorf("dropped message routed to %d", res.Routed)
	}
	_, err := e.b.Publish("sdk.reject", nil, nil)
	var rej *broker.RejectError
	if !errors.As(err, &rej) || rej.Code != 7 || rej.Reason != "rejected by sdkcheck" || rej.Plugin != "sdkcheck" {
		t.Errorf("reject: %v", err)
	}

	before := time.Now().UnixNano()
	e.publish(t, "sdk.now", "", nil)
	after := time.Now().UnixNano()
	now, err := strconv.ParseInt(report(t, s.Next(t))[0], 10, 64)
	if err != nil || now < before || now > after {
		t.Errorf("Now = %d, want between %d and %d", now, before, after)
	}

	e.publish(t, "sdk.log", "", nil)
	e.log.WaitFor(t, "sdkcheck says hello 42")
}

// A panic is logged with its stack — the runtime's own report goes to the discarded stderr —
// and fails the call; a Message kept from one hook and used in another panics with a clear
// message.
func TestSDKPanics(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, ">")
	e.publish(t, "sdk.panic", "x", nil) // fail_open: the message passes unchanged
	if d := s.Next(t); d.Msg.Topic != "sdk.panic" || string(d.Msg.Payload) != "x" {
		t.Errorf("after a panic: %s %q", d.Msg.Topic, d.Msg.Payload)
	}
	e.log.WaitFor(t, "panic in on_publish: sdkcheck panics on purpose")
	e.log.WaitFor(t, "main.publish(") // the stack
	if st := e.chain.Stats()[0]; st.Failures != 1 {
		t.Errorf("stats %+v: want 1 failure", st)
	}

	// An on_publish Message used in on_ack.
	e.publish(t, "sdk.keep", "", nil)
	s.Next(t)
	m := e.subscribe(t, broker.SubscribeOptions{ID: "jobs", Group: "g", Patterns: []string{"jobs.*"}, Mode: broker.Balanced})
	res := e.publish(t, "jobs.1", "", nil)
	m.Next(t)
	m.Ack([]string{res.SystemID})
	e.log.WaitFor(t, "panic in on_ack: plugin: a Message was used after the hook it was passed to had returned")
}

// on_ack sees the event and the message, may emit but not change the message; on_redeliver
// sees the reason, may change headers but not the payload, and its verdicts apply.
func TestSDKAckAndRedeliver(t *testing.T) {
	e := sdkcheck(t, nil)
	watch := e.fanout(t, "sdk.acked", "dlq.>")
	m := e.subscribe(t, broker.SubscribeOptions{ID: "jobs", Group: "g", Patterns: []string{"jobs.*"}, Mode: broker.Balanced})

	res := e.publish(t, "jobs.1", "job one", nil)
	id := res.SystemID
	m.Next(t)
	time.Sleep(2 * time.Millisecond)
	m.Ack([]string{id})
	d := watch.Next(t)
	want := "group=g;sub=jobs;attempt=1;inflight=true;id=" + id + ";topic=jobs.1;payload=job one;setheader=not_allowed;settopic=not_allowed;key=;setkey=not_allowed"
	if d.Msg.Topic != "sdk.acked" || string(d.Msg.Payload) != want {
		t.Errorf("on_ack emitted %s %q, want %q", d.Msg.Topic, d.Msg.Payload, want)
	}

	res = e.publish(t, "jobs.2", "job two", nil)
	id = res.SystemID
	m.Next(t)
	nacked := time.Now()
	m.Nack([]string{id}, 0, "bad input")
	d = m.Next(t)
	if took := time.Since(nacked); took < 30*time.Millisecond || d.Attempt != 2 {
		t.Errorf("redelivered after %v, attempt %d; want at least 30ms, attempt 2", took, d.Attempt)
	}
	r := report(t, d)
	if len(r) != 4 || !strings.HasPrefix(r[0], "reason=") || !strings.Contains(r[0], "bad input") {
		t.Errorf("on_redeliver report %q", r)
	}
	wantReport(t, r[1:], "setpayload=not_allowed", "settopic=not_allowed", "id=true")
	if string(d.Msg.Payload) != "job two" {
		t.Errorf("payload %q", d.Msg.Payload)
	}
	m.Nack([]string{id}, 0, "")
	dl := watch.Next(t)
	if dl.Msg.Topic != "dlq.jobs" || dl.Msg.Headers.Map()[deadletter.HeaderReason] != "sdkcheck gave up after attempt 2" ||
		dl.Msg.Headers.Map()["report"] == "" {
		t.Errorf("dead letter %s %v", dl.Msg.Topic, dl.Msg.Headers)
	}
}

// A plugin that imports a hook's package but registers its function in main (never run) is
// refused at load, with a reason that says what to do.
func TestSDKRefusesUnregisteredHook(t *testing.T) {
	_, _, err := load(t, plugins.Spec{Name: "nohandle", Wasm: wasm(t, "nohandle")})
	if err == nil || !strings.Contains(err.Error(), "never calls onack.Handle: call it in func init()") {
		t.Errorf("Load = %v", err)
	}
}

// Plugin metrics (issue 30): a gauge set and added to, a labelled one set per label value,
// a name defined again as another kind refused; the broker exports the values.
func TestSDKMetrics(t *testing.T) {
	e := sdkcheck(t, nil)
	s := e.fanout(t, "sdk.metric")
	e.publish(t, "sdk.metric", "", map[string]string{"tenant": "acme"})
	wantReport(t, report(t, s.Next(t)), "define=nil", "add=nil", "set=nil", "definelabelled=nil", "setlabelled=nil", "redefine=not_allowed")
	got := map[string]int64{}
	for _, m := range e.chain.Metrics()[0].Defined {
		for _, sr := range m.Series {
			got[m.Name+"/"+sr.LabelValue] = sr.Value
		}
	}
	if got["sdk_gauge/"] != 7 || got["sdk_gauge_by_tenant/acme"] != 4 {
		t.Fatalf("defined metrics %v, want sdk_gauge 7 (added 5, then set to 7) and sdk_gauge_by_tenant{acme} 4", got)
	}
}
