package plugins

import "testing"

// The cost of a host call (guest → broker): testdata/hostcalls.wat makes 100 calls per
// tb_on_publish; one host call costs (call=count − call=none) / 100, reported as
// ns/hostcall by the sub-benchmarks that make calls.
func BenchmarkHostCall(b *testing.B) {
	for _, mode := range []string{"none", "count", "header"} {
		b.Run(mode, func(b *testing.B) {
			benchmarkOnPublish(b, Spec{Name: "hostcalls", Wasm: fixture(b, "hostcalls"), Config: map[string]string{"call": mode}})
		})
	}
}
