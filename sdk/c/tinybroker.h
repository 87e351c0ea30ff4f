/*
 * tinybroker.h — the C SDK for tinybroker plugins, ABI version 1 (docs/ABI.md is the contract;
 * docs/plugins/c.md is the guide).
 *
 * No libc and no malloc: a header and one source file, tinybroker.c. Build a plugin with
 *
 *   clang --target=wasm32 -nostdlib -O2 -I sdk/c -Wl,--no-entry \
 *         -o plugin.wasm plugin.c sdk/c/tinybroker.c
 *
 * (clang and wasm-ld: Debian's `clang lld`). The module exports its memory as "memory" and every
 * function marked TB_EXPORT (the TB_ON_* macros below do it for you); -Wl,--export-dynamic
 * would export every other non-static function too, which is harmless but useless. clang may
 * turn a copy loop into a call to memcpy (or memset, memmove, memcmp): tinybroker.c defines the
 * four, weakly, so the link works without a libc; -mbulk-memory makes clang use the memory.copy
 * and memory.fill instructions instead (wazero runs them).
 *
 * A plugin:
 *
 *   #include "tinybroker.h"
 *   TB_ABI_V1
 *
 *   TB_ON_PUBLISH(filter) {
 *       tb_str tenant = tb_header(TB_S("tenant"));
 *       if (!tb_list_has(tb_config_value(TB_S("allow")), ',', tenant))
 *           return tb_drop(TB_S("tenant not allowed"));
 *       return TB_PASS;
 *   }
 *
 * Strings are tb_str: bytes and a length, not NUL-terminated. The readers (tb_topic, tb_header,
 * ...) return the value where the host wrote it before the call (the inbox, see below) or
 * copied into the SDK's arena, the memory above the module's data, grown as needed; what they
 * return stays valid until the hook returns (the TB_ON_* and TB_INIT macros empty the arena
 * when a call begins). A value that is absent (a header not set, a config key not given) is
 * TB_NONE: its ptr is NULL; an empty one has a ptr and length 0.
 *
 * By default the SDK exports tb_v1_inbox (docs/ABI.md, "The inbox"): the broker writes each
 * call's message and event into the plugin's memory before the call, the readers find them
 * there without a host call, and tb_set_payload, tb_set_header, tb_del_header and the
 * verdicts' reasons are listed for the broker to apply when the hook returns. For a filter
 * that reads a single header of a message published alone it costs about what the host call
 * it saves does (the broker writes the whole message); in publish frames, below, much less
 * (docs/plugins/c.md). Built with -DTB_NO_INBOX (both files), the SDK leaves it out, and, as
 * under a broker that never calls tb_v1_inbox, every read is a host call; -DTB_INBOX, which
 * once turned it on, changes nothing. Either way, config values are read once per instance and
 * kept (the configuration never changes under an instance).
 *
 * The inbox build also takes batches (docs/ABI.md, "Batches"): TB_ON_PUBLISH exports
 * tb_v1_on_publish_batch too, through which the broker gives a publish frame's messages in one
 * call, and the SDK runs the plugin's on_publish function on each in turn (see "Batches" below).
 * The plugin's code does not change, but it may run twice for a message (a batch that traps is
 * run again one message at a time), and several messages go through one call: keep nothing per
 * message in static variables that assumes one call per export.
 *
 * What the plugin exports:
 *
 *   TB_ABI_V1             the version marker (required; write it once, at file scope)
 *   TB_INIT(fn)           optional: int32_t fn(void) runs once per instance; return 0 to accept
 *                         the configuration, or tb_refuse(reason) to refuse the load
 *   TB_ON_PUBLISH(fn)     int64_t fn(void): before routing; TB_PASS, tb_drop(reason),
 *                         tb_reject(code, reason)
 *   TB_ON_ACK(fn)         void fn(void): after an ack
 *   TB_ON_REDELIVER(fn)   int64_t fn(void): before a redelivery; TB_REDELIVER, TB_DELAY(ms),
 *                         tb_dead_letter(reason), tb_drop_message(reason)
 *   TB_ON_TICK(fn)        void fn(void): every tick_interval of the plugin's block, with no
 *                         message; it may emit, use the store and metrics, and log. Every
 *                         broker node ticks: for once-per-cluster work, take a lease with
 *                         tb_kv_swap and a TTL (docs/ABI.md, "Ticks")
 *
 * Export at least one hook; the broker calls only the hooks exported. Each instance serves one
 * call at a time, so static variables need no locking; they persist between the calls of an
 * instance (the broker runs several instances: do not count on seeing every message, nor, with
 * the inbox, on seeing each message once).
 *
 * Below the SDK are the host functions themselves (tb_msg_topic, tb_emit, ...), declared with
 * their import names, for plugins that manage their own buffers (see "Raw ABI"). A reader
 * copies min(len, cap) bytes into buf and returns the full length len (-1: absent); a writer
 * returns TB_OK or a negative TB_ERR_*.
 */
#ifndef TINYBROKER_H
#define TINYBROKER_H

/* The inbox and batches are the default; -DTB_NO_INBOX leaves them out. */
#if !defined(TB_NO_INBOX) && !defined(TB_INBOX)
#define TB_INBOX 1
#endif

#include <stdint.h> /* clang's own: needs no libc */

#define TB_IMPORT(name) __attribute__((import_module("tinybroker"), import_name(#name)))
#define TB_EXPORT(name) __attribute__((export_name(#name)))

/* The version marker: write TB_ABI_V1 once in a plugin, at file scope. */
#define TB_ABI_V1 TB_EXPORT(tinybroker_abi_v1) void tb_abi_v1(void) {}

/* Statuses of the writers. */
#define TB_OK TB_ABI_STATUS_OK
#define TB_ERR_INVALID TB_ABI_STATUS_INVALID     /* malformed: a bad topic, an empty or non-UTF-8 header */
#define TB_ERR_TOO_LARGE TB_ABI_STATUS_TOO_LARGE   /* over max_message_bytes / max_header_bytes */
#define TB_ERR_NOT_ALLOWED TB_ABI_STATUS_NOT_ALLOWED /* not in this hook */
#define TB_ERR_LIMIT TB_ABI_STATUS_LIMIT       /* max_emits used up, or the key-value store full */
#define TB_ERR_CONFLICT TB_ABI_STATUS_CONFLICT /* tb_kv_swap: the value was not the old one */

/* Verdicts: action | argument << 32. */
#define TB_VERDICT(action, arg) ((int64_t)(uint32_t)(action) | ((int64_t)(uint32_t)(arg) << 32))
/* tb_v1_on_publish */
#define TB_PASS TB_VERDICT(TB_ABI_ACT_PASS, 0)
#define TB_DROP TB_VERDICT(TB_ABI_ACT_DROP, 0)
#define TB_REJECT(grpc_code) TB_VERDICT(TB_ABI_ACT_REJECT, grpc_code) /* 1-16; 0 means INVALID_ARGUMENT */
/* tb_v1_on_redeliver */
#define TB_REDELIVER TB_VERDICT(TB_ABI_ACT_REDELIVER, 0)
#define TB_DELAY(ms) TB_VERDICT(TB_ABI_ACT_DELAY, ms) /* 1 to 2^31-1 */
#define TB_DEAD_LETTER TB_VERDICT(TB_ABI_ACT_DEAD_LETTER, 0)
#define TB_DROP_MESSAGE TB_VERDICT(TB_ABI_ACT_FORGET, 0) /* the ABI's DROP of on_redeliver */
#define TB_FORGET TB_DROP_MESSAGE        /* deprecated: the old name of TB_DROP_MESSAGE */

/* Log levels of tb_log. */
enum { TB_TRACE, TB_DEBUG, TB_INFO, TB_WARN, TB_ERROR };

/* gRPC status codes for tb_reject. */
enum {
	TB_CODE_INVALID_ARGUMENT = 3,
	TB_CODE_NOT_FOUND = 5,
	TB_CODE_PERMISSION_DENIED = 7,
	TB_CODE_RESOURCE_EXHAUSTED = 8,
	TB_CODE_FAILED_PRECONDITION = 9,
	TB_CODE_UNAVAILABLE = 14,
	TB_CODE_UNAUTHENTICATED = 16,
};

/* ---- Raw ABI: the numbers and the host functions (module "tinybroker"), one for one. ---- */
/* BEGIN ABI: generated by internal/abi/gen from internal/abi/table.go; DO NOT EDIT */
/* The numbers of the ABI (docs/ABI.md). */
#define TB_ABI_STATUS_OK 0 /* status: done */
#define TB_ABI_STATUS_INVALID (-1) /* status: a malformed value */
#define TB_ABI_STATUS_TOO_LARGE (-2) /* status: over a broker limit */
#define TB_ABI_STATUS_NOT_ALLOWED (-3) /* status: not in this hook */
#define TB_ABI_STATUS_LIMIT (-4) /* status: too many emits, or the plugin's store is full */
#define TB_ABI_STATUS_CONFLICT (-5) /* status: a compare-and-set whose old value is not the current one */
#define TB_ABI_ACT_PASS 0 /* on_publish action: continue with the message as changed */
#define TB_ABI_ACT_DROP 1 /* on_publish action: drop the message (counted) */
#define TB_ABI_ACT_REJECT 2 /* on_publish action: refuse the publish; argument: a gRPC status code */
#define TB_ABI_ACT_REDELIVER 0 /* on_redeliver action: the broker's default */
#define TB_ABI_ACT_DELAY 1 /* on_redeliver action: redeliver after the argument, in milliseconds */
#define TB_ABI_ACT_DEAD_LETTER 2 /* on_redeliver action: dead-letter now */
#define TB_ABI_ACT_FORGET 3 /* on_redeliver action: drop the message (counted) */
#define TB_ABI_HOOK_INIT 1 /* hook: the init hook (the inbox's hook field) */
#define TB_ABI_HOOK_PUBLISH 2 /* hook: on_publish */
#define TB_ABI_HOOK_ACK 3 /* hook: on_ack */
#define TB_ABI_HOOK_REDELIVER 4 /* hook: on_redeliver */
#define TB_ABI_HOOK_TICK 5 /* hook: on_tick */
#define TB_ABI_IN_WRITES_PTR 0 /* inbox: u32: the write list the guest leaves */
#define TB_ABI_IN_WRITES_COUNT 4 /* inbox: u32: its records */
#define TB_ABI_IN_HOOK 8 /* inbox: u32: the hook called */
#define TB_ABI_IN_MAX_MESSAGE 12 /* inbox: u32: max_message_bytes */
#define TB_ABI_IN_MAX_HEADER 16 /* inbox: u32: max_header_bytes */
#define TB_ABI_IN_ATTEMPT 20 /* inbox: u32: the event's delivery attempt */
#define TB_ABI_IN_IN_FLIGHT 24 /* inbox: u64: the event's nanoseconds from delivery to ack */
#define TB_ABI_IN_TOPIC 32 /* inbox: (offset, length) */
#define TB_ABI_IN_PAYLOAD 40 /* inbox: (offset, length) */
#define TB_ABI_IN_ID 48 /* inbox: (offset, length) */
#define TB_ABI_IN_SUB 56 /* inbox: (offset, length) */
#define TB_ABI_IN_GROUP 64 /* inbox: (offset, length) */
#define TB_ABI_IN_REASON 72 /* inbox: (offset, length) */
#define TB_ABI_IN_HEADER_COUNT 80 /* inbox: u32 */
#define TB_ABI_IN_FLAGS 84 /* inbox: u32: none yet */
#define TB_ABI_IN_HEADERS 88 /* inbox: the header table */
#define TB_ABI_IN_ENTRY 16 /* inbox: bytes of one header entry */
#define TB_ABI_ABSENT_LEN 0xffffffffu /* inbox: the length of an absent value */
#define TB_ABI_MAX_KEY_BYTES 256 /* limit: the longest message key, in bytes (v1_msg_set_key, v1_emit_key) */
#define TB_ABI_KV_MAX_KEY_BYTES 256 /* limit: the longest key of the plugin's store, in bytes (v1_kv_*) */
#define TB_ABI_WRITE_SIZE 20 /* write list: bytes of one record */
#define TB_ABI_OP_SET_PAYLOAD 1 /* write list: a: the payload */
#define TB_ABI_OP_SET_HEADER 2 /* write list: a: name, b: value */
#define TB_ABI_OP_DEL_HEADER 3 /* write list: a: name */
#define TB_ABI_OP_SET_REASON 4 /* write list: a: the reason */
#define TB_ABI_BATCH_COUNT 0 /* batch: u32: how many messages */
#define TB_ABI_BATCH_CURRENT 4 /* batch: u32: the message host functions act on */
#define TB_ABI_BATCH_ENTRIES 16 /* batch: the entries */
#define TB_ABI_BATCH_ENTRY 16 /* batch: bytes of one entry */
#define TB_ABI_ENTRY_OFFSET 0 /* batch: u32: record offset */
#define TB_ABI_ENTRY_LENGTH 4 /* batch: u32: record length */
#define TB_ABI_ENTRY_VERDICT 8 /* batch: u64: the guest's verdict */
#define TB_ABI_METRIC_COUNTER 1 /* metric: v1_metric_define's kind: a counter (v1_metric_add, value >= 0) */
#define TB_ABI_METRIC_GAUGE 2 /* metric: a gauge (v1_metric_add, v1_metric_set) */
#define TB_ABI_METRIC_HISTOGRAM 3 /* metric: a histogram (v1_metric_observe) */
#define TB_ABI_MAX_METRICS 32 /* metric: the most metrics one plugin defines */
#define TB_ABI_MAX_METRIC_SERIES 100 /* metric: the most label values one metric has; past them values count under "_other" */
#define TB_ABI_MAX_METRIC_NAME 64 /* metric: the longest metric or label name, in bytes */
#define TB_ABI_MAX_METRIC_HELP 256 /* metric: the longest help text, in bytes */
#define TB_ABI_MAX_METRIC_LABEL_VALUE 64 /* metric: the longest label value, in bytes */
#define TB_ABI_MAX_METRIC_BUCKETS 32 /* metric: the most bucket bounds of a histogram */

/* The host functions (module "tinybroker"), one for one. */
/* Everywhere. */
TB_IMPORT(v1_log) void tb_log(int32_t level, const char *ptr, uint32_t len);
TB_IMPORT(v1_now) int64_t tb_now(void);
TB_IMPORT(v1_config) int32_t tb_config(char *buf, uint32_t cap);
TB_IMPORT(v1_config_get) int32_t tb_config_get(const char *key, uint32_t key_len, char *buf, uint32_t cap);
TB_IMPORT(v1_set_reason) void tb_set_reason(const char *ptr, uint32_t len);
/* The message of the hook. */
TB_IMPORT(v1_msg_topic) int32_t tb_msg_topic(char *buf, uint32_t cap);
TB_IMPORT(v1_msg_payload) int32_t tb_msg_payload(char *buf, uint32_t cap);
TB_IMPORT(v1_msg_header) int32_t tb_msg_header(const char *key, uint32_t key_len, char *buf, uint32_t cap);
TB_IMPORT(v1_msg_header_count) int32_t tb_msg_header_count(void);
TB_IMPORT(v1_msg_header_name) int32_t tb_msg_header_name(int32_t index, char *buf, uint32_t cap);
TB_IMPORT(v1_msg_id) int32_t tb_msg_id(char *buf, uint32_t cap); /* ack, redeliver */
TB_IMPORT(v1_msg_set_topic) int32_t tb_msg_set_topic(const char *ptr, uint32_t len); /* publish */
TB_IMPORT(v1_msg_set_payload) int32_t tb_msg_set_payload(const char *ptr, uint32_t len); /* publish */
TB_IMPORT(v1_msg_set_header) int32_t tb_msg_set_header(const char *key, uint32_t key_len, const char *val, uint32_t val_len); /* publish, redeliver */
TB_IMPORT(v1_msg_del_header) int32_t tb_msg_del_header(const char *key, uint32_t key_len); /* publish, redeliver */
TB_IMPORT(v1_msg_key) int32_t tb_msg_key(char *buf, uint32_t cap);
TB_IMPORT(v1_msg_set_key) int32_t tb_msg_set_key(const char *ptr, uint32_t len); /* publish */
/* The event of the hook. */
TB_IMPORT(v1_event_subscription) int32_t tb_event_subscription(char *buf, uint32_t cap); /* ack, redeliver */
TB_IMPORT(v1_event_group) int32_t tb_event_group(char *buf, uint32_t cap); /* ack, redeliver */
TB_IMPORT(v1_event_attempt) int32_t tb_event_attempt(void); /* ack, redeliver */
TB_IMPORT(v1_event_in_flight_ns) int64_t tb_event_in_flight_ns(void); /* ack */
TB_IMPORT(v1_event_reason) int32_t tb_event_reason(char *buf, uint32_t cap); /* redeliver */
/* Emitting messages. */
TB_IMPORT(v1_emit) int32_t tb_emit(const char *topic, uint32_t topic_len, const char *payload, uint32_t payload_len);
TB_IMPORT(v1_emit_header) int32_t tb_emit_header(int32_t handle, const char *key, uint32_t key_len, const char *val, uint32_t val_len);
TB_IMPORT(v1_emit_key) int32_t tb_emit_key(int32_t handle, const char *ptr, uint32_t len);
/* State. */
TB_IMPORT(v1_kv_get) int32_t tb_kv_get(const char *key, uint32_t key_len, char *buf, uint32_t cap);
TB_IMPORT(v1_kv_set) int32_t tb_kv_set(const char *key, uint32_t key_len, const char *val, uint32_t val_len, int64_t ttl_ms);
TB_IMPORT(v1_kv_cas) int32_t tb_kv_cas(const char *key, uint32_t key_len, const char *old, uint32_t old_len, const char *val, uint32_t val_len, int64_t ttl_ms);
TB_IMPORT(v1_kv_delete) int32_t tb_kv_delete(const char *key, uint32_t key_len);
/* Metrics. */
TB_IMPORT(v1_metric_define) int32_t tb_metric_define(int32_t kind, const char *name, uint32_t name_len, const char *help, uint32_t help_len, const char *label, uint32_t label_len, const char *buckets, uint32_t buckets_len);
TB_IMPORT(v1_metric_add) int32_t tb_metric_add(int32_t id, int64_t value, const char *label_value, uint32_t label_value_len);
TB_IMPORT(v1_metric_set) int32_t tb_metric_set(int32_t id, int64_t value, const char *label_value, uint32_t label_value_len);
TB_IMPORT(v1_metric_observe) int32_t tb_metric_observe(int32_t id, int64_t value, const char *label_value, uint32_t label_value_len);
/* END ABI */

/* TB_STR("literal") expands to the literal and its length, for the functions above. */
#define TB_STR(s) (s), (uint32_t)(sizeof(s) - 1)

/* ---- The SDK (tinybroker.c). ---- */

/* tb_str is a string: bytes and their length. */
typedef struct {
	const char *ptr; /* NULL: absent (TB_NONE) */
	uint32_t len;
} tb_str;

#define TB_S(literal) ((tb_str){(literal), (uint32_t)(sizeof(literal) - 1)})
#define TB_NONE ((tb_str){0, 0})
#define TB_ABSENT(s) ((s).ptr == 0)
/* TB_ARGS(s) is s as the pointer and length the raw functions take: tb_log(TB_INFO, TB_ARGS(s)). */
#define TB_ARGS(s) (s).ptr, (s).len

/* Hooks. Each defines the export, which empties the arena and calls fn:
 *   TB_ON_PUBLISH(route) { ... return TB_PASS; }                                        */
#define TB_INIT(fn) TB__HOOK(tb_v1_init, int32_t, fn)
#define TB_ON_PUBLISH(fn)                                                                        \
	static int64_t fn(void);                                                                 \
	TB_EXPORT(tb_v1_on_publish) int64_t tb_v1_on_publish(void) { tb_reset(); return fn(); }         \
	TB_ON_PUBLISH_BATCH(tb_v1_on_publish)                                                       \
	static int64_t fn(void)
#define TB_ON_REDELIVER(fn) TB__HOOK(tb_v1_on_redeliver, int64_t, fn)
#define TB_ON_ACK(fn)                                                                            \
	static void fn(void);                                                                    \
	TB_EXPORT(tb_v1_on_ack) int64_t tb_v1_on_ack(void) { tb_reset(); fn(); return 0; }              \
	static void fn(void)
#define TB_ON_TICK(fn)                                                                           \
	static void fn(void);                                                                    \
	TB_EXPORT(tb_v1_on_tick) int64_t tb_v1_on_tick(void) { tb_reset(); fn(); return 0; }            \
	static void fn(void)
#define TB__HOOK(export, type, fn)                                                               \
	static type fn(void);                                                                    \
	TB_EXPORT(export) type export(void) { tb_reset(); return fn(); }                          \
	static type fn(void)

/* Batches (docs/ABI.md, "Batches"), with the inbox only: TB_ON_PUBLISH also exports
 * tb_v1_on_publish_batch, through which the broker gives a publish frame's messages in one
 * call. tb_publish_batch runs hook, the plugin's tb_v1_on_publish, on each of them in turn:
 * every reader and writer works on that message, and host calls (tb_set_topic, tb_emit_to,
 * tb_log, ...) act on it. The arena is emptied when the batch begins, not between its
 * messages: what each message's writes point to must last until the whole batch returns, so
 * a batch needs as much arena as its messages' values together (tb_reset, in a batch, starts
 * the message's write list and leaves the arena alone). If the batch traps, the broker runs
 * each of its messages again alone, on another instance: the plugin's code may run twice for a
 * message. A plugin that defines tb_v1_on_publish itself, without TB_ON_PUBLISH, gets batches by
 * writing TB_ON_PUBLISH_BATCH(tb_v1_on_publish) at file scope, after it (no semicolon); its
 * tb_v1_on_publish should call tb_reset first, as TB_ON_PUBLISH's does. With -DTB_NO_INBOX,
 * TB_ON_PUBLISH_BATCH is empty. The export is the macro's, not tinybroker.c's, so that a
 * plugin without on_publish does not export it (the broker refuses a module that exports
 * tb_v1_on_publish_batch without tb_v1_on_publish). */
#ifdef TB_INBOX
static inline int32_t tb_publish_batch(int64_t (*hook)(void)); /* inline: it calls hook directly */
int32_t tb_v1_on_publish_batch(void);
#define TB_ON_PUBLISH_BATCH(hook)                                                                \
	TB_EXPORT(tb_v1_on_publish_batch) int32_t tb_v1_on_publish_batch(void) { return tb_publish_batch(hook); }
#else
#define TB_ON_PUBLISH_BATCH(hook)
#endif

/* Reading. Each returns the value in the arena, valid until the hook returns. */
tb_str tb_topic(void);
tb_str tb_payload(void);
static inline tb_str tb_header(tb_str name); /* TB_NONE if absent (inline: see the end of this file) */
tb_str tb_header_name_at(int32_t index);  /* 0-based, sorted by name; TB_NONE past the end */
tb_str tb_id(void);                       /* the system_id (on_ack, on_redeliver) */
tb_str tb_key(void);                      /* the ordering key; empty (length 0) if none; a host call, inbox or not */
tb_str tb_config_value(tb_str key);       /* TB_NONE if absent */
tb_str tb_config_text(void);              /* the whole configuration, "key=value\n" lines */
tb_str tb_subscription(void);             /* on_ack, on_redeliver */
tb_str tb_group(void);                    /* on_ack, on_redeliver */
tb_str tb_redeliver_reason(void);         /* on_redeliver: "nack", "ack deadline exceeded", ... */
int32_t tb_header_count(void);            /* how many headers */
int32_t tb_attempt(void);                 /* on_ack, on_redeliver: the delivery attempt (1 = first) */
int64_t tb_in_flight_ns(void);            /* on_ack: nanoseconds from delivery to ack */
/* tb_now() needs no buffer: call it directly. */

/* Strings. */
static inline int tb_eq(tb_str a, tb_str b);    /* same bytes (TB_NONE equals only TB_NONE) */
int tb_starts_with(tb_str s, tb_str prefix);
int tb_list_has(tb_str list, char sep, tb_str item); /* item is one of list's sep-separated
                                                        entries, spaces around them ignored;
                                                        never for TB_NONE */
tb_str tb_cstr(const char *nul_terminated);
tb_str tb_concat(tb_str a, tb_str b);           /* a new string in the arena */
tb_str tb_utoa(uint64_t v);                     /* v in decimal, in the arena */
void *tb_alloc(uint32_t n);                     /* n bytes of the arena, until the hook returns */
static inline void tb_reset(void);              /* empty the arena (the hook macros do it) */

/* Changing the message (on_publish; headers also in on_redeliver). TB_OK or TB_ERR_*. What
 * tb_set_payload and tb_set_header are given must stay valid until the hook returns (a
 * literal, a value read, or one made with the functions above). */
static inline int32_t tb_set_topic(tb_str t) { return tb_msg_set_topic(t.ptr, t.len); }
int32_t tb_set_payload(tb_str p);
int32_t tb_set_header(tb_str k, tb_str v);
int32_t tb_del_header(tb_str k);
/* The ordering key, on_publish only: an empty k removes it; over TB_ABI_MAX_KEY_BYTES bytes
 * TB_ERR_TOO_LARGE, not UTF-8 or with a control character TB_ERR_INVALID (the key unchanged). */
static inline int32_t tb_set_key(tb_str k) { return tb_msg_set_key(k.ptr, k.len); }
void tb_reason(tb_str why); /* the reason of the verdict: the last one given wins */

/* Emitting: tb_emit_to returns a handle (>= 0) for tb_emit_set_header, or TB_ERR_*. */
static inline int32_t tb_emit_to(tb_str topic, tb_str payload) { return tb_emit(topic.ptr, topic.len, payload.ptr, payload.len); }
static inline int32_t tb_emit_set_header(int32_t handle, tb_str k, tb_str v) { return tb_emit_header(handle, k.ptr, k.len, v.ptr, v.len); }
static inline int32_t tb_emit_set_key(int32_t handle, tb_str k) { return tb_emit_key(handle, k.ptr, k.len); } /* checked as tb_set_key */

/* The plugin's key-value store (docs/ABI.md, "State"), shared by every instance of the plugin
 * and usable in every hook; each is a host call, inbox or not, and a write takes effect at once.
 * ttl_ms 0: never expires. TB_OK or TB_ERR_*: TB_ERR_INVALID an empty key or a negative ttl,
 * TB_ERR_TOO_LARGE a key over TB_ABI_KV_MAX_KEY_BYTES or a value over kv_max_value_bytes,
 * TB_ERR_LIMIT the store's kv_max_bytes reached. */
tb_str tb_kv_read(tb_str key); /* the value, in the arena; TB_NONE if absent or expired */
static inline int32_t tb_kv_write(tb_str k, tb_str v, int64_t ttl_ms) { return tb_kv_set(k.ptr, k.len, v.ptr, v.len, ttl_ms); }
/* Compare-and-set: k := v only if its value is old now (an empty old: if it is absent), else
 * TB_ERR_CONFLICT and nothing changes (read it again and retry). */
static inline int32_t tb_kv_swap(tb_str k, tb_str old, tb_str v, int64_t ttl_ms) {
	return tb_kv_cas(k.ptr, k.len, old.ptr, old.len, v.ptr, v.len, ttl_ms);
}
static inline int32_t tb_kv_remove(tb_str k) { return tb_kv_delete(k.ptr, k.len); } /* TB_OK if absent too */

/* Metrics (docs/ABI.md, "Metrics"): tb_new_metric returns an id (>= 0) or TB_ERR_*; kind is
 * TB_ABI_METRIC_COUNTER, _GAUGE or _HISTOGRAM; label (a label's name) and buckets ("10,100")
 * may be TB_NONE. The others take the label's value, TB_NONE for a metric without a label, and
 * return TB_OK or TB_ERR_* (TB_ERR_LIMIT: counted under "_other"). */
static inline int32_t tb_new_metric(int32_t kind, tb_str name, tb_str help, tb_str label, tb_str buckets) {
	return tb_metric_define(kind, name.ptr, name.len, help.ptr, help.len, label.ptr, label.len, buckets.ptr, buckets.len);
}
static inline int32_t tb_add_metric(int32_t id, int64_t v, tb_str label_value) { return tb_metric_add(id, v, label_value.ptr, label_value.len); }
static inline int32_t tb_set_metric(int32_t id, int64_t v, tb_str label_value) { return tb_metric_set(id, v, label_value.ptr, label_value.len); }
static inline int32_t tb_observe_metric(int32_t id, int64_t v, tb_str label_value) { return tb_metric_observe(id, v, label_value.ptr, label_value.len); }

/* Logging. */
static inline void tb_log_str(int32_t level, tb_str msg) { tb_log(level, msg.ptr, msg.len); }

/* Verdicts with a reason. (They call tb_reason's internal form, which takes the pointer and
 * length rather than a tb_str: clang passes a struct through the stack, which a hook would
 * then set up on every call, even one that returns TB_PASS.) */
void tb__set_reason(const char *why, uint32_t len);
static inline int64_t tb_drop(tb_str reason) { tb__set_reason(TB_ARGS(reason)); return TB_DROP; }
static inline int64_t tb_reject(int32_t grpc_code, tb_str reason) { tb__set_reason(TB_ARGS(reason)); return TB_REJECT(grpc_code); }
static inline int64_t tb_dead_letter(tb_str reason) { tb__set_reason(TB_ARGS(reason)); return TB_DEAD_LETTER; }
static inline int64_t tb_drop_message(tb_str reason) { tb__set_reason(TB_ARGS(reason)); return TB_DROP_MESSAGE; }
static inline int32_t tb_refuse(tb_str reason) { tb__set_reason(TB_ARGS(reason)); return 1; } /* from TB_INIT */

/* ---- The inline part of the SDK. What a filter does on every call is here rather than in
 * tinybroker.c, so that clang compiles it into the hook: emptying the arena, looking a header
 * up in the inbox, comparing strings, and a batch's loop. A comparison with a literal, as in
 * tb_eq(tb_header(TB_S("tenant")), TB_S("blocked")), then comes down to a few loads compared
 * with constants. The names with two underscores are the SDK's internals, not its API. ---- */

/* What tinybroker.c keeps, that the inline functions use. */
extern struct tb__state {
	unsigned char *inbox; /* the message the readers read: the inbox, a batch's record while
	                         it runs, or NULL (the broker never asked: host calls) */
	unsigned char *box;   /* the inbox itself */
	uint32_t base, top;   /* the arena: [base, end of memory), top its first free byte */
	uint32_t nwrites;     /* records in the write list */
	uint32_t capwrites;   /* and its room */
	uint32_t wfirst;      /* the current message's first record in it */
	int used;             /* the arena or the write list holds something tb_reset empties */
	int batching;         /* in tb_publish_batch: tb_reset keeps the arena */
} tb__state;

/* tb_header with a host call: the value's pointer in the low half, its length in the high
 * (a tb_str result would go through the stack). */
uint64_t tb__header_call(const char *name, uint32_t len);
int tb__same_long(const char *a, const char *b, uint32_t n); /* tb__same past 16 bytes */

/* tb_reset empties the arena and the write list, if the call before used them: a filter
 * that allocates and writes nothing pays a load for it. In a batch, each message starts a
 * write list of its own at the end of the batch's, and the arena keeps what the messages
 * before it put there: the broker reads every message's write list, and the bytes it points
 * to, when the whole batch returns. */
static inline void tb_reset(void) {
	if (!tb__state.used)
		return;
	if (tb__state.batching) {
		tb__state.wfirst = tb__state.nwrites;
		return;
	}
	tb__state.top = tb__state.base;
	tb__state.nwrites = tb__state.capwrites = tb__state.wfirst = 0;
	tb__state.used = 0;
}

/* Unaligned little-endian loads (wasm is little-endian): clang makes each one instruction. */
static inline uint16_t tb__ld16(const void *p) { uint16_t v; __builtin_memcpy(&v, p, 2); return v; }
static inline uint32_t tb__ld32(const void *p) { uint32_t v; __builtin_memcpy(&v, p, 4); return v; }
static inline uint64_t tb__ld64(const void *p) { uint64_t v; __builtin_memcpy(&v, p, 8); return v; }

/* tb__same says whether the n bytes at a and b are equal: up to 16 bytes with no loop, two
 * loads of each side (overlapping where n is not a whole number of them), so that with a
 * literal, whose length and bytes clang knows, it is two loads compared with constants. */
static inline int tb__same(const char *a, const char *b, uint32_t n) {
	if (n > 16)
		return tb__same_long(a, b, n);
	if (n >= 8)
		return tb__ld64(a) == tb__ld64(b) && tb__ld64(a + n - 8) == tb__ld64(b + n - 8);
	if (n >= 4)
		return tb__ld32(a) == tb__ld32(b) && tb__ld32(a + n - 4) == tb__ld32(b + n - 4);
	if (n >= 2)
		return tb__ld16(a) == tb__ld16(b) && tb__ld16(a + n - 2) == tb__ld16(b + n - 2);
	return n == 0 || *a == *b;
}

static inline int tb_eq(tb_str a, tb_str b) {
	return a.len == b.len && TB_ABSENT(a) == TB_ABSENT(b) && tb__same(a.ptr, b.ptr, a.len);
}

/* tb_header in the inbox (docs/ABI.md, "The inbox"): header_count at 80, then from 88 an entry
 * of 16 bytes per header, name offset, name length, value offset, value length (a length of
 * 0xFFFFFFFF: absent), the offsets from the record's start. Names are compared by length
 * first; most messages have a few headers, so a scan, not a binary search. */
static inline tb_str tb_header(tb_str name) {
	const unsigned char *r = tb__state.inbox;
	if (!r) {
		uint64_t v = tb__header_call(name.ptr, name.len);
		return (tb_str){(const char *)(uintptr_t)(uint32_t)v, (uint32_t)(v >> 32)};
	}
	const unsigned char *e = r + TB_ABI_IN_HEADERS, *end = e + TB_ABI_IN_ENTRY * tb__ld32(r + TB_ABI_IN_HEADER_COUNT);
	for (; e < end; e += TB_ABI_IN_ENTRY) {
		if (tb__ld32(e + 4) == name.len && tb__same((const char *)r + tb__ld32(e), name.ptr, name.len)) {
			uint32_t len = tb__ld32(e + 12);
			if (len == TB_ABI_ABSENT_LEN)
				return TB_NONE;
			return (tb_str){(const char *)r + tb__ld32(e + 8), len};
		}
	}
	return TB_NONE;
}

#ifdef TB_INBOX
/* Batches (docs/ABI.md, "Batches"): the inbox starts with the message count, the current
 * message (the one host calls act on), 8 reserved bytes, then an entry of 16 bytes per message:
 * its record's offset and length, and its verdict (a u64, ours to write). Each record is laid
 * out as a single call's inbox, its offsets counted from its own start: with tb__state.inbox
 * pointing at it, every reader and writer works on that message. A message's write list
 * starts where the one before it ended (tb__state.wfirst), and tb__write records it in the
 * message's record. */
static inline int32_t tb_publish_batch(int64_t (*on_publish)(void)) {
	unsigned char *box = tb__state.box;
	if (!box)
		return 1; /* no inbox (the broker gives one first): decline, one call per message */
	uint32_t n = tb__ld32(box + TB_ABI_BATCH_COUNT);
	tb_reset();
	tb__state.batching = 1;
	for (uint32_t i = 0; i < n; i++) {
		unsigned char *e = box + TB_ABI_BATCH_ENTRIES + TB_ABI_BATCH_ENTRY * i;
		__builtin_memcpy(box + TB_ABI_BATCH_CURRENT, &i, 4);
		tb__state.inbox = box + tb__ld32(e + TB_ABI_ENTRY_OFFSET);
		tb__state.wfirst = tb__state.nwrites; /* as tb_reset does, for a hook that does not call it */
		int64_t v = on_publish();
		__builtin_memcpy(e + TB_ABI_ENTRY_VERDICT, &v, 8);
	}
	tb__state.batching = 0;
	tb__state.inbox = box;
	return 0;
}
#endif

#endif
