// Package abi holds the numbers and names of the plugin ABI, version 1 (docs/ABI.md), that
// the host (package plugins) and the Go guest SDK (sdk/go/plugin) must agree on: status codes,
// verdict actions and the hooks. It imports nothing, so that it builds for the wasip1 guests
// too.
package abi

// Status codes the host functions that write return to the guest.
const (
	StatusOK         = 0
	StatusInvalid    = -1 // a malformed value
	StatusTooLarge   = -2 // over a broker limit
	StatusNotAllowed = -3 // not in this hook
	StatusLimit      = -4 // too many emits, or the like
)

// Verdict actions: the low 32 bits of the i64 a hook returns; the high 32 bits are the
// action's argument.
const (
	// tb_on_publish
	ActPass   = 0
	ActDrop   = 1
	ActReject = 2 // argument: a gRPC status code

	// tb_on_redeliver
	ActRedeliver  = 0
	ActDelay      = 1 // argument: milliseconds
	ActDeadLetter = 2
	ActForget     = 3
)

// Hook identifies one of the functions a plugin exports for the host to call. The zero Hook
// is none: the SDK is between calls.
type Hook uint8

const (
	HookNone      Hook = iota
	HookInit           // once per instance, before any other hook
	HookPublish        // on a message being published
	HookAck            // after an ack
	HookRedeliver      // before a message taken back from a member is redelivered
	NumHooks
)

// The names of the hooks a plugin block's hooks list may give.
const (
	NamePublish   = "on_publish"
	NameAck       = "on_ack"
	NameRedeliver = "on_redeliver"
)

var (
	// Exports are the hooks' export names.
	Exports = [NumHooks]string{HookInit: "tb_init", HookPublish: "tb_on_publish", HookAck: "tb_on_ack", HookRedeliver: "tb_on_redeliver"}
	// Names are the hooks' names in the configuration and in logs.
	Names = [NumHooks]string{HookInit: "init", HookPublish: NamePublish, HookAck: NameAck, HookRedeliver: NameRedeliver}
)
