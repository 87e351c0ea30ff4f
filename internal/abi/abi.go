// Package abi holds the numbers of the plugin ABI, version 1 (docs/ABI.md), that the host
// (package plugins) and the Go guest SDK (sdk/go/plugin) must agree on. It imports nothing,
// so that it builds for the wasip1 guests too.
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
