package plugins

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// FuzzABI drives every host function with arbitrary pointers, lengths and verdicts: the host
// never panics, and each call ends in a valid verdict or a counted failure (the message then
// continues unchanged: fail_open), never in a half-applied change.
func FuzzABI(f *testing.F) {
	seed := func(a, b, c, d uint32, verdict uint64) []byte {
		p := make([]byte, 24)
		binary.LittleEndian.PutUint32(p[0:], a)
		binary.LittleEndian.PutUint32(p[4:], b)
		binary.LittleEndian.PutUint32(p[8:], c)
		binary.LittleEndian.PutUint32(p[12:], d)
		binary.LittleEndian.PutUint64(p[16:], verdict)
		return p
	}
	f.Add(seed(0, 4, 32, 8, 0))                   // plausible pointers, PASS
	f.Add(seed(0, 4, 32, 8, 1))                   // DROP
	f.Add(seed(0, 4, 32, 8, 2|7<<32))             // REJECT with PERMISSION_DENIED
	f.Add(seed(65530, 100, 0, 1<<31, 0))          // out of bounds
	f.Add(seed(0xffffffff, 0xffffffff, 0, 0, 99)) // nonsense
	f.Add(seed(1, 0, 0, 3<<20, 2|99<<32))         // huge payload, bad code
	// A new payload, and a 65,535-byte header that fits max_header_bytes alone but not
	// beside the message's k=v: the call fails after setting the payload (found by CI's fuzzing).
	f.Add(seed(24, 65000, 25, 535, 0))
	// Keys: "tenant-1" in the payload's tail (at 24) set as the key, then the same with a
	// malformed verdict, which fails the call: the key set stays unapplied.
	f.Add(append(seed(24, 8, 0, 0, 0), "tenant-1"...))
	f.Add(append(seed(24, 8, 0, 0, 99), "tenant-1"...))
	f.Add(append(seed(24, 3, 0, 0, 0), "a\x01b"...))            // a control character: refused
	f.Add(append(seed(24, 257, 0, 0, 0), make([]byte, 257)...)) // over MaxKeyBytes
	c := fuzzChain(f, "fuzzcall")
	f.Fuzz(func(t *testing.T, payload []byte) {
		before := c.Stats()[0].Failures
		d := broker.Draft{Topic: "fuzz.topic", Payload: payload, Headers: broker.MakeHeaders(map[string]string{"k": "v"}), Key: "k0"}
		v, err := c.OnPublish(&d)
		failed := c.Stats()[0].Failures > before
		var rej *broker.RejectError
		switch {
		case failed:
			if err != nil || v.Drop || d.Topic != "fuzz.topic" || string(d.Payload) != string(payload) || len(d.Headers) != 1 || d.Key != "k0" || len(v.Emit) != 0 {
				t.Fatalf("a failed call changed the message: %+v %v %+v", d, err, v)
			}
		case errors.As(err, &rej):
			if rej.Code < 0 || rej.Code > 16 {
				t.Fatalf("reject code %d", rej.Code)
			}
		case err != nil:
			t.Fatalf("unexpected error %v", err)
		default:
			if broker.ValidateTopic(d.Topic) != nil {
				t.Fatalf("plugin set an invalid topic %q", d.Topic)
			}
			if broker.ValidateKey(d.Key) != nil {
				t.Fatalf("plugin set an invalid key %q", d.Key)
			}
			if len(v.Emit) > 16 {
				t.Fatalf("%d emits", len(v.Emit))
			}
			for _, e := range v.Emit {
				if broker.ValidateTopic(e.Topic) != nil {
					t.Fatalf("emitted to an invalid topic %q", e.Topic)
				}
				if broker.ValidateKey(e.Key) != nil {
					t.Fatalf("emitted with an invalid key %q", e.Key)
				}
			}
		}
	})
}

// fuzzChain loads the fixture name as the only plugin of a chain for a fuzz target: one
// instance, and a circuit breaker that never opens, so that every input reaches the plugin.
func fuzzChain(f *testing.F, name string) *Chain {
	h, err := NewHost(HostOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Close(context.Background()) })
	c, err := h.Load(context.Background(), []Spec{{Name: "fuzz", Wasm: fixture(f, name), BreakerFailures: 1 << 30, PoolSize: 1}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close(context.Background()) })
	return c
}
