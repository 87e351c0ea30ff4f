/*
 * tinybroker.c — the C SDK's code (see tinybroker.h). Compile it with the plugin:
 *
 *   clang --target=wasm32 -nostdlib -O2 -I sdk/c -Wl,--no-entry \
 *         -o plugin.wasm plugin.c sdk/c/tinybroker.c
 */
#include "tinybroker.h"

#include <stddef.h> /* clang's own: size_t */

/* ---- The arena: [__heap_base, end of memory), grown with memory.grow. ---- */

extern unsigned char __heap_base; /* defined by wasm-ld: the first byte after data and stack */

static uint32_t tb__top; /* the arena's first free byte; 0 until the first tb_reset */

void tb_reset(void) { tb__top = (uint32_t)(uintptr_t)&__heap_base; }

static uint32_t tb__memory_end(void) { return (uint32_t)__builtin_wasm_memory_size(0) * 65536u; }

/* tb__room is how many bytes the arena can hand out without growing memory. */
static uint32_t tb__room(void) {
	if (tb__top == 0)
		tb_reset();
	return tb__memory_end() - tb__top;
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
	return (char *)(uintptr_t)tb__top;
}

void *tb_alloc(uint32_t n) {
	char *p = tb__reserve(n);
	tb__top += n;
	return p;
}

/* ---- Reading with the ABI's convention: offer all the room there is; if the value is
 * longer (the reader returns its full length), grow and read it again. ---- */

typedef int32_t (*tb__reader)(const void *arg, char *buf, uint32_t cap);

static tb_str tb__read(tb__reader read, const void *arg) {
	uint32_t room = tb__room();
	char *buf = (char *)(uintptr_t)tb__top;
	int32_t n = read(arg, buf, room);
	if (n < 0)
		return TB_NONE;
	if ((uint32_t)n > room)
		read(arg, tb__reserve((uint32_t)n), (uint32_t)n);
	tb__top += (uint32_t)n;
	return (tb_str){buf, (uint32_t)n};
}

static int32_t tb__topic(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_topic(buf, cap); }
static int32_t tb__payload(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_payload(buf, cap); }
static int32_t tb__id(const void *arg, char *buf, uint32_t cap) { (void)arg; return tb_msg_id(buf, cap); }
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

tb_str tb_topic(void) { return tb__read(tb__topic, 0); }
tb_str tb_payload(void) { return tb__read(tb__payload, 0); }
tb_str tb_header(tb_str name) { return tb__read(tb__header, &name); }
tb_str tb_header_name_at(int32_t index) { return tb__read(tb__header_name, &index); }
tb_str tb_id(void) { return tb__read(tb__id, 0); }
tb_str tb_config_value(tb_str key) { return tb__read(tb__config_get, &key); }
tb_str tb_config_text(void) { return tb__read(tb__config, 0); }
tb_str tb_subscription(void) { return tb__read(tb__sub, 0); }
tb_str tb_group(void) { return tb__read(tb__group, 0); }
tb_str tb_redeliver_reason(void) { return tb__read(tb__reason, 0); }

/* ---- Strings. ---- */

int tb_eq(tb_str a, tb_str b) {
	if (a.len != b.len || TB_ABSENT(a) != TB_ABSENT(b))
		return 0;
	for (uint32_t i = 0; i < a.len; i++)
		if (a.ptr[i] != b.ptr[i])
			return 0;
	return 1;
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
