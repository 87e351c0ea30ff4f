package conformance

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The AssemblyScript SDK's inbox and batches, beyond the rows every SDK passes: its
// tb_v1_on_publish_batch driven directly (as TestRustBatchExport drives Rust's), its memory
// over many batches, and what a frame costs a message.

// instantiateGuest instantiates the conformance plugin of lang in a bare wazero runtime, with
// the host functions stubbed by a batchGuest, and gives it an inbox of 1 MiB: for the tests
// that drive an SDK's batch export directly (Rust's and AssemblyScript's).
func instantiateGuest(t *testing.T, lang string) (*batchGuest, api.Module) {
	t.Helper()
	ctx := context.Background()
	wasm, err := os.ReadFile(buildFile(t, lang))
	if err != nil {
		t.Fatal(err)
	}
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	compiled, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	g := &batchGuest{t: t}
	host := r.NewHostModuleBuilder("tinybroker")
	for _, def := range compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		if mod != "tinybroker" {
			t.Fatalf("the plugin imports %s.%s", mod, name)
		}
		host.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, stack []uint64) { g.hostCall(name, m, stack) }), def.ParamTypes(), def.ResultTypes()).
			Export(name)
	}
	if _, err := host.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName(lang))
	if err != nil {
		t.Fatal(err)
	}
	g.mem = mod.Memory()
	res, err := mod.ExportedFunction(abi.InboxExport).Call(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	g.inbox = uint32(res[0])
	if g.inbox%8 != 0 {
		t.Fatalf("inbox at %d, not a multiple of 8", g.inbox)
	}
	return g, mod
}

func TestAssemblyScriptBatchExport(t *testing.T) {
	g, mod := instantiateGuest(t, "assemblyscript")
	batchFn := mod.ExportedFunction(abi.BatchExport)
	if batchFn == nil {
		t.Fatalf("the assemblyscript plugin does not export %s", abi.BatchExport)
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
	headerWrites := []string{"set_header added=1", "set_header changed=new", "del_header removed"}
	want := []struct {
		verdict uint64
		writes  []string
	}{
		{0, headerWrites},
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
	// A payload of 6,000 bytes written back twice: past the SDK's static area for the writes'
	// bytes, into chunks it allocates; and 20 messages of 3 writes each: past the first
	// buffer of write records (16), which moves when it grows.
	big := strings.Repeat("0123456789", 600)
	msgs = append(msgs, batchMsg{topic: "c.payload", payload: big}, batchMsg{topic: "c.payload", payload: big})
	want = append(want, want[3], want[3])
	want[len(want)-2].writes = []string{"set_payload " + big + big}
	want[len(want)-1].writes = want[len(want)-2].writes
	for range 20 {
		msgs = append(msgs, msgs[0])
		want = append(want, want[0])
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
	if got := g.call(batchFn); got != 0 {
		t.Fatalf("%s returned %d; want 0", abi.BatchExport, got)
	}
	if !slices.Equal(g.calls, wantCalls) {
		t.Errorf("host calls (current, function, arguments):\n%s\nwant\n%s", strings.Join(g.calls, "\n"), strings.Join(wantCalls, "\n"))
	}
	for i, e := range entries {
		if v := g.u64(e + abi.EntryVerdict); v != want[i].verdict {
			t.Errorf("message %d (%s): verdict %#x; want %#x", i, msgs[i].topic, v, want[i].verdict)
		}
		if w := g.writeList(g.inbox + g.u32(e+abi.EntryOffset)); !slices.Equal(w, want[i].writes) {
			t.Errorf("message %d (%s): write list %.200q; want %.200q", i, msgs[i].topic, w, want[i].writes)
		}
	}

	// A single call after a batch reads the whole inbox again, with a write list of its own;
	// config values are kept, so the second c.emit reads none.
	for _, m := range []batchMsg{{topic: "c.reject", headers: map[string]string{"why": "single"}}, {topic: "c.pass"}} {
		g.calls = nil
		g.writeSingle(m)
		res, err := mod.ExportedFunction("tb_v1_on_publish").Call(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.topic == "c.reject" && res[0] != 2|7<<32 {
			t.Errorf("tb_v1_on_publish after a batch: verdict %#x; want %#x", res[0], uint64(2|7<<32))
		}
		wantW := []string{"set_reason rejected: single"}
		if m.topic == "c.pass" {
			wantW = nil // the last call's list is not this one's
		}
		if w := g.writeList(g.inbox); !slices.Equal(w, wantW) {
			t.Errorf("tb_v1_on_publish %s after a batch: write list %q; want %q", m.topic, w, wantW)
		}
	}

	// A second batch starts with empty write lists.
	entries = g.writeBatch([]batchMsg{{topic: "c.pass"}, {topic: "c.headers"}, {topic: "c.emit", payload: "again"}})
	if got := g.call(batchFn); got != 0 {
		t.Fatalf("second batch: %s returned %d", abi.BatchExport, got)
	}
	if w := g.writeList(g.inbox + g.u32(entries[0])); len(w) != 0 {
		t.Errorf("second batch, c.pass: write list %q; want none", w)
	}
	if w := g.writeList(g.inbox + g.u32(entries[1])); !slices.Equal(w, headerWrites) {
		t.Errorf("second batch, c.headers: write list %q; want %q", w, headerWrites)
	}
	if wantCalls := []string{"2 v1_emit audit.copy again", "2 v1_emit_header origin=c.emit", "2 v1_emit c.emit.second 2", "2 v1_emit_header n=2"}; !slices.Equal(g.calls, wantCalls) {
		t.Errorf("second batch: host calls %q; want %q", g.calls, wantCalls)
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

// buildASTenantFilter builds sdk/assemblyscript/examples/tenant-filter.ts as its guide says,
// or skips (fails under CI) without asc.
func buildASTenantFilter(tb testing.TB) []byte {
	tb.Helper()
	sdk, err := filepath.Abs("../../sdk/assemblyscript")
	if err != nil {
		tb.Fatal(err)
	}
	asc := filepath.Join(sdk, "node_modules/.bin/asc")
	if _, err := os.Stat(asc); err != nil {
		if inCI() {
			tb.Fatal("missing asc (npm ci in sdk/assemblyscript); under CI every SDK must be built")
		}
		tb.Skip("missing asc (npm ci in sdk/assemblyscript)")
	}
	dir := tb.TempDir()
	if err := os.Symlink(sdk, filepath.Join(dir, "tinybroker")); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, "tenant-filter.wasm")
	cmd := exec.Command(asc, "examples/tenant-filter.ts", "--path", dir, "-o", out,
		"-O3", "--runtime", "incremental", "--use", "abort=~lib/tinybroker/index/abort")
	cmd.Dir = sdk
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%v: %v\n%s", cmd.Args, err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return wasm
}

// BenchmarkAssemblyScriptFrame measures the AssemblyScript tenant filter (the SDK's example)
// on frames of 128 messages of 256 bytes with the header tenant=acme, through
// Chain.OnPublishBatch: ns/msg is the cost per message. batch: as built, a frame in one call;
// inbox: the batch export hidden, one call per message on the inbox; calls: both hidden, one
// call per message with host calls.
func BenchmarkAssemblyScriptFrame(b *testing.B) {
	wasm := buildASTenantFilter(b)
	noBatch := bytes.ReplaceAll(wasm, batchName, []byte("\x16tb_v1_on_publish_batc_"))
	for _, v := range []struct {
		name string
		wasm []byte
	}{{"batch", wasm}, {"inbox", noBatch}, {"calls", bytes.ReplaceAll(noBatch, inboxName, []byte("\x0btb_v1_inbo_"))}} {
		b.Run(v.name, func(b *testing.B) { benchmarkFrames(b, v.wasm, v.name == "batch") })
	}
}
