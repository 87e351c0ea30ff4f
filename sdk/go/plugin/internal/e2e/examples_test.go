package e2e_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/plugins"
)

func TestTenantFilter(t *testing.T) {
	e := start(t, plugins.Spec{Name: "tenant-filter", Wasm: wasm(t, "tenant-filter"),
		Config: map[string]string{"allow": "acme, globex"}})
	s := e.fanout(t, ">")
	for _, tc := range []struct {
		tenant string
		routed bool
	}{{"acme", true}, {"globex", true}, {"initech", false}, {"", false}, {"ACME", false}} {
		h := map[string]string{"tenant": tc.tenant}
		if tc.tenant == "" {
			h = nil
		}
		if res := e.publish(t, "orders.created", tc.tenant, h); (res.Routed == 1) != tc.routed {
			t.Errorf("tenant %q: routed to %d", tc.tenant, res.Routed)
		}
		if tc.routed {
			if d := s.Next(t); string(d.Msg.Payload) != tc.tenant {
				t.Errorf("delivered %q, want %q", d.Msg.Payload, tc.tenant)
			}
		}
	}
	if st := e.b.Stats(); st.Dropped != 3 {
		t.Errorf("dropped %d, want 3", st.Dropped)
	}
	s.None(t, 10*time.Millisecond)

	_, _, err := load(t, plugins.Spec{Name: "tenant-filter", Wasm: wasm(t, "tenant-filter")})
	if err == nil || !strings.Contains(err.Error(), `set "allow"`) {
		t.Errorf("loading without allow: %v", err)
	}
}

func TestContentRouter(t *testing.T) {
	e := start(t, plugins.Spec{Name: "content-router", Wasm: wasm(t, "content-router"), Topics: []string{"orders.*"}})
	s := e.fanout(t, "orders.>")
	for _, tc := range []struct {
		topic    string
		priority string
		want     string
	}{
		{"orders.created", "high", "orders.priority.created"},
		{"orders.created", "low", "orders.created"},
		{"orders.created", "", "orders.created"},
		{"orders.eu.created", "high", "orders.eu.created"}, // not orders.X
	} {
		var h map[string]string
		if tc.priority != "" {
			h = map[string]string{"priority": tc.priority}
		}
		e.publish(t, tc.topic, "order", h)
		if d := s.Next(t); d.Msg.Topic != tc.want || d.Msg.Headers.Map()["priority"] != tc.priority {
			t.Errorf("%s priority=%q went to %s %v, want %s", tc.topic, tc.priority, d.Msg.Topic, d.Msg.Headers, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	e := start(t, plugins.Spec{Name: "redact", Wasm: wasm(t, "redact"), Topics: []string{"users.>"},
		Config: map[string]string{"fields": "password, ssn"}})
	s := e.fanout(t, "users.>")
	e.publish(t, "users.created", `{"name":"ann","password":"hunter2","ssn":"078-05-1120","prefs":{"password":"kept"}}`, nil)
	if got, want := string(s.Next(t).Msg.Payload), `{"name":"ann","password":"[REDACTED]","ssn":"[REDACTED]","prefs":{"password":"kept"}}`; got != want {
		t.Errorf("redacted to %s, want %s", got, want)
	}
	e.publish(t, "users.created", `{"name":"bob"}`, nil)
	if got := string(s.Next(t).Msg.Payload); got != `{"name":"bob"}` {
		t.Errorf("payload with nothing to redact became %s", got)
	}

	_, err := e.b.Publish("users.created", []byte("not json"), nil)
	var rej *broker.RejectError
	if !errors.As(err, &rej) || rej.Code != 3 || !strings.Contains(rej.Reason, "not a JSON object") {
		t.Errorf("publishing non-JSON: %v, want a rejection with INVALID_ARGUMENT", err)
	}
	s.None(t, 10*time.Millisecond)

	e2 := start(t, plugins.Spec{Name: "redact", Wasm: wasm(t, "redact"),
		Config: map[string]string{"fields": "password", "invalid": "pass"}})
	s2 := e2.fanout(t, ">")
	e2.publish(t, "logs", "not json", nil)
	if got := string(s2.Next(t).Msg.Payload); got != "not json" {
		t.Errorf("invalid=pass delivered %q", got)
	}

	for cfg, want := range map[string]string{"": `set "fields"`, "maybe": `invalid = "maybe"`} {
		c := map[string]string{"fields": "a", "invalid": cfg}
		if cfg == "" {
			c = nil
		}
		if _, _, err := load(t, plugins.Spec{Name: "redact", Wasm: wasm(t, "redact"), Config: c}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("loading with config %v: %v, want an error mentioning %s", c, err, want)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	e := start(t, plugins.Spec{Name: "retry-backoff", Wasm: wasm(t, "retry-backoff"), Groups: []string{"workers"},
		Config: map[string]string{"base": "40ms", "max_delay": "60ms", "max_attempts": "3"}})
	dlq := e.fanout(t, "dlq.>")
	m := e.subscribe(t, broker.SubscribeOptions{ID: "jobs", Group: "workers", Patterns: []string{"jobs.*"}, Mode: broker.Balanced})
	res := e.publish(t, "jobs.1", "job", nil)
	id := res.SystemID
	if d := m.Next(t); d.Attempt != 1 {
		t.Fatalf("first delivery: attempt %d", d.Attempt)
	}
	// Attempt 1 fails: retried after base = 40ms; attempt 2: after 80ms capped at 60ms.
	for _, want := range []struct {
		attempt uint32
		delay   time.Duration
	}{{2, 40 * time.Millisecond}, {3, 60 * time.Millisecond}} {
		nacked := time.Now()
		m.Nack([]string{id}, 0, "")
		d := m.Next(t)
		if took := time.Since(nacked); d.Attempt != want.attempt || took < want.delay {
			t.Errorf("redelivery: attempt %d after %v, want attempt %d after at least %v", d.Attempt, took, want.attempt, want.delay)
		}
	}
	// Attempt 3 fails: max_attempts used up.
	m.Nack([]string{id}, 0, "")
	d := dlq.Next(t)
	if d.Msg.Topic != "dlq.jobs" || !strings.Contains(d.Msg.Headers.Map()[deadletter.HeaderReason], "gave up after 3 attempts") {
		t.Errorf("dead letter on %s with headers %v", d.Msg.Topic, d.Msg.Headers)
	}

	if _, _, err := load(t, plugins.Spec{Name: "retry-backoff", Wasm: wasm(t, "retry-backoff"),
		Config: map[string]string{"base": "soon"}}); err == nil || !strings.Contains(err.Error(), "base") {
		t.Errorf("loading with a bad base: %v", err)
	}
}

func TestAudit(t *testing.T) {
	e := start(t, plugins.Spec{Name: "audit", Wasm: wasm(t, "audit"), Groups: []string{"resizers"}})
	audit := e.fanout(t, "audit.>")
	m := e.subscribe(t, broker.SubscribeOptions{ID: "thumbs", Group: "resizers", Patterns: []string{"jobs.thumb.*"}, Mode: broker.Balanced})
	res := e.publish(t, "jobs.thumb.1", "cat.jpg", nil)
	id := res.SystemID
	m.Next(t)
	time.Sleep(5 * time.Millisecond)
	if skipped := m.Ack([]string{id}); skipped != 0 {
		t.Fatal("ack skipped")
	}
	d := audit.Next(t)
	if d.Msg.Topic != "audit.acks" {
		t.Fatalf("audit record on %s", d.Msg.Topic)
	}
	prefix := "group=resizers subscription=thumbs id=" + id + " topic=jobs.thumb.1 attempt=1 in_flight_ms="
	if p := string(d.Msg.Payload); !strings.HasPrefix(p, prefix) || p == prefix || strings.HasSuffix(p, "=0") {
		t.Errorf("audit payload %q, want %q followed by at least 5", p, prefix)
	}
	h := d.Msg.Headers
	if h.Map()["audit-group"] != "resizers" || h.Map()["audit-subscription"] != "thumbs" || h.Map()["audit-id"] != id ||
		h.Map()["audit-topic"] != "jobs.thumb.1" || h.Map()["audit-attempt"] != "1" || h.Map()["audit-in-flight-ms"] == "" {
		t.Errorf("audit headers %v", h)
	}

	// Another group is not audited.
	other := e.subscribe(t, broker.SubscribeOptions{ID: "other", Group: "other", Patterns: []string{"jobs.other"}, Mode: broker.Balanced})
	res = e.publish(t, "jobs.other", "x", nil)
	other.Next(t)
	other.Ack([]string{res.SystemID})
	audit.None(t, 20*time.Millisecond)
}
