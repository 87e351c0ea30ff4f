package meter

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The committed .wasm fixtures are their .wat's (make wasm-fixtures).
func TestFixturesUpToDate(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm (Debian package wabt) not installed")
	}
	wats, _ := filepath.Glob("testdata/*.wat")
	for _, wat := range wats {
		out := filepath.Join(t.TempDir(), "x.wasm")
		if b, err := exec.Command("wat2wasm", "--debug-names", wat, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm %s: %v\n%s", wat, err, b)
		}
		want, _ := os.ReadFile(out)
		if got, _ := os.ReadFile(strings.TrimSuffix(wat, ".wat") + ".wasm"); !bytes.Equal(got, want) {
			t.Errorf("%s.wasm is stale: run make wasm-fixtures", strings.TrimSuffix(wat, ".wat"))
		}
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// host is a runtime with the rewritten code's import, and env's for sink.wat.
type host struct {
	rt     wazero.Runtime
	yields atomic.Int64
	stop   atomic.Int64 // with n > 0, the nth yield panics
}

var errStopped = errors.New("stopped by the host")

func newHost(t testing.TB) *host {
	t.Helper()
	ctx := context.Background()
	h := &host{rt: wazero.NewRuntime(ctx)}
	t.Cleanup(func() { _ = h.rt.Close(ctx) })
	_, err := h.rt.NewHostModuleBuilder(ImportModule).NewFunctionBuilder().
		WithGoFunction(api.GoFunc(func(_ context.Context, stack []uint64) {
			if n := h.yields.Add(1); n == h.stop.Load() {
				panic(errStopped)
			}
			stack[0] = Fuel
		}), nil, []api.ValueType{api.ValueTypeI32}).Export(ImportName).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = h.rt.InstantiateWithConfig(ctx, fixture(t, "env"), wazero.NewModuleConfig().WithName("env")); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) instantiate(t testing.TB, bin []byte) api.Module {
	t.Helper()
	mod, err := h.rt.InstantiateWithConfig(context.Background(), bin, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func call(t testing.TB, mod api.Module, name string, args ...uint64) uint64 {
	t.Helper()
	res, err := mod.ExportedFunction(name).Call(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s%v: %v", name, args, err)
	}
	if len(res) == 0 {
		return 0
	}
	return res[0]
}

// The rewritten module does what the module did: every function index it maps (direct
// calls, tables filled by active, passive and expression segments, ref.func in a global and
// in code, the start function, exports) still names the same function.
func TestRewrittenModuleRunsTheSame(t *testing.T) {
	bin := fixture(t, "sink")
	out, err := Instrument(bin)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t)
	orig, metered := h.instantiate(t, bin), h.instantiate(t, out)
	cases := []struct {
		name string
		args []uint64
		want uint64
	}{
		{"indirect", []uint64{0, 6, 7}, 42},        // $mul
		{"indirect", []uint64{1, 6, 7}, 1<<32 - 1}, // $sub: -1
		{"indirect", []uint64{2, 6, 7}, 13},        // the import $add
		{"indirect", []uint64{3, 100, 0}, 5050},    // $sum
		{"direct", []uint64{6, 7}, 41},
		{"sum", []uint64{1000}, 500500},
		{"started", nil, 7},
		{"imported", nil, 42},
		{"refs", []uint64{3, 5}, 30},
		{"twice", []uint64{21}, 42},
		{"classify", []uint64{0}, 101},
		{"classify", []uint64{1}, 102},
		{"classify", []uint64{9}, 104},
		{"simd", nil, 13},
		{"bulk", nil, 9 + 'b'},
		{"wide", nil, uint64(1<<64 - 1234567890123)},
	}
	for _, c := range cases {
		want := uint64(uint32(c.want))
		if c.name == "wide" {
			want = c.want
		}
		if got := call(t, orig, c.name, c.args...); got != want {
			t.Fatalf("the original's %s%v = %d, want %d (the fixture is wrong)", c.name, c.args, got, want)
		}
		if got := call(t, metered, c.name, c.args...); got != want {
			t.Errorf("rewritten %s%v = %d, want %d", c.name, c.args, got, want)
		}
	}
	// Names are kept, mapped: a trap's stack names the function it was in.
	named := 0
	for name, def := range metered.ExportedFunctionDefinitions() {
		want := orig.ExportedFunctionDefinitions()[name].DebugName()
		if strings.HasPrefix(want, ".$") { // no name: wazero shows the index
			continue
		}
		if named++; def.DebugName() != want {
			t.Errorf("export %s: debug name %q, want %q", name, def.DebugName(), want)
		}
	}
	if named < 3 {
		t.Fatalf("%d named exports compared; the fixture names more", named)
	}
}

// The code comes back to the host once per Fuel checks: a loop of n turns calls it about
// n/Fuel times, and a function without loops or calls never.
func TestYieldsOncePerFuel(t *testing.T) {
	out, err := Instrument(fixture(t, "sink"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t)
	mod := h.instantiate(t, out)
	before := h.yields.Load()
	call(t, mod, "simd")
	if n := h.yields.Load() - before; n != 0 {
		t.Fatalf("a function without loops or calls yielded %d times", n)
	}
	const turns = 10 * Fuel
	call(t, mod, "sum", turns)
	if n := h.yields.Load() - before; n < 9 || n > 11 {
		t.Fatalf("a loop of %d turns yielded %d times, want about %d", turns, n, turns/Fuel)
	}
}

// A loop that never ends, and a tree of 2^40 calls without a loop, each end when the host
// panics in its yield.
func TestHostStopsEndlessCode(t *testing.T) {
	out, err := Instrument(fixture(t, "forever"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fn   string
		args []uint64
	}{{"forever", nil}, {"tree", []uint64{40}}} {
		h := newHost(t)
		h.stop.Store(3)
		mod := h.instantiate(t, out)
		_, err := mod.ExportedFunction(c.fn).Call(context.Background(), c.args...)
		if err == nil || !strings.Contains(err.Error(), errStopped.Error()) {
			t.Fatalf("%s: %v, want it stopped by the host", c.fn, err)
		}
		if n := h.yields.Load(); n != 3 {
			t.Fatalf("%s: %d yields, want 3", c.fn, n)
		}
	}
}

// A module without a type, import or global section gets them, in their place.
func TestAddsMissingSections(t *testing.T) {
	bin := fixture(t, "bare")
	out, err := Instrument(bin)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t)
	if got := call(t, h.instantiate(t, out), "spin", 3*Fuel); got != 0 {
		t.Fatalf("spin = %d", got)
	}
	if n := h.yields.Load(); n < 2 || n > 3 {
		t.Fatalf("%d yields, want 2 or 3", n)
	}
}

// What is not a module, or uses instructions the rewrite does not know, is refused with
// where and why.
func TestRefusesWhatItCannotRead(t *testing.T) {
	sink := fixture(t, "sink")
	cases := []struct {
		name string
		bin  []byte
		want string
	}{
		{"empty", nil, "not a WebAssembly binary"},
		{"text", []byte("(module)"), "not a WebAssembly binary"},
		{"version 2", append([]byte("\x00asm\x02\x00\x00\x00"), sink[8:]...), "version 02000000"},
		{"cut short", sink[:len(sink)/2], "unexpected end"},
		{"unknown section", append(bytes.Clone(sink), 20, 0), "unknown section id 20"},
		{"exception handling", []byte("\x00asm\x01\x00\x00\x00" +
			"\x01\x04\x01\x60\x00\x00" + // type () -> ()
			"\x03\x02\x01\x00" + // one function
			"\x0a\x07\x01\x05\x00\x06\x40\x0b\x0b"), // try ... end
			"instruction 0x06 is not one the broker knows"},
		{"too many locals", []byte("\x00asm\x01\x00\x00\x00" +
			"\x01\x04\x01\x60\x00\x00" + "\x03\x02\x01\x00" +
			"\x0a\x0a\x01\x08\x01\xff\xff\xff\xff\x0f\x7f\x0b"), // 2^32-1 locals in 10 bytes
			"more than 50000 locals"},
		{"too many parameters", []byte("\x00asm\x01\x00\x00\x00" +
			"\x01\x08\x01\x60\xff\xff\xff\x7f\x7f\x00"),
			"268435455 parameters or results"},
		{"a huge table", []byte("\x00asm\x01\x00\x00\x00" +
			"\x04\x07\x01\x70\x00\xff\xff\xff\x3f"),
			"a table of 134217727 elements"},
		{"a count larger than its section", []byte("\x00asm\x01\x00\x00\x00" +
			"\x02\x05\xff\xff\xff\xff\x0f"),
			"counts 4294967295 entries in 5 bytes"},
	}
	for _, c := range cases {
		_, err := Instrument(c.bin)
		var me *Error
		if !errors.As(err, &me) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an *Error with %q", c.name, err, c.want)
		}
	}
}

// A looping guest does not hold up the garbage collector: runtime.GC returns while it runs.
// Without the rewrite it never does (the collector's stop-the-world waits for the guest), so
// this runs in a child process that the test can kill.
func TestCollectorRunsBesideALoop(t *testing.T) {
	if os.Getenv("METER_TEST_CHILD") != "" {
		bin := fixture(t, "forever")
		if os.Getenv("METER_TEST_CHILD") == "metered" {
			var err error
			if bin, err = Instrument(bin); err != nil {
				t.Fatal(err)
			}
		}
		h := newHost(t)
		mod := h.instantiate(t, bin)
		go func() { _, _ = mod.ExportedFunction("forever").Call(context.Background()) }() // runs until the process exits
		for h.yields.Load() == 0 && os.Getenv("METER_TEST_CHILD") == "metered" {
			runtime.Gosched()
		}
		time.Sleep(10 * time.Millisecond) // let the loop run; nothing waits on it
		runtime.GC()
		os.Stdout.WriteString("collected\n")
		os.Exit(0)
	}
	for _, mode := range []string{"metered", "plain"} {
		limit := 20 * time.Second
		if mode == "plain" {
			limit = 3 * time.Second // enough to show that it hangs
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCollectorRunsBesideALoop$")
		cmd.Env = append(os.Environ(), "METER_TEST_CHILD="+mode, "GOMAXPROCS=2")
		out, _ := cmd.Output()
		cancel()
		collected := strings.Contains(string(out), "collected")
		if mode == "metered" && !collected {
			t.Fatalf("metered: runtime.GC did not return within %v beside a looping guest:\n%s", limit, out)
		}
		if mode == "plain" && collected {
			t.Logf("plain: runtime.GC returned beside an unmetered loop; the guard is not needed on this Go (the test still checks the metered case)")
		}
		if testing.Short() {
			break
		}
	}
}
