// Package bridge connects package plugin to the hook packages (onpublish, onack,
// onredeliver). Each hook package holds its own //go:wasmexport, so that a plugin exports a
// hook exactly when it imports that hook's package; this package is how those exports reach
// the SDK's call machinery, which lives in package plugin, without an import cycle.
package bridge

// Hook numbers.
const (
	Publish = iota
	Ack
	Redeliver
	NumHooks
)

// Names of the hooks' packages and exports, by hook number.
var (
	Packages = [NumHooks]string{"onpublish", "onack", "onredeliver"}
	Exports  = [NumHooks]string{"tb_on_publish", "tb_on_ack", "tb_on_redeliver"}
)

var (
	// Linked[h] is set by hook h's package when it is initialised, i.e. when the plugin
	// imports it and so exports the hook.
	Linked [NumHooks]bool
	// Handled[h] is set when the plugin registers its function for hook h.
	Handled [NumHooks]bool
)

// Run[h] runs the user's function for hook h, passed as an any holding the hook package's
// function type (nil if none was registered), and returns the encoded verdict. Package
// plugin sets it in its init, which runs before the hook packages' (they import plugin).
var Run [NumHooks]func(fn any) int64
