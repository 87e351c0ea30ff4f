// Package bridge connects package plugin to the hook packages (onpublish, onack,
// onredeliver, ontick). Each hook package holds its own //go:wasmexport, so that a plugin exports a
// hook exactly when it imports that hook's package; this package is how those exports reach
// the SDK's call machinery, which lives in package plugin, without an import cycle.
package bridge

import "github.com/tinybroker/tinybroker/internal/abi"

// The hooks, as internal/abi numbers them: the arrays below are indexed by them.
const (
	Publish   = abi.HookPublish
	Ack       = abi.HookAck
	Redeliver = abi.HookRedeliver
	Tick      = abi.HookTick
	NumHooks  = abi.NumHooks
)

// Packages are the names of the hooks' packages.
var Packages = [NumHooks]string{Publish: "onpublish", Ack: "onack", Redeliver: "onredeliver", Tick: "ontick"}

var (
	// Linked[h] is set by hook h's package when it is initialised, i.e. when the plugin
	// imports it and so exports the hook.
	Linked [NumHooks]bool
	// Handled[h] is set when the plugin registers its function for hook h.
	Handled [NumHooks]bool
)

// Misuse is the first mistake made registering the plugin's functions (a nil function, a
// hook registered twice). Those happen in package init functions, where a panic would only
// reach the plugin's stderr, which the broker discards; tb_v1_init reports it instead, refusing
// the load.
var Misuse string

// Register records the registration of hook h's function, or a mistake in it.
func Register(h abi.Hook, isNil bool) (ok bool) {
	switch {
	case isNil:
		misuse(Packages[h] + ".Handle was called with a nil function")
	case Handled[h]:
		misuse(Packages[h] + ".Handle was called twice")
	default:
		Handled[h] = true
		return true
	}
	return false
}

func misuse(s string) {
	if Misuse == "" {
		Misuse = s
	}
}

// MisuseInit records a mistake in registering the Init function.
func MisuseInit(s string) { misuse(s) }

// Run[h] runs the user's function for hook h, passed as an any holding the hook package's
// function type (nil if none was registered), and returns the encoded verdict. Package
// plugin sets it in its init, which runs before the hook packages' (they import plugin).
var Run [NumHooks]func(fn any) int64

// RunPublishBatch runs the user's on_publish function, passed as Run[Publish]'s is, on each
// message of a batch (tb_v1_on_publish_batch, exported by package onpublish when the plugin
// is built with the inbox), and returns the batch's answer. Package plugin sets it too.
var RunPublishBatch func(fn any) int32
