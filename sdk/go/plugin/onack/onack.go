// Package onack registers a plugin's on_ack hook: a function the broker calls after a member
// of a matching consumer group acked a message, to continue a workflow by emitting messages,
// count, or audit.
//
// Importing this package is what makes the plugin export tb_v1_on_ack: import it only in a
// plugin that implements the hook, and call Handle in func init().
package onack

import (
	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"
)

var handler func(*plugin.Message, plugin.Event)

func init() { bridge.Linked[bridge.Ack] = true }

// Handle registers f as the plugin's on_ack hook. Call it once, in func init(): a
// plugin's main function is never run. If f is nil or Handle is called twice, the broker
// refuses to load the plugin, and says why.
//
// The ack has been applied when f runs: f cannot undo it, nor change the message. It can
// read the message and the event (its group, attempt and time in flight) and emit messages
// with plugin.Emit.
func Handle(f func(m *plugin.Message, ev plugin.Event)) {
	if bridge.Register(bridge.Ack, f == nil) {
		handler = f
	}
}

//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_on_ack
func tbOnAck() int64 { return bridge.Run[bridge.Ack](handler) }
