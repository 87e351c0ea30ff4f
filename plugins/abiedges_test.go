package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// A zero-length (ptr, len) pair is valid whatever ptr is, for readers and writers alike, and
// v1_msg_id returns -1 (absent) in tb_v1_on_publish: testdata/edges.wat traps or drops
// otherwise.
func TestABIEdges(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "edges", Wasm: fixture(t, "edges"), FailurePolicy: FailClosed})
	d := broker.Draft{Topic: "a.b", Payload: []byte("old"), Headers: broker.MakeHeaders(map[string]string{"x": "1"})}
	v, err := c.OnPublish(&d)
	if err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	if v.Drop {
		t.Fatal("v1_msg_id did not return -1 in tb_v1_on_publish")
	}
	if len(d.Payload) != 0 || d.Headers.Map()["empty"] != "" || len(d.Headers) != 2 {
		t.Fatalf("message after empty writes: %+v", d)
	}
}

// A plugin that grows its memory past its limit fails the call, even when it goes on after
// memory.grow returned -1, and the failure says why; its instance is not reused. In tb_v1_init
// it refuses the load.
func TestMemoryLimitFailsCall(t *testing.T) {
	h := newHost(t)
	c := load(t, h, Spec{Name: "grow", Wasm: fixture(t, "growquiet"), FailurePolicy: FailClosed,
		MemoryLimitBytes: 1 << 20, BreakerFailures: 1000})
	for range 3 {
		_, err := c.OnPublish(&broker.Draft{Topic: "a"})
		if !errors.Is(err, broker.ErrHookFailed) || !strings.Contains(err.Error(), "memory limit exceeded") ||
			!strings.Contains(err.Error(), "over its memory limit of 1048576 bytes") {
			t.Fatalf("publish: %v; want a failure for the memory limit", err)
		}
	}
	if st := c.Stats()[0]; st.Calls != 3 || st.Failures != 3 {
		t.Fatalf("stats %+v", st)
	}
	_, err := h.Load(context.Background(), []Spec{{Name: "grow-init", Wasm: fixture(t, "growquiet"),
		Config: map[string]string{"init": "1"}, MemoryLimitBytes: 1 << 20}})
	if err == nil || !strings.Contains(err.Error(), "memory limit exceeded") {
		t.Fatalf("load: %v; want it refused for the memory limit", err)
	}
	// A plugin that traps after memory.grow returned -1 (the usual way: AssemblyScript's
	// "unreachable", Go's "out of memory") is reported with the same reason.
	c = load(t, h, Spec{Name: "bomb", Wasm: fixture(t, "membomb"), FailurePolicy: FailClosed, MemoryLimitBytes: 1 << 20})
	if _, err := c.OnPublish(&broker.Draft{Topic: "a"}); err == nil || !strings.Contains(err.Error(), "memory limit exceeded") {
		t.Fatalf("membomb: %v", err)
	}
}

// A module whose memory starts over the limit is refused at load.
func TestMemoryMinOverLimit(t *testing.T) {
	h := newHost(t)
	_, err := h.Load(context.Background(), []Spec{{Name: "big", Wasm: fixture(t, "bigmem"), MemoryLimitBytes: 64 << 10}})
	if err == nil || !strings.Contains(err.Error(), "over the plugin's memory limit") {
		t.Fatalf("load: %v; want it refused", err)
	}
	load(t, h, Spec{Name: "big", Wasm: fixture(t, "bigmem"), MemoryLimitBytes: 128 << 10})
}

// A non-empty (ptr, len) pair outside the memory traps the call, and says so.
func TestOutOfBoundsSaysWhy(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "oob", Wasm: fixture(t, "oob"), FailurePolicy: FailClosed})
	_, err := c.OnPublish(&broker.Draft{Topic: "orders.x"}) // 8 bytes into a buffer 6 from the end
	if err == nil || !strings.Contains(err.Error(), "buffer 65530 length 8 is outside the plugin's memory (65536 bytes)") {
		t.Fatalf("publish: %v", err)
	}
}
