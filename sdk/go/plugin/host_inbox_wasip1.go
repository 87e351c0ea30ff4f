//go:build wasip1 && !tinybroker_noinbox

package plugin

// tbV1Inbox is the broker asking for the inbox (inbox.go): it writes each call's message
// there, so that reading it costs no host call, and gives it a publish frame's messages in one
// call (batch.go). The default; the tag tinybroker_noinbox leaves it out, and the SDK then
// reads everything through host calls (docs/benchmarks/plugin-passes.md, "Plugin calls, fifth pass": with the
// inbox a Go filter costs about the same alone and ~40% less in frames).
//
//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_inbox
func tbV1Inbox(size uint32) uint32 { return newInbox(size) }
