package abi

// The ABI as data: every host function the guest imports, every function it exports, and every
// number both sides must agree on. It is the single source of the ABI's names, signatures and
// constants: the host registers its functions and checks exports from it (package plugins),
// the Go guest SDK uses the constants above, and `make generate` (internal/abi/gen) writes
// from it the declarations of the C, Rust, Zig and AssemblyScript SDKs, the WAT examples'
// import lines, docs/ABI.md's reference and the WIT rendering (sdk/wit/tinybroker.wit). A host
// function or export is added here first.

// HostModule is the module the guest imports the host functions from.
const HostModule = "tinybroker"

// Marker is the export whose presence says a module speaks ABI v1; MarkerPrefix starts the
// marker of every version.
const (
	Marker       = "tinybroker_abi_v1"
	MarkerPrefix = "tinybroker_abi_v"
)

// Kind is the type of a value crossing the ABI, with its role: the generators render it in
// each language (a pointer the guest gives is const in C, one the host writes is not).
type Kind uint8

const (
	None Kind = iota // no result
	I32              // a number
	I64              // a number
	In               // a pointer (i32) to bytes the guest gives the host
	Out              // a pointer (i32) to a buffer the host writes
	Len              // the length (i32) of the pointer before it, or a buffer's capacity
)

// Param is one parameter of a function.
type Param struct {
	Name string
	Kind Kind
	// Bytes marks an In or Out value that is any bytes, not UTF-8 text (a payload): the WIT
	// rendering gives it as list<u8>, and text as string.
	Bytes bool
}

// Ret is what a function's i32 result means beyond its type. The core signature is the same
// whatever it is; the WIT rendering, which has types for these meanings, needs it.
type Ret uint8

const (
	Number Ret = iota // a number: a count, an attempt, an address
	Length            // a reader's: the value's full length, whatever the buffer's capacity
	Absent            // a reader's length, or -1: the value is absent
	Status            // STATUS_OK or an error status
	Handle            // a handle (>= 0), or an error status
)

// Func is one function crossing the ABI.
type Func struct {
	Name   string
	Params []Param
	Result Kind
	Ret    Ret    // what an I32 Result means
	Group  string // the section of docs/ABI.md it is listed in
	Hooks  string // the hooks it acts in, for the docs ("all", "publish", ...; "" for everywhere)
	Doc    string // what it does, one sentence or two, for the docs and the generated comments
}

// Groups of the host functions, in the docs' order.
const (
	GroupEverywhere = "Everywhere"
	GroupMessage    = "The message of the hook"
	GroupEvent      = "The event of the hook"
	GroupEmit       = "Emitting messages"
	GroupState      = "State"
)

// GroupMetrics lists the host functions of the metrics a plugin defines.
const GroupMetrics = "Metrics"

func p(name string, k Kind) Param { return Param{Name: name, Kind: k} }

// bin is p for a value of any bytes.
func bin(name string, k Kind) Param { return Param{Name: name, Kind: k, Bytes: true} }

// HostFuncs are the functions of HostModule, in the order the docs list them.
var HostFuncs = []Func{
	{Name: "v1_log", Params: []Param{p("level", I32), p("ptr", In), p("len", Len)}, Group: GroupEverywhere,
		Doc: "log a line through the broker's logger, tagged with the plugin's name. Levels: 0 trace, 1 debug, 2 info, 3 warn, 4 error"},
	{Name: "v1_now", Result: I64, Group: GroupEverywhere,
		Doc: "wall-clock time, nanoseconds since the Unix epoch"},
	{Name: "v1_config", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupEverywhere,
		Doc: "the plugin's whole configuration text, \"key=value\" lines (see Configuration)"},
	{Name: "v1_config_get", Params: []Param{p("key", In), p("key_len", Len), p("buf", Out), p("cap", Len)}, Result: I32, Ret: Absent, Group: GroupEverywhere,
		Doc: "one configuration value by key, or -1"},
	{Name: "v1_set_reason", Params: []Param{p("ptr", In), p("len", Len)}, Group: GroupEverywhere,
		Doc: "the reason for the verdict of this call: why a message is dropped, rejected or dead-lettered, or why the init hook failed. The last call wins"},

	{Name: "v1_msg_topic", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupMessage, Hooks: "all",
		Doc: "the topic"},
	{Name: "v1_msg_payload", Params: []Param{bin("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupMessage, Hooks: "all",
		Doc: "the payload"},
	{Name: "v1_msg_header", Params: []Param{p("key", In), p("key_len", Len), p("buf", Out), p("cap", Len)}, Result: I32, Ret: Absent, Group: GroupMessage, Hooks: "all",
		Doc: "one header's value, or -1"},
	{Name: "v1_msg_header_count", Result: I32, Group: GroupMessage, Hooks: "all",
		Doc: "how many headers"},
	{Name: "v1_msg_header_name", Params: []Param{p("index", I32), p("buf", Out), p("cap", Len)}, Result: I32, Ret: Absent, Group: GroupMessage, Hooks: "all",
		Doc: "the name of header index (0-based, sorted by name), or -1 past the end"},
	{Name: "v1_msg_id", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Absent, Group: GroupMessage, Hooks: "ack, redeliver",
		Doc: "the message's system_id; -1 (absent) in on_publish: none is assigned yet"},
	{Name: "v1_msg_set_topic", Params: []Param{p("ptr", In), p("len", Len)}, Result: I32, Ret: Status, Group: GroupMessage, Hooks: "publish",
		Doc: "route the message to this topic instead"},
	{Name: "v1_msg_set_payload", Params: []Param{bin("ptr", In), p("len", Len)}, Result: I32, Ret: Status, Group: GroupMessage, Hooks: "publish",
		Doc: "replace the payload"},
	{Name: "v1_msg_set_header", Params: []Param{p("key", In), p("key_len", Len), p("val", In), p("val_len", Len)}, Result: I32, Ret: Status, Group: GroupMessage, Hooks: "publish, redeliver",
		Doc: "add or replace a header"},
	{Name: "v1_msg_del_header", Params: []Param{p("key", In), p("key_len", Len)}, Result: I32, Ret: Status, Group: GroupMessage, Hooks: "publish, redeliver",
		Doc: "remove a header (OK if absent)"},
	{Name: "v1_msg_key", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupMessage, Hooks: "all",
		Doc: "the message's ordering key; 0 (empty) if it has none. Not in the inbox: read it with this call"},
	{Name: "v1_msg_set_key", Params: []Param{p("ptr", In), p("len", Len)}, Result: I32, Ret: Status, Group: GroupMessage, Hooks: "publish",
		Doc: "set the message's ordering key, or remove it (len 0): at most MAX_KEY_BYTES (ERR_TOO_LARGE) of UTF-8 without control characters (ERR_INVALID)"},

	{Name: "v1_event_subscription", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupEvent, Hooks: "ack, redeliver",
		Doc: "the subscription_id of the consumer group"},
	{Name: "v1_event_group", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupEvent, Hooks: "ack, redeliver",
		Doc: "the consumer_group name"},
	{Name: "v1_event_attempt", Result: I32, Group: GroupEvent, Hooks: "ack, redeliver",
		Doc: "the delivery attempt that was acked, or that failed (1 = first)"},
	{Name: "v1_event_in_flight_ns", Result: I64, Group: GroupEvent, Hooks: "ack",
		Doc: "nanoseconds from that delivery to its ack"},
	{Name: "v1_event_reason", Params: []Param{p("buf", Out), p("cap", Len)}, Result: I32, Ret: Length, Group: GroupEvent, Hooks: "redeliver",
		Doc: "why: \"nack\" (or the nack's own reason), \"ack deadline exceeded\", \"member left\""},

	{Name: "v1_emit", Params: []Param{p("topic", In), p("topic_len", Len), bin("payload", In), p("payload_len", Len)}, Result: I32, Ret: Handle, Group: GroupEmit,
		Doc: "emit a new message; returns a handle (>= 0) for v1_emit_header, or an error status"},
	{Name: "v1_emit_header", Params: []Param{p("handle", I32), p("key", In), p("key_len", Len), p("val", In), p("val_len", Len)}, Result: I32, Ret: Status, Group: GroupEmit,
		Doc: "set a header of an emitted message"},
	{Name: "v1_emit_key", Params: []Param{p("handle", I32), p("ptr", In), p("len", Len)}, Result: I32, Ret: Status, Group: GroupEmit,
		Doc: "set the ordering key of an emitted message, checked as v1_msg_set_key's"},

	{Name: "v1_kv_get", Params: []Param{p("key", In), p("key_len", Len), bin("buf", Out), p("cap", Len)}, Result: I32, Ret: Absent, Group: GroupState, Hooks: "all",
		Doc: "the value of key in the plugin's store, or -1: absent, expired, or a key no write could have made (empty, over KV_MAX_KEY_BYTES)"},
	{Name: "v1_kv_set", Params: []Param{p("key", In), p("key_len", Len), bin("val", In), p("val_len", Len), p("ttl_ms", I64)}, Result: I32, Ret: Status, Group: GroupState, Hooks: "all",
		Doc: "set key to the value, expiring after ttl_ms milliseconds (0: never). ERR_INVALID: an empty key or a negative ttl_ms; ERR_TOO_LARGE: a key over KV_MAX_KEY_BYTES or a value over the plugin's kv_max_value_bytes; ERR_LIMIT: the store would pass the plugin's kv_max_bytes"},
	{Name: "v1_kv_cas", Params: []Param{p("key", In), p("key_len", Len), bin("old", In), p("old_len", Len), bin("val", In), p("val_len", Len), p("ttl_ms", I64)}, Result: I32, Ret: Status, Group: GroupState, Hooks: "all",
		Doc: "compare-and-set: set key to val (as v1_kv_set) only if its value is old now; an empty old means the key must be absent. ERR_CONFLICT: it is not, and nothing changed; other errors as v1_kv_set's"},
	{Name: "v1_kv_delete", Params: []Param{p("key", In), p("key_len", Len)}, Result: I32, Ret: Status, Group: GroupState, Hooks: "all",
		Doc: "remove key from the plugin's store (OK if absent)"},

	{Name: "v1_metric_define", Params: []Param{p("kind", I32), p("name", In), p("name_len", Len), p("help", In), p("help_len", Len), p("label", In), p("label_len", Len), p("buckets", In), p("buckets_len", Len)}, Result: I32, Ret: Handle, Group: GroupMetrics,
		Doc: "define a metric of the plugin, or find the one defined under that name (any instance, any load of the plugin): its id (>= 0), or an error status. kind: METRIC_COUNTER, METRIC_GAUGE or METRIC_HISTOGRAM; name: [a-zA-Z_][a-zA-Z0-9_]*, at most MAX_METRIC_NAME bytes, exported as tinybroker_plugin_<plugin>_<name>; help: UTF-8 text; label: one label name, or none (len 0); buckets: a histogram's increasing upper bounds, integers separated by commas, at most MAX_METRIC_BUCKETS, or none (len 0) for the default. ERR_INVALID for a malformed value, ERR_TOO_LARGE for one too long, ERR_LIMIT past MAX_METRICS, ERR_NOT_ALLOWED for a name defined with another kind, help, label or buckets"},
	{Name: "v1_metric_add", Params: []Param{p("id", I32), p("value", I64), p("label_value", In), p("label_value_len", Len)}, Result: I32, Ret: Status, Group: GroupMetrics,
		Doc: "add value to a counter (value >= 0) or a gauge, in the series of label_value (len 0 for a metric without a label). Past MAX_METRIC_SERIES label values, the value is counted under \"_other\" and the call returns ERR_LIMIT"},
	{Name: "v1_metric_set", Params: []Param{p("id", I32), p("value", I64), p("label_value", In), p("label_value_len", Len)}, Result: I32, Ret: Status, Group: GroupMetrics,
		Doc: "set a gauge, as v1_metric_add adds"},
	{Name: "v1_metric_observe", Params: []Param{p("id", I32), p("value", I64), p("label_value", In), p("label_value_len", Len)}, Result: I32, Ret: Status, Group: GroupMetrics,
		Doc: "record value in a histogram, as v1_metric_add adds"},
}

// Export is a function the guest exports for the host to call.
type Export struct {
	Func
	// Old is the name plugins built before every export carried the ABI version used: the
	// host still accepts it when Name is absent ("" if the export never had another name).
	Old string
	// Hook is the hook it is, if any.
	Hook Hook
}

// The exports the host calls, by version-carrying name. Every name exported for the host
// carries the version (tb_v1_*); the hooks' first names did not, and stay accepted.
var Exports = []Export{
	{Func: Func{Name: "tb_v1_init", Result: I32, Doc: "called once per instance, before any hook: 0 accepts the configuration, anything else refuses the load (say why with v1_set_reason)"},
		Old: "tb_init", Hook: HookInit},
	{Func: Func{Name: "tb_v1_on_publish", Result: I64, Doc: "before routing: the on_publish verdict"},
		Old: "tb_on_publish", Hook: HookPublish},
	{Func: Func{Name: "tb_v1_on_ack", Result: I64, Doc: "after a consumer group member acked a message"},
		Old: "tb_on_ack", Hook: HookAck},
	{Func: Func{Name: "tb_v1_on_redeliver", Result: I64, Doc: "before an unacked message is redelivered: the on_redeliver verdict"},
		Old: "tb_on_redeliver", Hook: HookRedeliver},
	{Func: Func{Name: "tb_v1_on_tick", Result: I64, Doc: "every tick_interval, with no message: 0. It may emit, use its store and metrics, and log"},
		Hook: HookTick},
	{Func: Func{Name: InboxExport, Params: []Param{p("size", I32)}, Result: I32, Doc: "the address of a buffer of at least size bytes, a multiple of 8, where the broker writes each call's message (The inbox)"}},
	{Func: Func{Name: BatchExport, Result: I32, Doc: "runs on_publish over the messages of a publish frame, in the inbox (Batches)"}},
}

// HookExport returns the export of hook h, and its old name.
func HookExport(h Hook) (name, old string) {
	for _, e := range Exports {
		if e.Hook == h && h != HookNone {
			return e.Name, e.Old
		}
	}
	return "", ""
}

// Const is a number both sides must agree on.
type Const struct {
	Name  string // in the generated code: TB_ABI_<Name> in C, <Name> elsewhere
	Value int64
	Group string
	Doc   string
}

// Consts are every number of the ABI, for the generators; the Go constants above are the same
// numbers (a test holds them equal).
var Consts = []Const{
	{"STATUS_OK", StatusOK, "status", "done"},
	{"STATUS_INVALID", StatusInvalid, "status", "a malformed value"},
	{"STATUS_TOO_LARGE", StatusTooLarge, "status", "over a broker limit"},
	{"STATUS_NOT_ALLOWED", StatusNotAllowed, "status", "not in this hook"},
	{"STATUS_LIMIT", StatusLimit, "status", "too many emits, or the plugin's store is full"},
	{"STATUS_CONFLICT", StatusConflict, "status", "a compare-and-set whose old value is not the current one"},

	{"ACT_PASS", ActPass, "on_publish action", "continue with the message as changed"},
	{"ACT_DROP", ActDrop, "on_publish action", "drop the message (counted)"},
	{"ACT_REJECT", ActReject, "on_publish action", "refuse the publish; argument: a gRPC status code"},
	{"ACT_REDELIVER", ActRedeliver, "on_redeliver action", "the broker's default"},
	{"ACT_DELAY", ActDelay, "on_redeliver action", "redeliver after the argument, in milliseconds"},
	{"ACT_DEAD_LETTER", ActDeadLetter, "on_redeliver action", "dead-letter now"},
	{"ACT_FORGET", ActForget, "on_redeliver action", "drop the message (counted)"},

	{"HOOK_INIT", int64(HookInit), "hook", "the init hook (the inbox's hook field)"},
	{"HOOK_PUBLISH", int64(HookPublish), "hook", "on_publish"},
	{"HOOK_ACK", int64(HookAck), "hook", "on_ack"},
	{"HOOK_REDELIVER", int64(HookRedeliver), "hook", "on_redeliver"},
	{"HOOK_TICK", int64(HookTick), "hook", "on_tick"},

	{"IN_WRITES_PTR", InWritesPtr, "inbox", "u32: the write list the guest leaves"},
	{"IN_WRITES_COUNT", InWritesCount, "inbox", "u32: its records"},
	{"IN_HOOK", InHook, "inbox", "u32: the hook called"},
	{"IN_MAX_MESSAGE", InMaxMessage, "inbox", "u32: max_message_bytes"},
	{"IN_MAX_HEADER", InMaxHeader, "inbox", "u32: max_header_bytes"},
	{"IN_ATTEMPT", InAttempt, "inbox", "u32: the event's delivery attempt"},
	{"IN_IN_FLIGHT", InInFlight, "inbox", "u64: the event's nanoseconds from delivery to ack"},
	{"IN_TOPIC", InTopic, "inbox", "(offset, length)"},
	{"IN_PAYLOAD", InPayload, "inbox", "(offset, length)"},
	{"IN_ID", InID, "inbox", "(offset, length)"},
	{"IN_SUB", InSub, "inbox", "(offset, length)"},
	{"IN_GROUP", InGroup, "inbox", "(offset, length)"},
	{"IN_REASON", InReason, "inbox", "(offset, length)"},
	{"IN_HEADER_COUNT", InHeaderCount, "inbox", "u32"},
	{"IN_FLAGS", InFlags, "inbox", "u32: none yet"},
	{"IN_HEADERS", InHeaders, "inbox", "the header table"},
	{"IN_ENTRY", InEntry, "inbox", "bytes of one header entry"},
	{"ABSENT_LEN", AbsentLen, "inbox", "the length of an absent value"},

	{"MAX_KEY_BYTES", MaxKeyBytes, "limit", "the longest message key, in bytes (v1_msg_set_key, v1_emit_key)"},
	{"KV_MAX_KEY_BYTES", KVMaxKeyBytes, "limit", "the longest key of the plugin's store, in bytes (v1_kv_*)"},

	{"WRITE_SIZE", WriteSize, "write list", "bytes of one record"},
	{"OP_SET_PAYLOAD", OpSetPayload, "write list", "a: the payload"},
	{"OP_SET_HEADER", OpSetHeader, "write list", "a: name, b: value"},
	{"OP_DEL_HEADER", OpDelHeader, "write list", "a: name"},
	{"OP_SET_REASON", OpSetReason, "write list", "a: the reason"},

	{"BATCH_COUNT", BatchCount, "batch", "u32: how many messages"},
	{"BATCH_CURRENT", BatchCurrent, "batch", "u32: the message host functions act on"},
	{"BATCH_ENTRIES", BatchEntries, "batch", "the entries"},
	{"BATCH_ENTRY", BatchEntry, "batch", "bytes of one entry"},
	{"ENTRY_OFFSET", EntryOffset, "batch", "u32: record offset"},
	{"ENTRY_LENGTH", EntryLength, "batch", "u32: record length"},
	{"ENTRY_VERDICT", EntryVerdict, "batch", "u64: the guest's verdict"},

	{"METRIC_COUNTER", MetricCounter, "metric", "v1_metric_define's kind: a counter (v1_metric_add, value >= 0)"},
	{"METRIC_GAUGE", MetricGauge, "metric", "a gauge (v1_metric_add, v1_metric_set)"},
	{"METRIC_HISTOGRAM", MetricHistogram, "metric", "a histogram (v1_metric_observe)"},
	{"MAX_METRICS", MaxMetrics, "metric", "the most metrics one plugin defines"},
	{"MAX_METRIC_SERIES", MaxMetricSeries, "metric", "the most label values one metric has; past them values count under \"_other\""},
	{"MAX_METRIC_NAME", MaxMetricName, "metric", "the longest metric or label name, in bytes"},
	{"MAX_METRIC_HELP", MaxMetricHelp, "metric", "the longest help text, in bytes"},
	{"MAX_METRIC_LABEL_VALUE", MaxMetricLabelValue, "metric", "the longest label value, in bytes"},
	{"MAX_METRIC_BUCKETS", MaxMetricBuckets, "metric", "the most bucket bounds of a histogram"},
}
