package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
)

// languages are the languages whose conformance plugin must pass every row (SPEC.md).
var languages = []string{"wat", "c", "go", "rust", "assemblyscript", "zig"}

// pluginConfig is the configuration SPEC.md gives the plugin.
var pluginConfig = map[string]string{"emit_topic": "audit.copy", "mode": "conformance", "tenant": "acme"}

const configText = "emit_topic=audit.copy\nmode=conformance\ntenant=acme\n"

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// inboxLanguages are the languages whose SDK exports tb_v1_inbox (docs/ABI.md, "The inbox").
// Their plugin runs every row twice: as built, on the inbox, and with the export hidden, on
// host calls alone, as a broker that does not know the inbox would run it.
var inboxLanguages = map[string]bool{"c": true, "rust": true, "go": true, "assemblyscript": true, "zig": true}

// TestConformance builds each language's plugin with its build.sh and runs every row of
// SPEC.md against it, in the real plugin host and a real broker: TestConformance/<lang>/<row>
// as built, and TestConformance/<lang>-calls/<row> without the inbox, for the languages
// whose SDK has one. The WAT plugin has no inbox: it proves that a plugin written before the
// inbox still passes.
func TestConformance(t *testing.T) {
	for _, lang := range languages {
		var wasm []byte
		t.Run(lang, func(t *testing.T) {
			wasm = build(t, lang)
			if got := exportsInbox(wasm); got != inboxLanguages[lang] {
				t.Fatalf("the %s plugin exports tb_v1_inbox: %v; want %v", lang, got, inboxLanguages[lang])
			}
			runRows(t, wasm)
		})
		if inboxLanguages[lang] && wasm != nil {
			t.Run(lang+"-calls", func(t *testing.T) { runRows(t, withoutInbox(t, wasm)) })
		}
	}
}

func runRows(t *testing.T, wasm []byte) { runRowsOf(t, wasm, rows) }

// runRowsOf runs the rows rs of SPEC.md on the conformance plugin wasm.
func runRowsOf(t *testing.T, wasm []byte, rs []row) {
	p := load(t, wasm)
	for _, r := range rs {
		t.Run(r.name, func(t *testing.T) { r.run(t, p.env(t)) })
	}
}

// inboxName is the export that asks for the inbox, as a module's export section spells it:
// its length, then its bytes.
var inboxName = []byte("\x0btb_v1_inbox")

// batchName is tb_v1_on_publish_batch as an export section spells it.
var batchName = []byte("\x16tb_v1_on_publish_batch")

func exportsInbox(wasm []byte) bool { return bytes.Contains(wasm, inboxName) }

// withoutInbox returns wasm with its export tb_v1_inbox renamed (same length, so the module
// stays valid): the host then ignores it, and the SDK takes the host-call path.
func withoutInbox(t *testing.T, wasm []byte) []byte {
	t.Helper()
	if !exportsInbox(wasm) {
		t.Fatal("the module does not export tb_v1_inbox")
	}
	wasm = bytes.ReplaceAll(wasm, inboxName, []byte("\x0btb_v1_inbo_"))
	// Batches come through the inbox: a module that exports them without it is refused.
	return bytes.ReplaceAll(wasm, batchName, []byte("\x16tb_v1_on_publish_batc_"))
}

// inCI reports whether the test runs under CI (CI=true), where no language may be skipped.
func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// unavailable skips the language, or fails under CI.
func unavailable(t *testing.T, msg string) {
	t.Helper()
	if inCI() {
		t.Fatalf("%s; under CI every language must be built (.ci/run installs the toolchains)", msg)
	}
	t.Skip(msg)
}

// exitMissingTool is build.sh's exit status for a missing tool (SPEC.md, Layout).
const exitMissingTool = 3

// build runs the language's build.sh and returns the module.
func build(t *testing.T, lang string) []byte {
	t.Helper()
	wasm, err := os.ReadFile(buildFile(t, lang))
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// buildFile runs the language's build.sh and returns the module's file.
func buildFile(t *testing.T, lang string) string {
	t.Helper()
	dir, err := filepath.Abs(lang)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "build.sh")); err != nil {
		unavailable(t, fmt.Sprintf("%s: no sdk/conformance/%s/build.sh yet", lang, lang))
	}
	out := filepath.Join(t.TempDir(), lang+".wasm")
	cmd := exec.Command("bash", "build.sh", out)
	cmd.Dir = dir
	msg, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == exitMissingTool:
		unavailable(t, fmt.Sprintf("%s: %s", lang, bytes.TrimSpace(msg)))
	case err != nil:
		t.Fatalf("%s/build.sh: %v\n%s", lang, err, msg)
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("%s/build.sh succeeded but wrote no module: %v\n%s", lang, err, msg)
	}
	return out
}

// loaded is one language's plugin, loaded once for all its rows.
type loaded struct {
	wasm  []byte
	host  *plugins.Host
	chain *plugins.Chain
	log   *brokertest.Log
}

func spec(wasm []byte, cfg map[string]string) plugins.Spec {
	return plugins.Spec{Name: "conformance", Wasm: wasm, Config: cfg}
}

// load loads the plugin as SPEC.md says, with the host's log captured.
func load(t *testing.T, wasm []byte) *loaded {
	t.Helper()
	logs := &brokertest.Log{}
	h, err := plugins.NewHost(plugins.HostOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	c, err := h.Load(context.Background(), []plugins.Spec{spec(wasm, pluginConfig)})
	if err != nil {
		t.Fatalf("load: %v\n%s", err, logs)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return &loaded{wasm: wasm, host: h, chain: c, log: logs}
}

// env is what one row works with: a new broker with the language's plugin chain installed.
type env struct {
	*loaded
	b broker.Engine
}

func (p *loaded) env(t *testing.T) *env {
	return &env{loaded: p, b: brokertest.Start(t, brokertest.Options{Hooks: p.chain})}
}

func (e *env) subscribe(t *testing.T, o broker.SubscribeOptions) *brokertest.Sub {
	t.Helper()
	return brokertest.Subscribe(t, e.b, o)
}

func (e *env) fanout(t *testing.T, patterns ...string) *brokertest.Sub {
	return e.subscribe(t, broker.SubscribeOptions{Patterns: patterns, Mode: broker.Fanout})
}

// The consumer group of the on_ack and on_redeliver rows.
const (
	subID = "conformance-sub"
	group = "conformance-group"
)

func (e *env) member(t *testing.T) *brokertest.Sub {
	return e.subscribe(t, broker.SubscribeOptions{ID: subID, Group: group, Patterns: []string{"jobs.>"}, Mode: broker.Balanced})
}

func (e *env) groupStats(t *testing.T) broker.GroupStats {
	t.Helper()
	for _, g := range e.b.Stats().Groups {
		if g.ID == subID {
			return g
		}
	}
	t.Fatalf("no group %s in the broker's stats", subID)
	return broker.GroupStats{}
}

func (e *env) publish(t *testing.T, topic, payload string, headers map[string]string) broker.PublishResult {
	t.Helper()
	res, err := e.b.Publish(topic, []byte(payload), headers)
	if err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
	return res
}

// failures is the plugin's failure count.
func (e *env) failures(t *testing.T) uint64 {
	t.Helper()
	for _, st := range e.chain.Stats() {
		if st.Name == "conformance" {
			return st.Failures
		}
	}
	t.Fatal("the chain has no plugin conformance")
	return 0
}

// nothing checks that s holds no delivery now.
func nothing(t *testing.T, s *brokertest.Sub, what string) {
	t.Helper()
	if d, ok := s.Poll(); ok {
		t.Errorf("%s: unexpected delivery on %s: %q %v", what, d.Msg.Topic, d.Msg.Payload, d.Msg.Headers)
	}
}

// expect checks that d is exactly the message topic, payload, headers.
func expect(t *testing.T, d broker.Delivery, topic, payload string, headers map[string]string) {
	t.Helper()
	m := d.Msg
	if m.Topic != topic || string(m.Payload) != payload || !sameHeaders(m.Headers.Map(), headers) {
		t.Errorf("delivered %s %s %v\n           want %s %s %v", m.Topic, show(m.Payload), m.Headers, topic, show([]byte(payload)), headers)
	}
}

func sameHeaders(a, b map[string]string) bool { return len(a) == len(b) && maps.Equal(a, b) }

func show(p []byte) string {
	if len(p) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", p[:40], len(p))
	}
	return strconv.Quote(string(p))
}

// verdict runs the chain's on_publish directly, for what the broker does not show (a drop's
// reason).
func (e *env) verdict(t *testing.T, topic string, headers map[string]string) broker.PublishVerdict {
	t.Helper()
	d := broker.Draft{Topic: topic, Payload: []byte("p"), Headers: broker.MakeHeaders(headers)}
	v, err := e.chain.OnPublish(&d)
	if err != nil {
		t.Fatalf("on_publish %s: %v", topic, err)
	}
	return v
}

// publishUnchanged is the rows where the plugin passes the message as it is.
func publishUnchanged(topic string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		h := map[string]string{"h": "1", "other": "two"}
		if res := e.publish(t, topic, "payload", h); res.Routed != 1 {
			t.Fatalf("routed to %d, want 1", res.Routed)
		}
		expect(t, s.Next(t), topic, "payload", h)
	}
}

// message is a message's topic, payload and headers.
type message struct {
	topic, payload string
	headers        map[string]string
}

// publishedAs is the rows where the message published reaches the subscriber as want.
func publishedAs(published, want message) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		e.publish(t, published.topic, published.payload, published.headers)
		expect(t, s.Next(t), want.topic, want.payload, want.headers)
	}
}

// dropped checks that topic with headers is dropped with reason.
func dropped(t *testing.T, e *env, s *brokertest.Sub, topic string, headers map[string]string, reason string) {
	t.Helper()
	before := e.b.Stats().Dropped
	if res := e.publish(t, topic, "p", headers); res.Routed != 0 {
		t.Errorf("%s %v: routed to %d, want a drop", topic, headers, res.Routed)
	}
	if n := e.b.Stats().Dropped; n != before+1 {
		t.Errorf("%s %v: dropped count %d, want %d", topic, headers, n, before+1)
	}
	nothing(t, s, topic)
	if v := e.verdict(t, topic, headers); !v.Drop || v.Reason != reason {
		t.Errorf("%s %v: verdict %+v, want a drop with reason %q", topic, headers, v, reason)
	}
}

// redelivered publishes jobs.1 with header retry (if not empty) to a member of the group,
// and nacks its first delivery; it returns the member, the message's system_id and when it
// was nacked.
func redelivered(t *testing.T, e *env, retry string) (*brokertest.Sub, string, time.Time) {
	t.Helper()
	m := e.member(t)
	var h map[string]string
	if retry != "" {
		h = map[string]string{"retry": retry}
	}
	id := e.publish(t, "jobs.1", "job", h).SystemID
	if d := m.Next(t); d.Attempt != 1 || d.Msg.SystemID != id {
		t.Fatalf("first delivery: attempt %d of %s", d.Attempt, d.Msg.SystemID)
	}
	nacked := time.Now()
	if skipped := m.Nack([]string{id}, 0, ""); skipped != 0 {
		t.Fatal("nack skipped")
	}
	return m, id, nacked
}

// acked acks jobs.1 on its attempt-th delivery and checks what on_ack emitted.
func acked(t *testing.T, e *env, attempt uint32) {
	acks := e.fanout(t, "c.acked")
	m := e.member(t)
	id := e.publish(t, "jobs.1", "job", nil).SystemID
	d := m.Next(t)
	for d.Attempt < attempt {
		m.Nack([]string{id}, 0, "")
		d = m.Next(t)
	}
	if d.Attempt != attempt {
		t.Fatalf("delivery attempt %d, want %d", d.Attempt, attempt)
	}
	if skipped := m.Ack([]string{id}); skipped != 0 {
		t.Fatal("ack skipped")
	}
	expect(t, acks.Next(t), "c.acked", fmt.Sprintf("%s|%s|%d|%s", subID, group, attempt, id), map[string]string{"in_flight": "yes"})
}

type row struct {
	name string
	run  func(*testing.T, *env)
}

// since are the rows added to SPEC.md after 5bfe240, by the change that added them: the
// plugins built then (TestBuiltAt5bfe240) do not have them.
var since = map[string]string{"key": "ordering keys (issue 27)", "kv": "plugin state (issue 30)", "metric": "plugin metrics (issue 30)", "tick": "plugin ticks (issue 30)"}

// rows are SPEC.md's rows, by the names it gives them.
var rows = []row{
	{"pass", publishUnchanged("c.pass")},
	{"drop", func(t *testing.T, e *env) {
		dropped(t, e, e.fanout(t, ">"), "c.drop", nil, "dropped by conformance")
	}},
	{"reject", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		_, err := e.b.Publish("c.reject", []byte("p"), map[string]string{"why": "nope"})
		var rej *broker.RejectError
		if !errors.As(err, &rej) {
			t.Fatalf("publish: %v, want a rejection", err)
		}
		if rej.Code != 7 || rej.Reason != "rejected: nope" || rej.Plugin != "conformance" {
			t.Errorf("rejected by %q with code %d and reason %q, want conformance, 7 (PERMISSION_DENIED), %q", rej.Plugin, rej.Code, rej.Reason, "rejected: nope")
		}
		nothing(t, s, "rejected")
	}},
	{"retopic", publishedAs(
		message{"c.retopic", "payload", map[string]string{"h": "1"}},
		message{"c.retopic.done", "payload", map[string]string{"h": "1"}})},
	{"headers", publishedAs(
		message{"c.headers", "payload", map[string]string{"changed": "old", "removed": "x", "kept": "k"}},
		message{"c.headers", "payload", map[string]string{"added": "1", "changed": "new", "kept": "k"}})},
	{"enum", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		h := map[string]string{"b": "2", "a": "1", "c-long": "three", "empty": ""}
		e.publish(t, "c.enum", "payload", h)
		expect(t, s.Next(t), "c.enum", "a=1,b=2,c-long=three,empty=", h)
		e.publish(t, "c.enum", "payload", nil)
		expect(t, s.Next(t), "c.enum", "", nil)
	}},
	{"payload", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		in := make([]byte, 40000)
		for i := range in {
			in[i] = byte('a' + i%26 + i/1000%2*('A'-'a')) // not periodic in any SDK's buffer size
		}
		e.publish(t, "c.payload", string(in), nil)
		expect(t, s.Next(t), "c.payload", string(in)+string(in), nil)
	}},
	{"empty", publishedAs(
		message{"c.empty", "x", map[string]string{"h": "1"}},
		message{"c.empty", "", map[string]string{"h": "1"}})},
	{"emit", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		e.publish(t, "c.emit", "orig", map[string]string{"h": "1"})
		expect(t, s.Next(t), "c.emit", "orig", map[string]string{"h": "1"})
		expect(t, s.Next(t), "audit.copy", "orig", map[string]string{"origin": "c.emit"})
		expect(t, s.Next(t), "c.emit.second", "2", map[string]string{"n": "2"})
		nothing(t, s, "after the emits")
	}},
	{"config", publishedAs(
		message{"c.config", "payload", nil},
		message{"c.config", "acme|" + configText, nil})},
	{"log", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		e.publish(t, "c.log", "hello", nil)
		expect(t, s.Next(t), "c.log", "hello", nil)
		line := e.log.WaitFor(t, "conformance log: hello")
		if !strings.Contains(line, "[WARN]") || !strings.Contains(line, "conformance") {
			t.Errorf("log line %q, want a warning of the plugin conformance", line)
		}
	}},
	{"tenant", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		e.publish(t, "c.tenant", "p", map[string]string{"tenant": "acme"})
		expect(t, s.Next(t), "c.tenant", "p", map[string]string{"tenant": "acme"})
		dropped(t, e, s, "c.tenant", map[string]string{"tenant": "globex"}, "wrong tenant")
		dropped(t, e, s, "c.tenant", map[string]string{"tenant": "acm"}, "wrong tenant")
		dropped(t, e, s, "c.tenant", nil, "wrong tenant")
	}},
	{"trap", func(t *testing.T, e *env) {
		s := e.fanout(t, ">")
		before := e.failures(t)
		h := map[string]string{"h": "1"}
		if res := e.publish(t, "c.trap", "payload", h); res.Routed != 1 {
			t.Errorf("routed to %d; fail_open should pass the message", res.Routed)
		}
		expect(t, s.Next(t), "c.trap", "payload", h)
		if n := e.failures(t); n != before+1 {
			t.Errorf("failures %d, want %d", n, before+1)
		}
		e.log.WaitFor(t, "plugin call failed")
		// The plugin still works: the failed instance was replaced.
		e.publish(t, "c.pass", "after", nil)
		expect(t, s.Next(t), "c.pass", "after", nil)
	}},
	{"key", keyRow},
	{"kv", kvRow},
	{"metric", metricRow},
	{"tick", tickRow},
	{"other", publishUnchanged("c.pass.x")},
	{"init_refuse", func(t *testing.T, e *env) {
		cfg := maps.Clone(pluginConfig)
		cfg["refuse"] = "bad config"
		c, err := e.host.Load(context.Background(), []plugins.Spec{spec(e.wasm, cfg)})
		if err == nil {
			c.Close(context.Background())
			t.Fatal("loaded with refuse set")
		}
		if !strings.Contains(err.Error(), "refused: bad config") {
			t.Errorf("load error %q does not give tb_v1_init's reason %q", err, "refused: bad config")
		}
	}},
	{"ack", func(t *testing.T, e *env) { acked(t, e, 1) }},
	{"ack_after_nack", func(t *testing.T, e *env) { acked(t, e, 2) }},
	{"redeliver_delay", func(t *testing.T, e *env) {
		m, _, nacked := redelivered(t, e, "delay")
		d := m.Next(t)
		if took := time.Since(nacked); took < 50*time.Millisecond {
			t.Errorf("redelivered after %v, want a delay of 50ms", took)
		}
		if d.Attempt != 2 {
			t.Errorf("attempt %d, want 2", d.Attempt)
		}
		expect(t, d, "jobs.1", "job", map[string]string{"retry": "delay", "reason": "nack", "delayed": "1"})
	}},
	{"redeliver_dead_letter", func(t *testing.T, e *env) {
		dlq := e.fanout(t, "dlq.>")
		m, id, _ := redelivered(t, e, "dead")
		d := dlq.Next(t)
		h := d.Msg.Headers
		if d.Msg.Topic != "dlq."+subID || string(d.Msg.Payload) != "job" || h.Map()["retry"] != "dead" || h.Map()["reason"] != "nack" ||
			h.Map()[deadletter.HeaderReason] != "conformance dead-letter" || h.Map()[deadletter.HeaderSystemID] != id {
			t.Errorf("dead letter %s %q %v", d.Msg.Topic, d.Msg.Payload, h)
		}
		if g := e.groupStats(t); g.DeadLettered != 1 || g.Queued+g.InFlight+g.Delayed != 0 {
			t.Errorf("group %+v, want one dead letter and nothing left", g)
		}
		nothing(t, m, "dead-lettered")
	}},
	{"redeliver_drop", func(t *testing.T, e *env) {
		dlq := e.fanout(t, "dlq.>")
		m, _, _ := redelivered(t, e, "drop")
		brokertest.Eventually(t, "the drop", func() bool { return e.groupStats(t).Dropped != 0 })
		if g := e.groupStats(t); g.Dropped != 1 || g.DeadLettered != 0 || g.Queued+g.InFlight+g.Delayed != 0 {
			t.Errorf("group %+v, want one dropped message and nothing left", g)
		}
		nothing(t, m, "dropped")
		nothing(t, dlq, "dropped")
	}},
	{"redeliver_default", func(t *testing.T, e *env) {
		m, _, _ := redelivered(t, e, "")
		d := m.Next(t)
		if d.Attempt != 2 {
			t.Errorf("attempt %d, want 2", d.Attempt)
		}
		expect(t, d, "jobs.1", "job", map[string]string{"reason": "nack", "attempt-seen": "1"})
	}},
}

// The SDKs with an inbox read the message from it and write through its write list: after a
// first call (which reads the config values the rows need, kept for the instance's life), the
// conformance plugin's rows that read and change the message make no host call.
func TestInboxMakesNoHostCall(t *testing.T) {
	for _, lang := range languages {
		if !inboxLanguages[lang] {
			continue
		}
		t.Run(lang, func(t *testing.T) {
			h, err := plugins.NewHost(plugins.HostOptions{CountHostCalls: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close(context.Background()) })
			c, err := h.Load(context.Background(), []plugins.Spec{{Name: "conformance", Wasm: build(t, lang), Config: pluginConfig, PoolSize: 1}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })
			publish := func(topic string, headers map[string]string) {
				d := broker.Draft{Topic: topic, Payload: []byte("p"), Headers: broker.MakeHeaders(headers)}
				if _, err := c.OnPublish(&d); err != nil {
					t.Fatalf("%s: %v", topic, err)
				}
			}
			publish("c.tenant", map[string]string{"tenant": "acme"}) // reads config "tenant" once
			before := c.Stats()[0].HostCalls
			for _, topic := range []string{"c.pass", "c.drop", "c.headers", "c.enum", "c.payload", "c.empty", "c.tenant", "c.other"} {
				publish(topic, map[string]string{"tenant": "acme", "changed": "old", "removed": "x"})
			}
			if st := c.Stats()[0]; st.HostCalls != before || st.Failures != 0 {
				t.Errorf("%d host calls for 8 messages (want 0), %d failures", st.HostCalls-before, st.Failures)
			}
		})
	}
}

// keyRow is SPEC.md's row key: the message's key read (key-was), the key set from the tenant
// header (or removed without it) and given, prefixed, to an emit; a tenant that cannot be a
// key rejects the publish.
func keyRow(t *testing.T, e *env) {
	s := e.fanout(t, ">")
	publish := func(key string, h map[string]string) error {
		res, errs := make([]broker.PublishResult, 1), make([]error, 1)
		e.b.PublishBatch([]broker.Draft{{Topic: "c.key", Payload: []byte("p"), Headers: broker.MakeHeaders(h), Key: key}}, res, errs)
		return errs[0]
	}
	for _, c := range []struct{ key, tenant, want string }{{"pub", "acme", "acme"}, {"pub", "", ""}, {"", "t2", "t2"}} {
		h := map[string]string{"tenant": c.tenant}
		if c.tenant == "" {
			h = nil
		}
		if err := publish(c.key, h); err != nil {
			t.Fatalf("key %q tenant %q: %v", c.key, c.tenant, err)
		}
		d := s.Next(t)
		want := maps.Clone(h)
		if want == nil {
			want = map[string]string{}
		}
		want["key-was"] = c.key
		expect(t, d, "c.key", "p", want)
		if d.Msg.Key != c.want {
			t.Errorf("key %q tenant %q: delivered with key %q, want %q", c.key, c.tenant, d.Msg.Key, c.want)
		}
		d = s.Next(t)
		expect(t, d, "c.key.emitted", "", nil)
		if d.Msg.Key != "e-"+c.tenant {
			t.Errorf("tenant %q: emitted with key %q, want %q", c.tenant, d.Msg.Key, "e-"+c.tenant)
		}
	}
	for _, tenant := range []string{"a\tb", strings.Repeat("k", 257)} {
		err := publish("pub", map[string]string{"tenant": tenant})
		var rej *broker.RejectError
		if !errors.As(err, &rej) || rej.Code != 3 || rej.Reason != "key refused" {
			t.Errorf("tenant %.20q: %v, want a rejection with code 3 (INVALID_ARGUMENT) and reason %q", tenant, err, "key refused")
		}
	}
	nothing(t, s, "after the rejected keys")
}

// kvRow is SPEC.md's row kv: compare-and-set, get, set and delete in the plugin's store.
func kvRow(t *testing.T, e *env) {
	s := e.fanout(t, ">")
	k := map[string]string{"k": "a"}
	withOld := map[string]string{"k": "a", "old": "1"}
	e.publish(t, "c.kv.del", "gone", k) // set, then deleted: absent
	expect(t, s.Next(t), "c.kv.del", "gone", k)
	e.publish(t, "c.kv", "1", k) // absent: created
	expect(t, s.Next(t), "c.kv", "1", k)
	dropped(t, e, s, "c.kv", k, "kv refused") // present: an empty old refused
	big := make([]byte, 40000)                // more than any SDK's first buffer
	for i := range big {
		big[i] = byte('a' + i%26 + i/1000%2*('A'-'a'))
	}
	e.publish(t, "c.kv", string(big), withOld) // 1 -> big, read back whole
	expect(t, s.Next(t), "c.kv", string(big), withOld)
	dropped(t, e, s, "c.kv", withOld, "kv refused") // no longer 1
	e.publish(t, "c.kv.del", "x", k)
	expect(t, s.Next(t), "c.kv.del", "x", k)
	e.publish(t, "c.kv", "4", k) // deleted: created again
	expect(t, s.Next(t), "c.kv", "4", k)
}
