// Package ontick registers a plugin's on_tick hook: a function the broker calls every
// tick_interval of the plugin's block, with no message, for work on its own time: flush an
// aggregate kept in the plugin's store (plugin.KVGet), emit a heartbeat or a report
// (plugin.Emit), set a gauge.
//
// Importing this package is what makes the plugin export tb_v1_on_tick: import it only in a
// plugin that implements the hook, and call Handle in func init(). Without tick_interval in
// its block the broker never calls it.
//
// Every broker node that loads the plugin ticks it (on the JetStream engine, each node of the
// cluster): for work done once per cluster, take a lease in the plugin's store with
// plugin.KVCompareAndSet and a TTL (docs/ABI.md, "Ticks").
package ontick

import (
	// Its init sets bridge.Run, which tbOnTick calls: imported so that it runs first.
	_ "github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"
)

var handler func()

func init() { bridge.Linked[bridge.Tick] = true }

// Handle registers f as the plugin's on_tick hook. Call it once, in func init(): a plugin's
// main function is never run. If f is nil or Handle is called twice, the broker refuses to
// load the plugin, and says why.
//
// f has no message: it may emit messages with plugin.Emit, use the plugin's store and
// metrics, and log. A tick still running when the next one is due makes the broker skip that
// one.
func Handle(f func()) {
	if bridge.Register(bridge.Tick, f == nil) {
		handler = f
	}
}

//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_on_tick
func tbOnTick() int64 { return bridge.Run[bridge.Tick](handler) }
