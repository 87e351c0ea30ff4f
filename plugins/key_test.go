package plugins

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// The ABI's key limit is the broker's: broker.ValidateKey takes a key of abi.MaxKeyBytes and
// refuses one a byte longer.
func TestMaxKeyBytesIsTheBrokers(t *testing.T) {
	if err := broker.ValidateKey(strings.Repeat("k", abi.MaxKeyBytes)); err != nil {
		t.Fatalf("a key of abi.MaxKeyBytes (%d): %v", abi.MaxKeyBytes, err)
	}
	if err := broker.ValidateKey(strings.Repeat("k", abi.MaxKeyBytes+1)); err == nil {
		t.Fatalf("a key of abi.MaxKeyBytes+1 (%d) is valid to the broker", abi.MaxKeyBytes+1)
	}
}

// On publish, a plugin reads the key the message came with (v1_msg_key), sets or removes it
// (v1_msg_set_key), and gives its emits keys (v1_emit_key); a key the broker would refuse is
// refused with ERR_INVALID or ERR_TOO_LARGE, which the plugin answers (here: a reject).
func TestPluginSetsKey(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "keys", Wasm: fixture(t, "keytenant")})
	publish := func(key string, h map[string]string) (broker.Draft, broker.PublishVerdict, error) {
		d := broker.Draft{Topic: "orders.1", Payload: []byte("x"), Headers: broker.MakeHeaders(h), Key: key}
		v, err := c.OnPublish(&d)
		return d, v, err
	}

	d, v, err := publish("pub", map[string]string{"tenant": "acme"})
	if err != nil || d.Key != "acme" || d.Headers.Map()["key-was"] != "pub" {
		t.Fatalf("key from the tenant: key %q headers %v err %v", d.Key, d.Headers, err)
	}
	if len(v.Emit) != 1 || v.Emit[0].Topic != "audit.published" || v.Emit[0].Key != "acme" || string(v.Emit[0].Payload) != "acme" {
		t.Fatalf("emits %+v", v.Emit)
	}

	d, v, err = publish("own", nil) // no tenant: the key stays
	if err != nil || d.Key != "own" || d.Headers.Map()["key-was"] != "own" || len(v.Emit) != 0 {
		t.Fatalf("no tenant: key %q headers %v emits %v err %v", d.Key, d.Headers, v.Emit, err)
	}
	d, _, err = publish("own", map[string]string{"tenant": ""}) // an empty key removes it
	if err != nil || d.Key != "" {
		t.Fatalf("empty tenant: key %q err %v", d.Key, err)
	}

	for tenant, want := range map[string]string{
		"a\tb":                    "key refused: ERR_INVALID",
		strings.Repeat("x", 257):  "key refused: ERR_TOO_LARGE",
		strings.Repeat("x", 5000): "key refused: ERR_TOO_LARGE", // longer than the plugin's buffer: refused unread
	} {
		d, v, err := publish("pub", map[string]string{"tenant": tenant})
		var rej *broker.RejectError
		if !errors.As(err, &rej) || rej.Code != 3 || rej.Reason != want || d.Key != "pub" || len(v.Emit) != 0 {
			t.Fatalf("tenant %.20q: err %v key %q emits %v, want a reject %q with the key unchanged", tenant, err, d.Key, v.Emit, want)
		}
	}
	if _, _, err := publish("pub", map[string]string{"tenant": strings.Repeat("é", 128)}); err != nil {
		t.Fatalf("a 256-byte key refused: %v", err) // at the limit: accepted
	}
}

// A key the plugin sets is the routed message's, and the one its on_ack and on_redeliver
// calls read; on_redeliver may not change it (ERR_NOT_ALLOWED).
func TestKeyThroughAckAndRedeliver(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "keys", Wasm: fixture(t, "keytenant"), Topics: []string{"jobs.>"}})
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	audit := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"audit.>"}, Mode: broker.Fanout})
	m := brokertest.Subscribe(t, b, broker.SubscribeOptions{ID: "jobs", Group: "workers", Patterns: []string{"jobs.*"}, Mode: broker.Balanced})

	res, err := b.Publish("jobs.1", []byte("job"), map[string]string{"tenant": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Next(t); d.Msg.Key != "acme" {
		t.Fatalf("delivered with key %q, want the plugin's acme", d.Msg.Key)
	}
	if e := audit.Next(t); e.Msg.Topic != "audit.published" || e.Msg.Key != "acme" {
		t.Fatalf("emitted %s with key %q", e.Msg.Topic, e.Msg.Key)
	}
	m.Nack([]string{res.SystemID}, 0, "")
	d := m.Next(t)
	if d.Msg.Key != "acme" || d.Msg.Headers.Map()["key-not-allowed"] != "yes" {
		t.Fatalf("redelivered with key %q headers %v", d.Msg.Key, d.Msg.Headers)
	}
	m.Ack([]string{res.SystemID})
	if e := audit.Next(t); e.Msg.Topic != "audit.acked" || string(e.Msg.Payload) != "acme" || e.Msg.Key != "acme" {
		t.Fatalf("on_ack emitted %s %q with key %q, want audit.acked \"acme\" keyed acme", e.Msg.Topic, e.Msg.Payload, e.Msg.Key)
	}
}

// The fuzz target's plugin reaches the key functions: its seeds set a valid key (and an
// emit's), have an invalid one refused (the message keeps its key), and fail a call after
// setting a key (a malformed verdict: nothing applied).
func TestFuzzCallSetsKeys(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "fuzz", Wasm: fixture(t, "fuzzcall"), BreakerFailures: 1 << 30, PoolSize: 1})
	call := func(a, b, cc, d uint32, verdict uint64, tail string) (broker.Draft, broker.PublishVerdict, bool) {
		p := make([]byte, 24)
		binary.LittleEndian.PutUint32(p[0:], a)
		binary.LittleEndian.PutUint32(p[4:], b)
		binary.LittleEndian.PutUint32(p[8:], cc)
		binary.LittleEndian.PutUint32(p[12:], d)
		binary.LittleEndian.PutUint64(p[16:], verdict)
		p = append(p, tail...)
		before := c.Stats()[0].Failures
		dr := broker.Draft{Topic: "fuzz.topic", Payload: p, Headers: broker.MakeHeaders(map[string]string{"k": "v"}), Key: "k0"}
		v, err := c.OnPublish(&dr)
		if err != nil {
			t.Fatal(err)
		}
		return dr, v, c.Stats()[0].Failures > before
	}
	// The emit's key is read from [a, a+b) after v1_msg_topic wrote the topic there.
	if d, v, failed := call(24, 8, 0, 0, 0, "tenant-1"); failed || d.Key != "tenant-1" || len(v.Emit) != 1 || v.Emit[0].Key != "fuzz.top" {
		t.Fatalf("valid key: failed %v key %q emits %+v", failed, d.Key, v.Emit)
	}
	if d, v, failed := call(24, 3, 0, 0, 0, "a\x01b"); failed || d.Key != "k0" || len(v.Emit) != 1 {
		t.Fatalf("invalid key: failed %v key %q emits %+v", failed, d.Key, v.Emit)
	}
	if d, v, failed := call(24, 8, 0, 0, 99, "tenant-1"); !failed || d.Key != "k0" || len(v.Emit) != 0 {
		t.Fatalf("failed call: failed %v key %q emits %d", failed, d.Key, len(v.Emit))
	}
}
