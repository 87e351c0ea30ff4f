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
	StatusLimit      = -4 // too many emits, a full store, or the like
	StatusConflict   = -5 // a compare-and-set whose old value is not the current one
)

// MaxKeyBytes is the longest message key, in bytes: the broker's limit (broker.ValidateKey),
// which a test holds equal (package plugins).
const MaxKeyBytes = 256

// KVMaxKeyBytes is the longest key of a plugin's key-value store (v1_kv_*), in bytes. Fixed,
// not configured: keys name things, and a plugin that needs a longer one can hash it.
const KVMaxKeyBytes = 256

// Verdict actions: the low 32 bits of the i64 a hook returns; the high 32 bits are the
// action's argument.
const (
	// tb_v1_on_publish
	ActPass   = 0
	ActDrop   = 1
	ActReject = 2 // argument: a gRPC status code

	// tb_v1_on_redeliver
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
	HookTick           // every tick_interval, with no message (Spec.TickInterval)
	NumHooks
)

// The names of the hooks a plugin block's hooks list may give.
const (
	NamePublish   = "on_publish"
	NameAck       = "on_ack"
	NameRedeliver = "on_redeliver"
	NameTick      = "on_tick"
)

// Names are the hooks' names in the configuration and in logs; their exports are in Exports
// (table.go).
var Names = [NumHooks]string{HookInit: "init", HookPublish: NamePublish, HookAck: NameAck, HookRedeliver: NameRedeliver, HookTick: NameTick}

// InboxExport is the optional export through which the host asks a plugin for its inbox
// (docs/ABI.md, "The inbox"): the message and event written into the plugin's memory before
// each call, and the write list it leaves for the host.
const InboxExport = "tb_v1_inbox"

// The inbox's layout: little-endian u32 fields at fixed offsets, then the header table, then
// the bytes. Offsets of values are from the inbox's start.
const (
	InWritesPtr   = 0  // the guest's: the write list it leaves, zeroed before every call
	InWritesCount = 4  //
	InHook        = 8  // Hook: 1 init, 2 on_publish, 3 on_ack, 4 on_redeliver, 5 on_tick
	InMaxMessage  = 12 // the limits the host checks the writes against
	InMaxHeader   = 16 //
	InAttempt     = 20 // the event's delivery attempt
	InInFlight    = 24 // u64: the event's nanoseconds from delivery to ack
	InTopic       = 32 // (offset, length) pairs
	InPayload     = 40 //
	InID          = 48 // length AbsentLen in on_publish and tb_v1_init
	InSub         = 56 //
	InGroup       = 64 //
	InReason      = 72 //
	InHeaderCount = 80 //
	InFlags       = 84 // none yet: 0
	InHeaders     = 88 // InHeaderCount entries (name offset, name length, value offset, value length), sorted by name
	InEntry       = 16

	AbsentLen = 0xFFFFFFFF // the length of a value that is absent
)

// The write list: records of WriteSize bytes, five u32 each: an operation, then two
// (pointer, length) pairs into the guest's memory.
const (
	WriteSize = 20

	OpSetPayload = 1 // a
	OpSetHeader  = 2 // name a, value b
	OpDelHeader  = 3 // name a
	OpSetReason  = 4 // a
)

// BatchExport is the optional export that takes a publish frame's messages in one call
// (docs/ABI.md, "Batches"): () -> i32, with the messages in the inbox.
const BatchExport = "tb_v1_on_publish_batch"

// The layout of a batch in the inbox: a header, BatchCount entries, then one record per
// message, each laid out as a single call's inbox (the In* offsets) with its offsets counted
// from the record's start.
const (
	BatchCount   = 0  // u32: how many messages
	BatchCurrent = 4  // u32: the message host functions act on; the guest's to set
	BatchEntries = 16 // BatchCount entries of BatchEntry bytes:
	BatchEntry   = 16 // record offset (from the inbox's start), record length, u64 verdict (the guest's)

	EntryOffset  = 0
	EntryLength  = 4
	EntryVerdict = 8
)

// The metrics a plugin defines (docs/ABI.md, "Metrics"): their kinds, v1_metric_define's kind
// argument, and the bounds on what a plugin can make the broker hold for them.
const (
	MetricCounter   = 1
	MetricGauge     = 2
	MetricHistogram = 3

	MaxMetrics          = 32  // per plugin, across its instances and reloads
	MaxMetricSeries     = 100 // label values per metric, "_other" included
	MaxMetricName       = 64  // bytes of a metric's name or its label's
	MaxMetricHelp       = 256 // bytes of its help
	MaxMetricLabelValue = 64  // bytes of a label value
	MaxMetricBuckets    = 32  // bucket bounds of a histogram
)
