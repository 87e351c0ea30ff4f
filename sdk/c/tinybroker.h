/*
 * tinybroker.h — the tinybroker plugin ABI, version 1, for C (docs/ABI.md is the contract).
 *
 * A starting point for plugins in C: no libc, no allocator, one header. Build a plugin with
 *
 *   clang --target=wasm32 -nostdlib -O2 -I sdk/c \
 *         -Wl,--no-entry -Wl,--export-dynamic -o plugin.wasm plugin.c
 *
 * (clang and wasm-ld: Debian's `clang lld`). Every function a plugin defines with TB_EXPORT is
 * exported under that name; -Wl,--export-dynamic exports them all, and the module's memory is
 * exported as "memory" by default.
 *
 * What the plugin exports:
 *
 *   TB_ABI_V1                                      the version marker (required; write it once)
 *   int32_t tb_init(void)                          optional: once per instance; 0 accepts the
 *                                                  configuration, anything else refuses the load
 *                                                  (say why with tb_set_reason)
 *   int64_t tb_on_publish(void)                    before routing: TB_PASS, TB_DROP, TB_REJECT(code)
 *   int64_t tb_on_ack(void)                        after an ack: return 0
 *   int64_t tb_on_redeliver(void)                  before a redelivery: TB_REDELIVER, TB_DELAY(ms),
 *                                                  TB_DEAD_LETTER, TB_FORGET
 *
 * Export at least one hook; the broker calls only the hooks exported. Each instance serves one
 * call at a time, so static buffers need no locking; globals persist between the calls of an
 * instance (the broker runs several instances: do not count on seeing every message).
 *
 * Reading: a reader copies min(len, cap) bytes into buf and returns the full length len (-1:
 * absent). If it returns more than cap, the value was cut short: call again with a bigger
 * buffer. Writing returns TB_OK or a negative TB_ERR_*. Strings are bytes with a length, not
 * NUL-terminated. Changes to the message take effect when the hook returns.
 */
#ifndef TINYBROKER_H
#define TINYBROKER_H

#include <stdint.h> /* clang's own: needs no libc */

#define TB_IMPORT(name) __attribute__((import_module("tinybroker"), import_name(#name)))
#define TB_EXPORT(name) __attribute__((export_name(#name)))

/* The version marker: write TB_ABI_V1 once in a plugin, at file scope. */
#define TB_ABI_V1 TB_EXPORT(tinybroker_abi_v1) void tb_abi_v1(void) {}

/* Statuses of the writers. */
#define TB_OK 0
#define TB_ERR_INVALID (-1)     /* malformed: a bad topic, an empty header name */
#define TB_ERR_TOO_LARGE (-2)   /* over max_message_bytes / max_header_bytes */
#define TB_ERR_NOT_ALLOWED (-3) /* not in this hook */
#define TB_ERR_LIMIT (-4)       /* max_emits used up */

/* Verdicts: action | argument << 32. */
#define TB_VERDICT(action, arg) ((int64_t)(uint32_t)(action) | ((int64_t)(uint32_t)(arg) << 32))
#define TB_PASS TB_VERDICT(0, 0)
#define TB_DROP TB_VERDICT(1, 0)
#define TB_REJECT(grpc_code) TB_VERDICT(2, grpc_code) /* 1-16; 0 means INVALID_ARGUMENT */
#define TB_REDELIVER TB_VERDICT(0, 0)
#define TB_DELAY(ms) TB_VERDICT(1, ms) /* 1 to 2^31-1 */
#define TB_DEAD_LETTER TB_VERDICT(2, 0)
#define TB_FORGET TB_VERDICT(3, 0)

/* Log levels of tb_log. */
enum { TB_TRACE, TB_DEBUG, TB_INFO, TB_WARN, TB_ERROR };

/* Everywhere. */
TB_IMPORT(v1_log) void tb_log(int32_t level, const char *msg, uint32_t len);
TB_IMPORT(v1_now) int64_t tb_now(void); /* ns since the Unix epoch */
TB_IMPORT(v1_config) int32_t tb_config(char *buf, uint32_t cap); /* "key=value\n" lines */
TB_IMPORT(v1_config_get) int32_t tb_config_get(const char *key, uint32_t key_len, char *buf, uint32_t cap);
TB_IMPORT(v1_set_reason) void tb_set_reason(const char *reason, uint32_t len);

/* The message of the hook. Readers return it as it entered the call. */
TB_IMPORT(v1_msg_topic) int32_t tb_msg_topic(char *buf, uint32_t cap);
TB_IMPORT(v1_msg_payload) int32_t tb_msg_payload(char *buf, uint32_t cap);
TB_IMPORT(v1_msg_header) int32_t tb_msg_header(const char *key, uint32_t key_len, char *buf, uint32_t cap);
TB_IMPORT(v1_msg_header_count) int32_t tb_msg_header_count(void);
TB_IMPORT(v1_msg_header_name) int32_t tb_msg_header_name(int32_t index, char *buf, uint32_t cap);
TB_IMPORT(v1_msg_id) int32_t tb_msg_id(char *buf, uint32_t cap); /* ack, redeliver */
TB_IMPORT(v1_msg_set_topic) int32_t tb_msg_set_topic(const char *topic, uint32_t len);       /* publish */
TB_IMPORT(v1_msg_set_payload) int32_t tb_msg_set_payload(const char *payload, uint32_t len); /* publish */
TB_IMPORT(v1_msg_set_header) int32_t tb_msg_set_header(const char *key, uint32_t key_len, const char *val, uint32_t val_len);
TB_IMPORT(v1_msg_del_header) int32_t tb_msg_del_header(const char *key, uint32_t key_len);

/* The event of on_ack and on_redeliver. */
TB_IMPORT(v1_event_subscription) int32_t tb_event_subscription(char *buf, uint32_t cap);
TB_IMPORT(v1_event_group) int32_t tb_event_group(char *buf, uint32_t cap);
TB_IMPORT(v1_event_attempt) int32_t tb_event_attempt(void);
TB_IMPORT(v1_event_in_flight_ns) int64_t tb_event_in_flight_ns(void); /* ack */
TB_IMPORT(v1_event_reason) int32_t tb_event_reason(char *buf, uint32_t cap); /* redeliver */

/* Emitting: published when the hook returns successfully, whatever its verdict. */
TB_IMPORT(v1_emit) int32_t tb_emit(const char *topic, uint32_t topic_len, const char *payload, uint32_t payload_len); /* a handle >= 0, or TB_ERR_* */
TB_IMPORT(v1_emit_header) int32_t tb_emit_header(int32_t handle, const char *key, uint32_t key_len, const char *val, uint32_t val_len);

/* TB_STR("literal") expands to the literal and its length, for the functions above. */
#define TB_STR(s) (s), (uint32_t)(sizeof(s) - 1)

#endif
