// Package onredeliver registers a plugin's on_redeliver hook: a function the broker calls
// when a message of a matching consumer group is about to be redelivered — after a nack, an
// ack deadline, or when its member left — to implement a retry policy.
//
// Importing this package is what makes the plugin export tb_v1_on_redeliver: import it only in
// a plugin that implements the hook, and call Handle in func init().
package onredeliver

import (
	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"
)

var handler func(*plugin.Message, plugin.Event) plugin.RedeliverVerdict

func init() { bridge.Linked[bridge.Redeliver] = true }

// Handle registers f as the plugin's on_redeliver hook. Call it once, in func init(): a
// plugin's main function is never run. If f is nil or Handle is called twice, the broker
// refuses to load the plugin, and says why.
//
// f runs before the group's max_deliveries is checked. It returns plugin.Redeliver() for the
// broker's default, plugin.Delay to redeliver after a delay of its choosing,
// plugin.DeadLetter or plugin.DropMessage. It may change the message's headers
// (Message.SetHeader, DelHeader): the changes are kept on the redelivered or dead-lettered
// message.
func Handle(f func(m *plugin.Message, ev plugin.Event) plugin.RedeliverVerdict) {
	if bridge.Register(bridge.Redeliver, f == nil) {
		handler = f
	}
}

//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_on_redeliver
func tbOnRedeliver() int64 { return bridge.Run[bridge.Redeliver](handler) }
