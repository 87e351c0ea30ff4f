package plugintest_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/plugins/plugintest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(removeExamples)) }

// fixture is one of the host's hand-written WAT plugins (plugins/testdata): fast to load,
// no Go build needed.
func fixture(name string) string {
	return filepath.Join("..", "testdata", name+".wasm")
}

// examplePkgs are the example plugins these tests run, one for each hook (internal/e2e
// tests every example in a broker).
var examplePkgs = []string{"tenant-filter", "retry-backoff", "audit"}

var examples struct {
	once sync.Once
	dir  string
	err  error
}

// removeExamples is TestMain's cleanup, once the tests are done: it removes the example
// plugins' directory, then exits with the tests' code.
func removeExamples(code int) {
	os.RemoveAll(examples.dir)
	os.Exit(code)
}

// example returns the module of the example plugin name, building all of them with BuildTo
// the first time, and compiling them into the cache at once rather than one after the
// other as the tests load them (seconds each under the race detector). It skips the test
// under -short.
func example(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds Go plugins with GOOS=wasip1 GOARCH=wasm (several seconds); skipped under -short")
	}
	examples.once.Do(func() {
		if examples.dir, examples.err = os.MkdirTemp("", "plugintest-"); examples.err != nil {
			return
		}
		var wg sync.WaitGroup
		errs := make([]error, len(examplePkgs))
		for i, n := range examplePkgs {
			wg.Go(func() {
				file := filepath.Join(examples.dir, n+".wasm")
				if errs[i] = plugintest.BuildTo("github.com/tinybroker/tinybroker/examples/plugins/"+n, file); errs[i] != nil {
					return
				}
				// Compiling comes first: the load may fail after it (tb_v1_init wants its config).
				if p, err := plugintest.New(file, nil, plugintest.Options{}); err == nil {
					p.Close()
				}
			})
		}
		wg.Wait()
		examples.err = errors.Join(errs...)
	})
	if examples.err != nil {
		t.Fatal(examples.err)
	}
	return filepath.Join(examples.dir, name+".wasm")
}

func TestPublish(t *testing.T) {
	p := plugintest.Load(t, fixture("good"), map[string]string{"to": "rerouted.here"})
	if p.Name() != "good" {
		t.Errorf("name %q, want good (from the file name)", p.Name())
	}

	r := p.Publish(plugintest.Message{Topic: "orders.1", Payload: []byte("x"), Headers: map[string]string{"tenant": "acme"}})
	if r.Err != nil || r.Verdict != plugintest.Pass || r.Topic != "orders.1" || string(r.Payload) != "x" ||
		len(r.Headers) != 2 || r.Headers["tenant"] != "acme" || r.Headers["filtered"] != "yes" {
		t.Errorf("tenant acme: %+v", r)
	}
	if len(r.Emitted) != 1 || r.Emitted[0].Topic != "audit.copy" || string(r.Emitted[0].Payload) != "acme" {
		t.Errorf("tenant acme emitted %v, want one copy on audit.copy", r.Emitted)
	}

	r = p.Publish(plugintest.Message{Topic: "orders.1", Headers: map[string]string{"tenant": "evil"}})
	if r.Err != nil || r.Verdict != plugintest.Reject || r.Code != 7 || r.Reason != "evil tenant" || r.Emitted != nil {
		t.Errorf("tenant evil: %+v, want a rejection with code 7", r)
	}
	r = p.Publish(plugintest.Message{Topic: "orders.1", Headers: map[string]string{"tenant": "initech"}})
	if r.Err != nil || r.Verdict != plugintest.Drop || r.Reason != "not on the allow-list" {
		t.Errorf("tenant initech: %+v, want a drop", r)
	}
	r = p.Publish(plugintest.Message{Topic: "reroute.me"})
	if r.Err != nil || r.Verdict != plugintest.Pass || r.Topic != "rerouted.here" {
		t.Errorf("reroute.me: %+v, want rerouted.here", r)
	}

	// Messages the broker refuses before any plugin sees them.
	for _, m := range []plugintest.Message{{Topic: ""}, {Topic: "a..b"}, {Topic: "big", Payload: make([]byte, 1<<20+1)}} {
		if r := p.Publish(m); r.Err == nil || !strings.Contains(r.Err.Error(), "the broker would refuse") {
			t.Errorf("publishing to %q (%d bytes): %v", m.Topic, len(m.Payload), r.Err)
		}
	}
	if st := p.Stats(); st.Calls != 4 || st.Failures != 0 {
		t.Errorf("stats %+v, want 4 calls, no failure", st)
	}
}

func TestAckAndRedeliver(t *testing.T) {
	p := plugintest.Load(t, fixture("good"), nil)
	msg := plugintest.Message{Topic: "jobs.1", Payload: []byte("job"), Headers: map[string]string{"k": "v"}}

	a := p.Ack(plugintest.AckEvent{Message: msg, Event: plugintest.Event{ID: "abc-1"}})
	if a.Err != nil || len(a.Emitted) != 1 || a.Emitted[0].Topic != "audit.acks" || string(a.Emitted[0].Payload) != "abc-1" {
		t.Errorf("ack: %+v, want the id emitted to audit.acks", a)
	}
	if a := p.Ack(plugintest.AckEvent{Message: msg}); a.Err != nil || len(a.Emitted) != 1 || string(a.Emitted[0].Payload) != "test-2" {
		t.Errorf("ack without an id: %+v, want a made-up id", a)
	}

	r := p.Redeliver(plugintest.RedeliverEvent{Message: msg, Event: plugintest.Event{Attempt: 1}})
	if r.Err != nil || r.Action != plugintest.Delay || r.Delay != 50*time.Millisecond ||
		len(r.Headers) != 2 || r.Headers["k"] != "v" || r.Headers["retried"] != "yes" {
		t.Errorf("attempt 1: %+v, want a delay of 50ms with retried=yes", r)
	}
	if msg.Headers["retried"] != "" {
		t.Error("Redeliver changed the event's headers")
	}
	r = p.Redeliver(plugintest.RedeliverEvent{Message: msg, Event: plugintest.Event{Attempt: 2}})
	if r.Err != nil || r.Action != plugintest.DeadLetter || r.Reason != "gave up" || r.Headers["retried"] != "yes" {
		t.Errorf("attempt 2: %+v, want a dead letter", r)
	}
	if r := p.Redeliver(plugintest.RedeliverEvent{Message: plugintest.Message{Topic: "bad topic"}}); r.Err == nil {
		t.Error("a redelivery with an invalid topic: no error")
	}
}

func TestFailures(t *testing.T) {
	msg := plugintest.Message{Topic: "orders.1", Payload: []byte("x")}

	// fail_closed, the default: the publish is refused and the failure reported.
	p := plugintest.Load(t, fixture("trap"), nil)
	r := p.Publish(msg)
	if r.Verdict != plugintest.Failed || r.Code != 14 || r.Err == nil || !strings.Contains(r.Err.Error(), "unreachable") {
		t.Errorf("trap, fail_closed: %s %d %v", r.Verdict, r.Code, r.Err)
	}
	if r.Topic != "orders.1" {
		t.Errorf("the trapping call's topic change stuck: %s", r.Topic)
	}
	if !logged(p, "plugin call failed") {
		t.Errorf("the failure is not in the logs:\n%s", strings.Join(p.Logs(), "\n"))
	}
	// The breaker never opens: every call reaches the plugin.
	for range 6 {
		p.Publish(msg)
	}
	if st := p.Stats(); st.Calls != 7 || st.Failures != 7 || st.BreakerOpen {
		t.Errorf("stats %+v, want 7 calls failed and the breaker closed", st)
	}
	// A hook the plugin does not have.
	if a := p.Ack(plugintest.AckEvent{Message: msg}); !errors.Is(a.Err, plugintest.ErrNoHook) {
		t.Errorf("ack on a plugin without on_ack: %v", a.Err)
	}
	// on_redeliver traps too: fail_closed redelivers as after a nack.
	if r := p.Redeliver(plugintest.RedeliverEvent{Message: msg}); r.Err == nil || errors.Is(r.Err, plugintest.ErrNoHook) || r.Action != plugintest.Redeliver {
		t.Errorf("trapping redeliver: %s %v", r.Action, r.Err)
	}

	// fail_open: the message passes unchanged, and the failure is still reported.
	p = plugintest.LoadWith(t, fixture("trap"), nil, plugintest.Options{FailurePolicy: "fail_open"})
	if r := p.Publish(msg); r.Verdict != plugintest.Pass || r.Topic != "orders.1" || r.Err == nil {
		t.Errorf("trap, fail_open: %s %s %v", r.Verdict, r.Topic, r.Err)
	}
	// dead_letter: it goes to dlq.plugin.<name>.
	p = plugintest.LoadWith(t, fixture("badverdict"), nil, plugintest.Options{FailurePolicy: "dead_letter", Name: "bv"})
	if r := p.Publish(msg); r.Verdict != plugintest.Pass || r.Topic != "dlq.plugin.bv" || r.Err == nil || !strings.Contains(r.Err.Error(), "malformed verdict") {
		t.Errorf("badverdict, dead_letter: %s %s %v", r.Verdict, r.Topic, r.Err)
	}
	if r := p.Redeliver(plugintest.RedeliverEvent{Message: msg}); !errors.Is(r.Err, plugintest.ErrNoHook) || r.Action != plugintest.Redeliver {
		t.Errorf("redeliver on a plugin without on_redeliver: %s %v", r.Action, r.Err)
	}
	// The call time limit.
	p = plugintest.LoadWith(t, fixture("loop"), nil, plugintest.Options{CallTimeout: 50 * time.Millisecond})
	start := time.Now()
	if r := p.Publish(msg); r.Verdict != plugintest.Failed || r.Err == nil {
		t.Errorf("loop: %s %v", r.Verdict, r.Err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the looping call took %v", took)
	}
}

func TestNew(t *testing.T) {
	if _, err := plugintest.New(fixture("initfail"), nil, plugintest.Options{}); err == nil || !strings.Contains(err.Error(), "config key allow is missing") {
		t.Errorf("initfail: %v, want tb_v1_init's reason", err)
	}
	if _, err := plugintest.New(fixture("nomarker"), nil, plugintest.Options{}); err == nil || !strings.Contains(err.Error(), "not a tinybroker plugin") {
		t.Errorf("nomarker: %v", err)
	}
	if _, err := plugintest.New(fixture("good"), nil, plugintest.Options{FailurePolicy: "maybe"}); err == nil {
		t.Error("failure policy maybe: no error")
	}
	if _, err := plugintest.New(fixture("good"), nil, plugintest.Options{LogLevel: "loud"}); err == nil {
		t.Error("log level loud: no error")
	}
	p, err := plugintest.New(fixture("good"), nil, plugintest.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if r := p.Publish(plugintest.Message{Topic: "a"}); r.Err == nil {
		t.Error("Publish after Close: no error")
	}
}

// The example plugins, built from source.

func TestTenantFilter(t *testing.T) {
	p := plugintest.Load(t, example(t, "tenant-filter"), map[string]string{"allow": "acme, globex"})
	for tenant, want := range map[string]plugintest.Verdict{"acme": plugintest.Pass, "globex": plugintest.Pass, "evil": plugintest.Drop, "": plugintest.Drop} {
		h := map[string]string{"tenant": tenant}
		if tenant == "" {
			h = nil
		}
		if r := p.Publish(plugintest.Message{Topic: "orders.1", Headers: h}); r.Err != nil || r.Verdict != want {
			t.Errorf("tenant %q: %s %v, want %s", tenant, r.Verdict, r.Err, want)
		}
	}
	if r := p.Publish(plugintest.Message{Topic: "orders.1", Headers: map[string]string{"tenant": "evil"}}); r.Reason != "tenant evil is not allowed" {
		t.Errorf("drop reason %q", r.Reason)
	}

	if a := p.Ack(plugintest.AckEvent{Message: plugintest.Message{Topic: "orders.1"}}); !errors.Is(a.Err, plugintest.ErrNoHook) {
		t.Errorf("Ack on an on_publish plugin: %v", a.Err)
	}

	if _, err := plugintest.New(example(t, "tenant-filter"), nil, plugintest.Options{}); err == nil || !strings.Contains(err.Error(), `set "allow"`) {
		t.Errorf("no allow-list: %v", err)
	}
	// What the plugin logs.
	var lines []string
	p = plugintest.LoadWith(t, example(t, "tenant-filter"), map[string]string{"allow": ""},
		plugintest.Options{LogOutput: func(l string) { lines = append(lines, l) }})
	if !logged(p, "[WARN]  tenant-filter: tenant-filter: the allow-list is empty") || !slices.Equal(lines, p.Logs()) {
		t.Errorf("logs:\n%s\nLogOutput got:\n%s", strings.Join(p.Logs(), "\n"), strings.Join(lines, "\n"))
	}
}

// logged reports whether a line of p's log has s in it.
func logged(p *plugintest.Plugin, s string) bool {
	return slices.ContainsFunc(p.Logs(), func(l string) bool { return strings.Contains(l, s) })
}

func TestRetryBackoff(t *testing.T) {
	p := plugintest.Load(t, example(t, "retry-backoff"), map[string]string{"base": "40ms", "max_delay": "60ms", "max_attempts": "3"})
	msg := plugintest.Message{Topic: "jobs.1"}
	for attempt, want := range map[int]time.Duration{1: 40 * time.Millisecond, 2: 60 * time.Millisecond} {
		r := p.Redeliver(plugintest.RedeliverEvent{Message: msg, Event: plugintest.Event{Group: "workers", Attempt: attempt}})
		if r.Err != nil || r.Action != plugintest.Delay || r.Delay != want {
			t.Errorf("attempt %d: %s %v %v, want a delay of %v", attempt, r.Action, r.Delay, r.Err, want)
		}
	}
	r := p.Redeliver(plugintest.RedeliverEvent{Message: msg, Event: plugintest.Event{Attempt: 3}, Reason: "ack deadline exceeded"})
	if r.Err != nil || r.Action != plugintest.DeadLetter || r.Reason != "retry-backoff: gave up after 3 attempts; last failure: ack deadline exceeded" {
		t.Errorf("attempt 3: %+v, want a dead letter", r)
	}
	if r := p.Publish(msg); !errors.Is(r.Err, plugintest.ErrNoHook) {
		t.Errorf("Publish on an on_redeliver plugin: %v", r.Err)
	}
}

func TestAudit(t *testing.T) {
	p := plugintest.Load(t, example(t, "audit"), nil)
	a := p.Ack(plugintest.AckEvent{Message: plugintest.Message{Topic: "jobs.thumb.1", Payload: []byte("cat.jpg")},
		Event: plugintest.Event{ID: "5f3a9c01-7", Group: "resizers", Subscription: "thumbs", Attempt: 2}, InFlight: 20 * time.Millisecond})
	if a.Err != nil || len(a.Emitted) != 1 {
		t.Fatalf("ack: %+v, want one record", a)
	}
	rec := a.Emitted[0]
	if want := "group=resizers subscription=thumbs id=5f3a9c01-7 topic=jobs.thumb.1 attempt=2 in_flight_ms=20"; rec.Topic != "audit.acks" || string(rec.Payload) != want {
		t.Errorf("record %s %q, want audit.acks %q", rec.Topic, rec.Payload, want)
	}
	if rec.Headers["audit-group"] != "resizers" || rec.Headers["audit-attempt"] != "2" || rec.Headers["audit-in-flight-ms"] != "20" {
		t.Errorf("record headers %v", rec.Headers)
	}
}

// Build builds into the test's temporary directory; a relative package is resolved in the
// test's directory.
func TestBuild(t *testing.T) {
	example(t, "audit") // skips under -short; the same module is in the cache
	path := plugintest.Build(t, "../../examples/plugins/audit")
	if filepath.Base(path) != "audit.wasm" {
		t.Errorf("built %s, want audit.wasm", path)
	}
	p := plugintest.Load(t, path, nil)
	if p.Name() != "audit" {
		t.Errorf("name %q", p.Name())
	}
	if a := p.Ack(plugintest.AckEvent{Message: plugintest.Message{Topic: "jobs.1"}}); a.Err != nil || len(a.Emitted) != 1 {
		t.Errorf("built plugin: %+v", a)
	}
}

// A message's key goes in and comes out: the key the plugin sets (keytenant: from the tenant
// header), its emits' keys, the key on_ack reads; a key the broker would refuse is refused
// before the plugin runs.
func TestKeys(t *testing.T) {
	p := plugintest.Load(t, fixture("keytenant"), nil)
	r := p.Publish(plugintest.Message{Topic: "orders.1", Headers: map[string]string{"tenant": "acme"}, Key: "mine"})
	if r.Err != nil || r.Verdict != plugintest.Pass || r.Key != "acme" || r.Headers["key-was"] != "mine" ||
		len(r.Emitted) != 1 || r.Emitted[0].Key != "acme" {
		t.Errorf("publish: %+v, want the key acme, and mine read by the plugin", r)
	}
	if r := p.Publish(plugintest.Message{Topic: "orders.1", Key: "a\nb"}); r.Err == nil || !strings.Contains(r.Err.Error(), "control character") {
		t.Errorf("publish with an invalid key: %v", r.Err)
	}
	a := p.Ack(plugintest.AckEvent{Message: plugintest.Message{Topic: "orders.1", Key: "acme"}})
	if a.Err != nil || len(a.Emitted) != 1 || string(a.Emitted[0].Payload) != "acme" || a.Emitted[0].Key != "acme" {
		t.Errorf("ack: %+v, want the key emitted, keyed", a)
	}
}
