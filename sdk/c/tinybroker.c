/*
 * tinybroker.c — the C SDK's code (see tinybroker.h). Compile it with the plugin:
 *
 *   clang --target=wasm32 -nostdlib -O2 -I sdk/c -Wl,--no-entry \
 *         -o plugin.wasm plugin.c sdk/c/tinybroker.c
 */
#include "tinybroker.h"

#include <stddef.h> /* clang's own: size_t */

/* The SDK's state (tinybroker.h, where the inline functions that use it are). */
struct tb__state tb__state;

/* ---- The arena: [tb__state.base, end of memory), grown with memory.grow, its first free byte
 * tb__state.top (both 0 until it is first used). Below its base, from __heap_base, what the
 * SDK keeps for the instance's life: the inbox, cached config values. tb_reset (tinybroker.h)
 * empties it. ---- */

extern unsigned char __heap_base; /* defined by wasm-ld: the first byte after data and stack */

static uint32_t tb__memory_end(void) { return (uint32_t)__builtin_wasm_memory_size(0) * 65536u; }

/* tb__room is how many bytes the arena can hand out without growing memory. Everything that
 * takes from the arena asks it first: the arena is then in use, until the next tb_reset. */
static uint32_t tb__room(void) {
	if (tb__state.top == 0) /* the first use: the arena starts after the data and the stack */
		tb__state.top = tb__state.base = ((uint32_t)(uintptr_t)&__heap_base + 7u) & ~7u;
	tb__state.used = 1;
	return tb__memory_end() - tb__state.top;
}

/* tb__reserve makes n bytes from the arena's top part of memory, growing it if need be. A
 * plugin past its memory_limit traps: the call fails, and the broker applies its failure
 * policy. */
static char *tb__reserve(uint32_t n) {
	uint32_t room = tb__room();
	if (n > room) {
		uint32_t pages = (n - room + 65535u) / 65536u;
		if (n - room > 0xFFFFFFFFu - 65535u || __builtin_wasm_memory_grow(0, pages) == (size_t)-1)
			__builtin_trap();
	}
	return (char *)(uintptr_t)tb__state.top;
}

void *tb_alloc(uint32_t n) {
	char *p = tb__reserve(n);
	tb__state.top += n;
	return p;
}

/* tb__keep moves the arena's start past what it holds now and n more bytes, which it returns:
 * they are the instance's for good. What the arena held stays valid until the hook returns. */
static char *tb__keep(uint32_t n) {
	(void)tb__room();                                 /* the arena set up */
	tb_alloc((8u - (tb__state.top & 7u)) & 7u); /* 8-aligned: the inbox must be (docs/ABI.md) */
	char *p = tb_alloc((n + 7u) & ~7u);
	tb__state.base = tb__state.top;
	return p;
}

/* ---- The inbox (docs/ABI.md, "The inbox"): little-endian u32 fields at fixed offsets. ---- */

enum {
	TB__WRITES_PTR = TB_ABI_IN_WRITES_PTR, TB__WRITES_COUNT = TB_ABI_IN_WRITES_COUNT, TB__HOOK = TB_ABI_IN_HOOK,
	TB__MAX_MESSAGE = TB_ABI_IN_MAX_MESSAGE, TB__MAX_HEADER = TB_ABI_IN_MAX_HEADER, TB__ATTEMPT = TB_ABI_IN_ATTEMPT,
	TB__IN_FLIGHT = TB_ABI_IN_IN_FLIGHT, TB__TOPIC = TB_ABI_IN_TOPIC, TB__PAYLOAD = TB_ABI_IN_PAYLOAD, TB__ID = TB_ABI_IN_ID,
	TB__SUB = TB_ABI_IN_SUB, TB__GROUP = TB_ABI_IN_GROUP, TB__REASON = TB_ABI_IN_REASON,
	TB__HEADER_COUNT = TB_ABI_IN_HEADER_COUNT, TB__HEADERS = TB_ABI_IN_HEADERS,
};
enum { TB__HOOK_PUBLISH = TB_ABI_HOOK_PUBLISH, TB__HOOK_REDELIVER = TB_ABI_HOOK_REDELIVER };

static uint32_t tb__u32(uint32_t off) { return *(const uint32_t *)(tb__state.inbox + off); }

/* tb__field is the (offset, length) pair at off as a string; length 0xFFFFFFFF is absent. */
static tb_str tb__field(uint32_t off) {
	uint32_t len = tb__u32(off + 4);
	if (len == TB_ABI_ABSENT_LEN)
		return TB_NONE;
	return (tb_str){(const char *)tb__state.inbox + tb__u32(off), len};
}

/* The broker asks for an inbox of size bytes between calls (the arena is empty then), before
 * the first call and whenever a message does not fit: a new one above the last. Exported
 * unless the plugin is built with -DTB_NO_INBOX (see tinybroker.h). */
#ifdef TB_INBOX
TB_EXPORT(tb_v1_inbox)
#endif
uint32_t tb_v1_inbox(uint32_t size);
uint32_t tb_v1_inbox(uint32_t size) {
	tb_reset();
	tb__state.inbox = tb__state.box = (unsigned char *)tb__keep(size);
	tb_reset();
	return (uint32_t)(uintptr_t)tb__state.inbox;
}

/* The write list: records of five u32s (operation, two pointer/length pairs), the first 8 of
 * a call in a static array (most calls list fewer: no allocation), then in the arena, moved to
 * a larger array when full; the inbox's first two fields say where it is. */
enum { TB__SET_PAYLOAD = TB_ABI_OP_SET_PAYLOAD, TB__SET_HEADER = TB_ABI_OP_SET_HEADER, TB__DEL_HEADER = TB_ABI_OP_DEL_HEADER, TB__SET_REASON = TB_ABI_OP_SET_REASON };
enum { TB__FIRST_WRITES = 8 };

static uint32_t tb__writes0[TB__FIRST_WRITES * 5];
static uint32_t *tb__writes;

static void tb__write(uint32_t op, tb_str a, tb_str b) {
	uint32_t n = tb__state.nwrites;
	if (n == tb__state.capwrites) {
		if (n == 0) {
			tb__writes = tb__writes0;
			tb__state.capwrites = TB__FIRST_WRITES;
		} else {
			uint32_t cap = 2 * n;
			uint32_t *nw = tb_alloc(cap * 20u);
#pragma clang loop unroll(disable) /* rare: keep it short */
			for (uint32_t i = 0; i < n * 5u; i++)
				nw[i] = tb__writes[i];
			tb__writes = nw;
			tb__state.capwrites = cap;
		}
	}
	tb__state.nwrites = n + 1;
	tb__state.used = 1;
	uint32_t *r = tb__writes + 5u * n;
	r[0] = op;
	r[1] = (uint32_t)(uintptr_t)a.ptr;
	r[2] = a.len;
	r[3] = (uint32_t)(uintptr_t)b.ptr;
	r[4] = b.len;
#ifdef TB_INBOX
	/* A batch's messages share the list, each its own part from tb__state.wfirst: when the list
	 * moves to a larger array, the messages before keep theirs in the old one (the static
	 * array, or the arena), which nothing changes until the batch returns. */
	*(uint32_t *)(tb__state.inbox + TB__WRITES_PTR) = (uint32_t)(uintptr_t)(tb__writes + 5u * tb__state.wfirst);
	*(uint32_t *)(tb__state.inbox + TB__WRITES_COUNT) = n + 1 - tb__state.wfirst;
#else
	*(uint32_t *)(tb__state.inbox + TB__WRITES_PTR) = (uint32_t)(uintptr_t)tb__writes;
	*(uint32_t *)(tb__state.inbox + TB__WRITES_COUNT) = n + 1;
#endif
}

/* Batches: tb_publish_batch is in tinybroker.h, inline, so that it calls the plugin's
 * tb_v1_on_publish directly. */

static int tb__may_change_headers(void) {
	uint32_t h = tb__u32(TB__HOOK);
	return h == TB__HOOK_PUBLISH || h == TB__HOOK_REDELIVER;
}

/* The writers check what the broker would (the write list has no statuses) and list it. */
int32_t tb_set_payload(tb_str p) {
	if (!tb__state.inbox)
		return tb_msg_set_payload(p.ptr, p.len);
	if (tb__u32(TB__HOOK) != TB__HOOK_PUBLISH)
		return TB_ERR_NOT_ALLOWED;
	if (p.len > tb__u32(TB__MAX_MESSAGE))
		return TB_ERR_TOO_LARGE;
	tb__write(TB__SET_PAYLOAD, p, TB_NONE);
	return TB_OK;
}

int32_t tb_set_header(tb_str k, tb_str v) {
	if (!tb__state.inbox)
		return tb_msg_set_header(k.ptr, k.len, v.ptr, v.len);
	if (!tb__may_change_headers())
		return TB_ERR_NOT_ALLOWED;
	if (k.len == 0)
		return TB_ERR_INVALID;
	if ((uint64_t)k.len + v.len > tb__u32(TB__MAX_HEADER))
		return TB_ERR_TOO_LARGE;
	tb__write(TB__SET_HEADER, k, v);
	return TB_OK;
}

int32_t tb_del_header(tb_str k) {
	if (!tb__state.inbox)
		return tb_msg_del_header(k.ptr, k.len);
	if (!tb__may_change_headers())
		return TB_ERR_NOT_ALLOWED;
	tb__write(TB__DEL_HEADER, k, TB_NONE);
	return TB_OK;
}

void tb_reason(tb_str why) { tb__set_reason(why.ptr, why.len); }

void tb__set_reason(const char *why, uint32_t len) {
	if (!tb__state.inbox)
		tb_set_reason(why, len);
	else
		tb__write(TB__SET_REASON, (tb_str){why, len}, TB_NONE);
}

/* ---- Reading with the ABI's convention: offer all the room there is; if the value is
 * longer (the reader returns its full length), grow and read it again. ---- */

typedef int32_t (*tb__reader)(const void *arg, char *buf, uint32_t cap);

static tb_str tb__read(tb__reader read, const void *arg) {
	uint32_t room = tb__room();
	char *buf = (char *)(uintptr_t)tb__state.top;
	int32_t n = read(arg, buf, room);
	if (n < 0)
		return TB_NONE;
	if ((uint32_t)n > room)
		read(arg, tb__reserve((uint32_t)n), (uint32_t)n);
	tb__state.top += (uint32_t)n;
	return (tb_str){buf, (uint32_t)n};
}

static int32_t tb__topic(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_topic(buf, cap); }
static int32_t tb__payload(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_payload(buf, cap); }
static int32_t tb__id(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_id(buf, cap); }
static int32_t tb__key(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_key(buf, cap); }
static int32_t tb__config(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_config(buf, cap); }
static int32_t tb__sub(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_event_subscription(buf, cap); }
static int32_t tb__group(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_event_group(buf, cap); }
static int32_t tb__reason(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_event_reason(buf, cap); }

static int32_t tb__header(const void *arg, char *buf, uint32_t cap) {
	const tb_str *k = arg;
	return tb_msg_header(k->ptr, k->len, buf, cap);
}

static int32_t tb__config_get(const void *arg, char *buf, uint32_t cap) {
	const tb_str *k = arg;
	return tb_config_get(k->ptr, k->len, buf, cap);
}

static int32_t tb__header_name(const void *arg, char *buf, uint32_t cap) {
	return tb_msg_header_name(*(const int32_t *)arg, buf, cap);
}

/* The readers: from the inbox if there is one, otherwise with a host call. */
tb_str tb_topic(void) { return tb__state.inbox ? tb__field(TB__TOPIC) : tb__read(tb__topic, 0); }
tb_str tb_payload(void) { return tb__state.inbox ? tb__field(TB__PAYLOAD) : tb__read(tb__payload, 0); }
tb_str tb_id(void) { return tb__state.inbox ? tb__field(TB__ID) : tb__read(tb__id, 0); }
tb_str tb_subscription(void) { return tb__state.inbox ? tb__field(TB__SUB) : tb__read(tb__sub, 0); }
tb_str tb_group(void) { return tb__state.inbox ? tb__field(TB__GROUP) : tb__read(tb__group, 0); }
tb_str tb_redeliver_reason(void) { return tb__state.inbox ? tb__field(TB__REASON) : tb__read(tb__reason, 0); }
tb_str tb_config_text(void) { return tb__read(tb__config, 0); }
/* The key is not in the inbox: always a host call. */
tb_str tb_key(void) { return tb__read(tb__key, 0); }

/* Unlike the message's values, a stored value may change between two reads (another instance
 * writes it): read until it fits, or the second read could be cut short, or end early. */
tb_str tb_kv_read(tb_str key) {
	char *buf = (char *)(uintptr_t)tb__state.top;
	uint32_t room = tb__room();
	int32_t n;
	while ((n = tb_kv_get(key.ptr, key.len, buf, room)) > 0 && (uint32_t)n > room) {
		buf = tb__reserve((uint32_t)n);
		room = (uint32_t)n;
	}
	if (n < 0)
		return TB_NONE;
	tb__state.top += (uint32_t)n;
	return (tb_str){buf, (uint32_t)n};
}

int32_t tb_header_count(void) { return tb__state.inbox ? (int32_t)tb__u32(TB__HEADER_COUNT) : tb_msg_header_count(); }
int32_t tb_attempt(void) { return tb__state.inbox ? (int32_t)tb__u32(TB__ATTEMPT) : tb_event_attempt(); }
int64_t tb_in_flight_ns(void) {
	return tb__state.inbox ? (int64_t)(tb__u32(TB__IN_FLIGHT) | (uint64_t)tb__u32(TB__IN_FLIGHT + 4) << 32) : tb_event_in_flight_ns();
}

/* tb_header is in tinybroker.h (inline): from the inbox, or with this host call. */
uint64_t tb__header_call(const char *name, uint32_t len) {
	tb_str v = tb__read(tb__header, &(tb_str){name, len});
	return (uint32_t)(uintptr_t)v.ptr | (uint64_t)v.len << 32;
}

tb_str tb_header_name_at(int32_t index) {
	if (!tb__state.inbox)
		return tb__read(tb__header_name, &index);
	if (index < 0 || (uint32_t)index >= tb__u32(TB__HEADER_COUNT))
		return TB_NONE;
	return tb__field(TB__HEADERS + TB_ABI_IN_ENTRY * (uint32_t)index);
}

/* Config values, kept once read: the configuration of an instance never changes, and a
 * filter that compares a header with one would otherwise pay a host call per message. */
enum { TB__CACHED = 8 };
static struct {
	tb_str key, value;
} tb__config_cache[TB__CACHED];
static uint32_t tb__config_cached;

static tb_str tb__copy_kept(tb_str s) {
	if (TB_ABSENT(s))
		return s;
	char *p = tb__keep(s.len);
	for (uint32_t i = 0; i < s.len; i++)
		p[i] = s.ptr[i];
	return (tb_str){p, s.len};
}

tb_str tb_config_value(tb_str key) {
	for (uint32_t i = 0; i < tb__config_cached; i++)
		if (tb_eq(tb__config_cache[i].key, key))
			return tb__config_cache[i].value;
	tb_str v = tb__read(tb__config_get, &key);
	if (tb__config_cached < TB__CACHED && !TB_ABSENT(key)) {
		tb__config_cache[tb__config_cached].key = tb__copy_kept(key);
		tb__config_cache[tb__config_cached].value = v = tb__copy_kept(v);
		tb__config_cached++;
	}
	return v;
}

/* ---- Strings. ---- */

/* tb_eq is in tinybroker.h (inline); tb__same_long is its part for more than 16 bytes: eight
 * at a time, the last eight overlapping. */
int tb__same_long(const char *a, const char *b, uint32_t n) {
	for (uint32_t i = 0; i + 8 < n; i += 8)
		if (tb__ld64(a + i) != tb__ld64(b + i))
			return 0;
	return tb__ld64(a + n - 8) == tb__ld64(b + n - 8);
}

int tb_starts_with(tb_str s, tb_str prefix) {
	return s.len >= prefix.len && tb_eq((tb_str){s.ptr, prefix.len}, prefix);
}

static int tb__space(char c) { return c == ' ' || c == '\t'; }

int tb_list_has(tb_str list, char sep, tb_str item) {
	if (TB_ABSENT(list) || TB_ABSENT(item))
		return 0;
	uint32_t i = 0;
	while (i <= list.len) {
		uint32_t start = i;
		while (i < list.len && list.ptr[i] != sep)
			i++;
		uint32_t end = i;
		while (start < end && tb__space(list.ptr[start]))
			start++;
		while (end > start && tb__space(list.ptr[end - 1]))
			end--;
		if (tb_eq((tb_str){list.ptr + start, end - start}, item))
			return 1;
		i++; /* past the separator (or the end) */
	}
	return 0;
}

tb_str tb_cstr(const char *s) {
	uint32_t n = 0;
	while (s[n])
		n++;
	return (tb_str){s, n};
}

tb_str tb_concat(tb_str a, tb_str b) {
	char *p = tb_alloc(a.len + b.len);
	for (uint32_t i = 0; i < a.len; i++)
		p[i] = a.ptr[i];
	for (uint32_t i = 0; i < b.len; i++)
		p[a.len + i] = b.ptr[i];
	return (tb_str){p, a.len + b.len};
}

tb_str tb_utoa(uint64_t v) {
	char digits[20];
	uint32_t n = 0;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	char *p = tb_alloc(n);
	for (uint32_t i = 0; i < n; i++)
		p[i] = digits[n - 1 - i];
	return (tb_str){p, n};
}

/* ---- What clang may call without being asked: it turns copy and fill loops (in this file
 * and in the plugin) into calls to memcpy and memset. Weak, so that a libc's win if one is
 * linked; no_builtin, so that clang does not turn these loops into calls to themselves. ---- */

__attribute__((weak, no_builtin)) void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
	unsigned char *d = dst;
	const unsigned char *s = src;
	while (n--)
		*d++ = *s++;
	return dst;
}

__attribute__((weak, no_builtin)) void *memmove(void *dst, const void *src, size_t n) {
	unsigned char *d = dst;
	const unsigned char *s = src;
	if (d < s) {
		while (n--)
			*d++ = *s++;
	} else {
		while (n--)
			d[n] = s[n];
	}
	return dst;
}

__attribute__((weak, no_builtin)) void *memset(void *dst, int c, size_t n) {
	unsigned char *d = dst;
	while (n--)
		*d++ = (unsigned char)c;
	return dst;
}

__attribute__((weak, no_builtin)) int memcmp(const void *a, const void *b, size_t n) {
	const unsigned char *x = a, *y = b;
	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}
