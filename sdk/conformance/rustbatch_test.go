package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// TestRustBatchTrapRunsTwice checks, through the real host, what docs/plugins/rust.md tells
// a plugin of batches: when a batch traps, the host runs each of its messages again alone, so
// the plugin's on_publish code runs twice for the messages before the trap. (That a frame is
// decided in one batch as each message alone is, is TestConformanceFrame's.)
func TestRustBatchTrapRunsTwice(t *testing.T) {
	l := load(t, build(t, "rust"))
	ds := []broker.Draft{{Topic: "c.log", Payload: []byte("twice")}, {Topic: "c.trap"}, {Topic: "c.headers"}}
	vs, errs := make([]broker.PublishVerdict, len(ds)), make([]error, len(ds))
	l.chain.OnPublishBatch(ds, vs, errs)
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || ds[1].Topic != "c.trap" || ds[2].Headers.Map()["added"] != "1" {
		t.Errorf("a frame with c.trap (fail_open): %+v %v", ds, errs)
	}
	if st := l.chain.Stats()[0]; st.Calls != 6 || st.Failures != 2 {
		t.Errorf("stats %+v; want 6 calls (3 in the batch, 3 alone), 2 failures (the batch, then c.trap alone)", st)
	}
	if n := strings.Count(l.log.String(), "conformance log: twice"); n != 2 {
		t.Errorf("the log has %d lines of c.log before a trap; want 2 (in the batch, then alone)\n%s", n, l.log)
	}
}

// TestRustBatchExport drives the Rust SDK's tb_v1_on_publish_batch directly, as docs/ABI.md
// ("Batches") lays a batch out, with a stub of the host functions that notes which message
// is current when each is called. It checks each message's verdict, its write list (read
// after the whole call, so that a later message's writes cannot have overwritten an earlier
// one's), that host calls act on the message being run, that no reader makes a host call,
// that a single tb_v1_on_publish after a batch reads the whole inbox again, and that a batch the
// SDK cannot read is declined.
func TestRustBatchExport(t *testing.T) {
	ctx := context.Background()
	g, mod := instantiateGuest(t, "rust")
	batchFn := mod.ExportedFunction(abi.BatchExport)
	if batchFn == nil {
		t.Fatalf("the rust plugin does not export %s", abi.BatchExport)
	}

	msgs := []batchMsg{
		{topic: "c.headers", headers: map[string]string{"changed": "old", "removed": "x", "kept": "k"}},
		{topic: "c.drop"},
		{topic: "c.emit", payload: "orig", headers: map[string]string{"h": "1"}},
		{topic: "c.payload", payload: "ab"},
		{topic: "c.reject", headers: map[string]string{"why": "nope"}},
		{topic: "c.retopic"},
		{topic: "c.enum", headers: map[string]string{"b": "2", "a": "1"}},
		{topic: "c.log", payload: "hello"},
		{topic: "c.pass", payload: "p"},
		{topic: "c.empty", payload: "x"},
	}
	want := []struct {
		verdict uint64
		writes  []string
	}{
		{0, []string{"set_header added=1", "set_header changed=new", "del_header removed"}},
		{1, []string{"set_reason dropped by conformance"}},
		{0, nil},
		{0, []string{"set_payload abab"}},
		{2 | 7<<32, []string{"set_reason rejected: nope"}},
		{0, nil},
		{0, []string{"set_payload a=1,b=2"}},
		{0, nil},
		{0, nil},
		{0, []string{"set_payload "}},
	}
	wantCalls := []string{
		"2 v1_config_get emit_topic",
		"2 v1_emit audit.copy orig",
		"2 v1_emit_header origin=c.emit",
		"2 v1_emit c.emit.second 2",
		"2 v1_emit_header n=2",
		"5 v1_msg_set_topic c.retopic.done",
		"7 v1_log 3 conformance log: hello",
	}

	entries := g.writeBatch(msgs)
	got := g.call(batchFn)
	if got != 0 {
		t.Fatalf("%s returned %d; want 0", abi.BatchExport, got)
	}
	if !slices.Equal(g.calls, wantCalls) {
		t.Errorf("host calls (current, function, arguments):\n%s\nwant\n%s", strings.Join(g.calls, "\n"), strings.Join(wantCalls, "\n"))
	}
	for i, e := range entries {
		v := g.u64(e + abi.EntryVerdict)
		rec := g.u32(e + abi.EntryOffset)
		if v != want[i].verdict {
			t.Errorf("message %d (%s): verdict %#x; want %#x", i, msgs[i].topic, v, want[i].verdict)
		}
		if w := g.writeList(g.inbox + rec); !slices.Equal(w, want[i].writes) {
			t.Errorf("message %d (%s): write list %q; want %q", i, msgs[i].topic, w, want[i].writes)
		}
	}

	// A single call after a batch reads the whole inbox again, with a write list of its own.
	g.calls = nil
	g.writeSingle(batchMsg{topic: "c.reject", headers: map[string]string{"why": "single"}})
	res, err := mod.ExportedFunction("tb_v1_on_publish").Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != 2|7<<32 {
		t.Errorf("tb_v1_on_publish after a batch: verdict %#x; want %#x", res[0], uint64(2|7<<32))
	}
	if w := g.writeList(g.inbox); !slices.Equal(w, []string{"set_reason rejected: single"}) {
		t.Errorf("tb_v1_on_publish after a batch: write list %q", w)
	}

	// A second batch starts with empty write lists.
	entries = g.writeBatch([]batchMsg{{topic: "c.pass"}, {topic: "c.headers"}})
	if got := g.call(batchFn); got != 0 {
		t.Fatalf("second batch: %s returned %d", abi.BatchExport, got)
	}
	if w := g.writeList(g.inbox + g.u32(entries[0])); len(w) != 0 {
		t.Errorf("second batch, c.pass: write list %q; want none", w)
	}
	if w := g.writeList(g.inbox + g.u32(entries[1])); !slices.Equal(w, want[0].writes) {
		t.Errorf("second batch, c.headers: write list %q; want %q", w, want[0].writes)
	}
	if len(g.calls) != 0 {
		t.Errorf("second batch: host calls %q; want none", g.calls)
	}

	// A record the SDK cannot read (not 8-aligned) declines the batch, before any message runs.
	entries = g.writeBatch([]batchMsg{{topic: "c.log", payload: "declined"}, {topic: "c.pass"}})
	g.put32(entries[1]+abi.EntryOffset, g.u32(entries[1]+abi.EntryOffset)+4)
	if got := g.call(batchFn); got == 0 {
		t.Errorf("a batch with a misaligned record: %s returned 0; want a decline", abi.BatchExport)
	}
	if len(g.calls) != 0 {
		t.Errorf("a declined batch made host calls %q", g.calls)
	}
}

type batchMsg struct {
	topic, payload string
	headers        map[string]string
}

// batchGuest is the Rust plugin's instance as the test sees it: its memory, its inbox, and
// the host calls it made.
type batchGuest struct {
	t     *testing.T
	mem   api.Memory
	inbox uint32
	calls []string // "current function arguments"
}

func (g *batchGuest) call(f api.Function) int32 {
	g.t.Helper()
	g.calls = nil
	res, err := f.Call(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	return int32(res[0])
}

func (g *batchGuest) read(ptr, n uint32) []byte {
	g.t.Helper()
	b, ok := g.mem.Read(ptr, n)
	if !ok {
		g.t.Fatalf("read of %d bytes at %#x is outside memory", n, ptr)
	}
	return b
}

func (g *batchGuest) u32(off uint32) uint32 {
	return binary.LittleEndian.Uint32(g.read(g.inbox+off, 4))
}
func (g *batchGuest) u64(off uint32) uint64 {
	return binary.LittleEndian.Uint64(g.read(g.inbox+off, 8))
}
func (g *batchGuest) put32(off, v uint32) {
	binary.LittleEndian.PutUint32(g.read(g.inbox+off, 4), v)
}

// record lays out one message as a single tb_v1_on_publish inbox, its offsets from its start.
func record(m batchMsg) []byte {
	names := make([]string, 0, len(m.headers))
	for k := range m.headers {
		names = append(names, k)
	}
	sort.Strings(names)
	b := make([]byte, abi.InHeaders+abi.InEntry*len(names))
	le := binary.LittleEndian
	value := func(at int, v string) {
		le.PutUint32(b[at:], uint32(len(b)))
		le.PutUint32(b[at+4:], uint32(len(v)))
		b = append(b, v...)
	}
	le.PutUint32(b[abi.InHook:], uint32(abi.HookPublish))
	le.PutUint32(b[abi.InMaxMessage:], 1<<20)
	le.PutUint32(b[abi.InMaxHeader:], 1<<16)
	value(abi.InTopic, m.topic)
	value(abi.InPayload, m.payload)
	le.PutUint32(b[abi.InID+4:], abi.AbsentLen)
	le.PutUint32(b[abi.InHeaderCount:], uint32(len(names)))
	for i, k := range names {
		e := abi.InHeaders + abi.InEntry*i
		value(e, k)
		value(e+8, m.headers[k])
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// writeBatch writes msgs into the inbox as a batch and returns their entries' offsets.
func (g *batchGuest) writeBatch(msgs []batchMsg) []uint32 {
	g.t.Helper()
	le := binary.LittleEndian
	b := make([]byte, abi.BatchEntries+abi.BatchEntry*len(msgs))
	le.PutUint32(b[abi.BatchCount:], uint32(len(msgs)))
	entries := make([]uint32, len(msgs))
	for i, m := range msgs {
		rec := record(m)
		e := abi.BatchEntries + abi.BatchEntry*i
		entries[i] = uint32(e)
		le.PutUint32(b[e+abi.EntryOffset:], uint32(len(b)))
		le.PutUint32(b[e+abi.EntryLength:], uint32(len(rec)))
		b = append(b, rec...)
	}
	if !g.mem.Write(g.inbox, b) {
		g.t.Fatal("the batch does not fit the inbox")
	}
	return entries
}

func (g *batchGuest) writeSingle(m batchMsg) {
	if !g.mem.Write(g.inbox, record(m)) {
		g.t.Fatal("the message does not fit the inbox")
	}
}

// writeList decodes the write list of the record at ptr (an address) as "op a[=b]".
func (g *batchGuest) writeList(ptr uint32) []string {
	g.t.Helper()
	le := binary.LittleEndian
	hdr := g.read(ptr, 8)
	list, n := le.Uint32(hdr), le.Uint32(hdr[4:])
	var out []string
	for i := range n {
		w := g.read(list+i*abi.WriteSize, abi.WriteSize)
		a := string(g.read(le.Uint32(w[4:]), le.Uint32(w[8:])))
		b := string(g.read(le.Uint32(w[12:]), le.Uint32(w[16:])))
		switch op := le.Uint32(w); op {
		case abi.OpSetPayload:
			out = append(out, "set_payload "+a)
		case abi.OpSetHeader:
			out = append(out, "set_header "+a+"="+b)
		case abi.OpDelHeader:
			out = append(out, "del_header "+a)
		case abi.OpSetReason:
			out = append(out, "set_reason "+a)
		default:
			out = append(out, fmt.Sprintf("op %d", op))
		}
	}
	return out
}

// hostCall stubs every host function the plugin imports. The writers and emits the
// conformance plugin makes with host calls are noted with the batch's current message;
// a reader of the message is a bug in an inbox build, and noted too.
func (g *batchGuest) hostCall(name string, m api.Module, stack []uint64) {
	mem := m.Memory()
	str := func(p, n uint64) string {
		b, ok := mem.Read(uint32(p), uint32(n))
		if !ok {
			panic(fmt.Sprintf("%s: read outside memory", name))
		}
		return string(b)
	}
	give := func(v string, buf, cap uint64) uint64 {
		mem.Write(uint32(buf), []byte(v)[:min(uint64(len(v)), cap)])
		return uint64(len(v))
	}
	cur, _ := mem.ReadUint32Le(g.inbox + abi.BatchCurrent)
	note := func(args string) { g.calls = append(g.calls, fmt.Sprintf("%d %s %s", cur, name, args)) }
	switch name {
	case "v1_config_get":
		k := str(stack[0], stack[1])
		note(k)
		if v, ok := pluginConfig[k]; ok {
			stack[0] = give(v, stack[2], stack[3])
		} else {
			stack[0] = api.EncodeI32(-1)
		}
	case "v1_config":
		note("")
		stack[0] = give(configText, stack[0], stack[1])
	case "v1_log":
		note(fmt.Sprintf("%d %s", api.DecodeI32(stack[0]), str(stack[1], stack[2])))
	case "v1_emit":
		note(str(stack[0], stack[1]) + " " + str(stack[2], stack[3]))
		stack[0] = 0
	case "v1_emit_header":
		note(str(stack[1], stack[2]) + "=" + str(stack[3], stack[4]))
		stack[0] = 0
	case "v1_msg_set_topic":
		note(str(stack[0], stack[1]))
		stack[0] = 0
	default:
		note("(unexpected in an inbox build)")
		for i := range stack {
			stack[i] = 0
		}
	}
}
