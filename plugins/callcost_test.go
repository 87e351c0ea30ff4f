package plugins

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// What close-on-context-done costs a call, taken apart on testdata/callcost.wat called
// straight through wazero (RATIONALE.md, "Why is every plugin call bounded"): entering the
// guest, with and without the checks compiled in, with a context that can be cancelled (an
// instance's) and with one that cannot (no Done channel); and one loop iteration (count/1000
// is a call of 1000 iterations).
func BenchmarkGuestCallCost(b *testing.B) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		name   string
		checks bool
		ctx    context.Context
	}{
		{"nochecks", false, context.Background()},
		{"checks", true, cancellable},
		{"checks-nodone", true, context.WithoutCancel(cancellable)},
	} {
		for _, fn := range []struct {
			name string
			arg  uint64
		}{{"entry", 0}, {"count", 1000}} {
			b.Run(c.name+"/"+fn.name, func(b *testing.B) {
				f := callCostFunc(b, c.checks, fn.name)
				stack := make([]uint64, 1)
				b.ReportAllocs()
				for b.Loop() {
					stack[0] = fn.arg
					if err := f.CallWithStack(c.ctx, stack); err != nil {
						b.Fatal(err)
					}
				}
				if fn.arg > 0 {
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(fn.arg), "ns/iteration")
				}
			})
		}
	}
}

// callCostFunc instantiates testdata/callcost.wasm in a runtime of its own, compiled with
// or without wazero's termination checks, and returns its function name.
func callCostFunc(t testing.TB, checks bool, name string) api.Function {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(checks))
	t.Cleanup(func() { _ = rt.Close(ctx) })
	mod, err := rt.InstantiateWithConfig(ctx, fixture(t, "callcost"), wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return mod.ExportedFunction(name)
}

// wazero v1.12.0, with the checks compiled in, starts a goroutine to watch every call into
// the guest, even when the call's context has no Done channel and so can never be
// cancelled (callEngine.callWithStack calls CloseModuleOnCanceledOrTimeout unconditionally).
// That is why the plugins' calls keep their instance's cancellable context rather than a
// context without Done (and a watchdog closing the module with CloseWithExitCode): it would
// save nothing. If this fails, wazero no longer does so: a call with a context without Done
// is cheap, and bounds.go should call the guest with one (RATIONALE.md, "Why is every plugin
// call bounded").
func TestWazeroWatchesEveryCall(t *testing.T) {
	f := callCostFunc(t, true, "entry")
	stack := make([]uint64, 1)
	ctx := context.WithoutCancel(context.Background())
	if ctx.Done() != nil {
		t.Fatal("context.WithoutCancel has a Done channel")
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := f.CallWithStack(ctx, stack); err != nil {
			t.Fatal(err)
		}
	})
	if allocs < 2 {
		t.Fatalf("a call with a context without Done: %.1f allocations; wazero no longer watches it with a goroutine: revisit bounds.go", allocs)
	}
}

// The other way to stop a call, which a context without Done would need: closing the
// module with CloseWithExitCode from another goroutine. The loop checks see it, and the call
// fails with the exit code. (It also releases the module's resources under the running call,
// which wazero's own watcher avoids; see TestWazeroWatchesEveryCall for why bounds.go keeps
// the watcher.)
func TestCloseWithExitCodeStopsALoop(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	t.Cleanup(func() { _ = rt.Close(ctx) })
	mod, err := rt.InstantiateWithConfig(ctx, fixture(t, "callcost"), wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		stack := []uint64{1<<32 - 1} // some seconds of iterations with the checks
		done <- mod.ExportedFunction("count").CallWithStack(context.WithoutCancel(ctx), stack)
	}()
	time.Sleep(20 * time.Millisecond)
	_ = mod.CloseWithExitCode(ctx, 7)
	err = brokertest.Receive(t, done, "the call to be stopped")
	var exit *sys.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("stopped call: %v, want exit code 7", err)
	}
}
