// Package onpublish registers a plugin's on_publish hook: a function the broker calls for
// every published message whose topic matches the plugin's topics, before routing, to pass,
// change, re-route, drop or reject it.
//
// Importing this package is what makes the plugin export tb_v1_on_publish: import it only in a
// plugin that implements the hook, and call Handle in func init(). Unless built with the tag
// tinybroker_noinbox, it also exports tb_v1_on_publish_batch, through which the broker gives a
// publish frame's messages in one call: the function given to Handle runs on each of them in
// turn, and may run twice for a message (a batch that fails is run again message by message).
package onpublish

import (
	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"
)

var handler func(*plugin.Message) plugin.Verdict

func init() { bridge.Linked[bridge.Publish] = true }

// Handle registers f as the plugin's on_publish hook. Call it once, in func init(): a
// plugin's main function is never run. If f is nil or Handle is called twice, the broker
// refuses to load the plugin, and says why.
//
// f returns plugin.Pass() to let the message continue, with the changes f made to it
// (Message.SetTopic, SetPayload, SetHeader, DelHeader), plugin.Drop to drop it, or
// plugin.Reject to refuse the publish. Messages f emits (plugin.Emit) are published whatever
// the verdict. If f panics, the panic is logged and the broker applies the plugin's
// failure_policy.
func Handle(f func(m *plugin.Message) plugin.Verdict) {
	if bridge.Register(bridge.Publish, f == nil) {
		handler = f
	}
}

//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_on_publish
func tbOnPublish() int64 { return bridge.Run[bridge.Publish](handler) }
