//go:build wasip1 && tinybroker_inbox

package plugin

// tbV1Inbox is the broker asking for the inbox (inbox.go): it writes each call's message
// there, so that reading it costs no host call. Built only with the tag tinybroker_inbox:
// for a plugin that reads one header of each message the inbox costs a little more than the
// host call it saves, so it is not the default (BENCHMARKS.md, "The inbox, measured").
//
//go:wasmexport tb_v1_inbox
func tbV1Inbox(size uint32) uint32 { return newInbox(size) }
