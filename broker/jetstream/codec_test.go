package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker"
)

// A fanout envelope carries every field back, headers of any bytes included, and a
// truncated or foreign one is refused rather than read past its end.
func TestEnvelope(t *testing.T) {
	h := map[string]string{"a": "1", "key: with\nline": " spaces ", "": "empty key", "Tb-Id": "x"}
	payload := []byte("payload\x00bytes")
	var data []byte
	for _, c := range []struct { // with neither key nor priority, version 1: older nodes read it
		key     string
		prio    uint8
		version byte
	}{{"order-7", 9, envVersionPriority}, {"", 3, envVersionPriority}, {"order-7", 0, envVersionKeyed}, {"", 0, envVersion}} {
		data = appendEnvelope(nil, 42, -7, "system-id", c.key, c.prio, broker.MakeHeaders(h), payload)
		if n := envelopeSize("system-id", c.key, broker.MakeHeaders(h)) + len(payload); len(data) > n {
			t.Fatalf("envelope of %d bytes, sized %d", len(data), n)
		}
		if v := data[1]; v != c.version {
			t.Fatalf("key %q, priority %d: envelope version %d, want %d", c.key, c.prio, v, c.version)
		}
		m, err := parseEnvelope("a.b", data)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != 42 || m.PublishedAt != -7 || m.SystemID != "system-id" || m.Key != c.key || m.Priority != c.prio || m.Topic != "a.b" ||
			!bytes.Equal(m.Payload, payload) || !maps.Equal(m.Headers.Map(), h) {
			t.Fatalf("got %+v", m)
		}
		// Every proper prefix that cuts into the fields is refused.
		for i := range len(data) - len(payload) {
			if _, err := parseEnvelope("t", data[:i]); err == nil {
				t.Fatalf("version %d: a prefix of %d bytes parsed", c.version, i)
			}
		}
	}
	m, _ := parseEnvelope("a.b", data)
	hb := 0
	for k, v := range h {
		hb += len(k) + len(v)
	}
	if m.HeaderBytes != hb {
		t.Fatalf("HeaderBytes %d, want %d", m.HeaderBytes, hb)
	}
	if m, err := parseEnvelope("t", appendEnvelope(nil, 1, 1, "id", "", 0, nil, nil)); err != nil || m.Headers != nil || len(m.Payload) != 0 {
		t.Fatalf("empty: %+v, %v", m, err)
	}
	if _, err := parseEnvelope("t", []byte("plain payload")); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("foreign payload: %v", err)
	}
}

// A store that nats.go cannot even encode is not transient: the publisher hears INTERNAL
// (no broker error) without "retry", not UNAVAILABLE "...; retry" (issue 23).
func TestStoreErrorNotTransient(t *testing.T) {
	err := (&Engine{}).storeError(fmt.Errorf("sending: %w", nats.ErrBadHeaderMsg))
	if errors.Is(err, broker.ErrUnavailable) || strings.Contains(err.Error(), "retry") || !strings.Contains(err.Error(), "bug") {
		t.Fatalf("codec error: %v", err)
	}
	if err := (&Engine{}).storeError(context.DeadlineExceeded); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("timeout: %v; want ErrUnavailable", err)
	}
}
