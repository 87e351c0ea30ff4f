// Package plugin is the Go SDK for tinybroker plugins: WebAssembly modules, built with
// GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, that the broker runs to filter, transform and
// re-route messages before they are routed, and to react to acks and redeliveries. It
// implements the guest side of the plugin ABI, docs/ABI.md in the tinybroker repository.
//
// A plugin is a main package that registers its functions in func init() (a plugin's main
// function is never run: the module is a library that the broker calls into):
//
//	package main
//
//	import (
//		"github.com/tinybroker/tinybroker/sdk/go/plugin"
//		"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
//	)
//
//	func init() {
//		onpublish.Handle(func(m *plugin.Message) plugin.Verdict {
//			if _, ok := m.Header("tenant"); !ok {
//				return plugin.Reject(plugin.InvalidArgument, "a tenant header is required")
//			}
//			return plugin.Pass()
//		})
//	}
//
//	func main() {}
//
// Each hook has its own package, [onpublish], [onack] and [onredeliver], whose Handle
// function registers the plugin's function for it. Importing a hook's package is what makes
// the module export that hook, so a plugin exports exactly the hooks it implements and the
// broker calls nothing else. [Init] registers a function that checks the plugin's
// configuration once per instance, before any hook runs.
//
// Everything else in this package — [Message], [Event], [Emit], [Log], [Now], [Config] — may
// be used only while a hook (or the Init function) runs: outside a call there is no message,
// and the broker is not listening. A plugin instance serves one call at a time, so a plugin
// needs no locking; globals persist between the calls one instance serves, but the broker
// runs several instances and a plugin must not rely on seeing every message in one of them.
//
// By default the SDK reads each message from the plugin's memory,
// where the broker writes it before the call, rather than asking the broker for each field
// (docs/ABI.md, "The inbox"), and takes batches: [onpublish] also exports
// tb_v1_on_publish_batch, through which the broker gives a publish frame's messages in one
// call, and the SDK runs the on_publish function on each of them in turn (docs/ABI.md,
// "Batches"). The plugin's code does not change, but its on_publish function may run twice
// for a message (a batch that panics or traps is run again one message at a time), and one
// call serves several messages: keep nothing per message in globals that assumes one call per
// export. The tag tinybroker_noinbox builds a plugin without the inbox and batches, which
// reads each field with a host call (the tag tinybroker_inbox, which once turned them on, is
// still accepted and changes nothing).
//
// The package builds on every platform, so that a plugin's packages can be vetted and their
// pure functions tested natively, but its host functions work only in a WebAssembly plugin:
// elsewhere they panic.
//
// [onpublish]: https://pkg.go.dev/github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish
// [onack]: https://pkg.go.dev/github.com/tinybroker/tinybroker/sdk/go/plugin/onack
// [onredeliver]: https://pkg.go.dev/github.com/tinybroker/tinybroker/sdk/go/plugin/onredeliver
package plugin
