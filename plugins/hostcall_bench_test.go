package plugins

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The cost of a host call (guest → broker): testdata/hostcalls.wat makes 100 calls per
// tb_v1_on_publish; one host call costs (call=count − call=none) / 100, reported as
// ns/hostcall by the sub-benchmarks that make calls.
func BenchmarkHostCall(b *testing.B) {
	for _, mode := range []string{"none", "count", "header", "get", "set", "add", "labelled"} {
		b.Run(mode, func(b *testing.B) {
			benchmarkOnPublish(b, Spec{Name: "hostcalls", Wasm: fixture(b, "hostcalls"), Config: map[string]string{"call": mode}})
		})
	}
}

// The floor under BenchmarkHostCall: the same loop of host calls (testdata/floor.wat) into the
// cheapest api.GoFunction there is (noop: a pointer type whose Call writes its result, with no
// api.GoFunc wrapper or closure in between), on a plain wazero runtime with the broker's
// configuration (the compiler, no listeners). (count − none) ÷ 100 is what wazero's exit to Go,
// its dispatch of the function and its return to the guest cost, which no host function can go
// under; BenchmarkHostCall less this is the broker's own share.
func BenchmarkHostCallFloor(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
	defer rt.Close(ctx)
	if _, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().WithGoFunction(new(noop), nil, []api.ValueType{api.ValueTypeI32}).Export("noop").Instantiate(ctx); err != nil {
		b.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, fixture(b, "floor"))
	if err != nil {
		b.Fatal(err)
	}
	run := mod.ExportedFunction("run")
	for _, mode := range []struct {
		name  string
		calls uint64
	}{{"none", 0}, {"count", 100}} {
		b.Run(mode.name, func(b *testing.B) {
			stack := []uint64{mode.calls}
			cpu := cpuTime()
			for b.Loop() {
				stack[0] = mode.calls
				if err := run.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// noop is BenchmarkHostCallFloor's host function. A pointer receiver: a value method of a
// zero-size type would be reached through the compiler's (*noop).Call wrapper.
type noop struct{}

func (*noop) Call(_ context.Context, stack []uint64) { stack[0] = 0 }
