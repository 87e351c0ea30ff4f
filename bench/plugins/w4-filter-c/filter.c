/* w4-filter-c is workload W4's filter plugin in C (bench/plugins/w4-filter in Go): it reads
 * one header and passes the message, dropping it only if the header "tenant" is "blocked".
 *
 *   clang --target=wasm32 -nostdlib -O2 -I ../../../sdk/c \
 *         -Wl,--no-entry -Wl,--export-dynamic -o w4-filter-c.wasm filter.c
 */
#include "../../../sdk/c/tinybroker.h"

TB_ABI_V1

static char value[64];

TB_EXPORT(tb_on_publish) int64_t tb_on_publish(void) {
	int32_t n = tb_msg_header(TB_STR("tenant"), value, sizeof value);
	if (n == 7 && value[0] == 'b' && value[1] == 'l' && value[2] == 'o' && value[3] == 'c' &&
	    value[4] == 'k' && value[5] == 'e' && value[6] == 'd') {
		tb_set_reason(TB_STR("blocked tenant"));
		return TB_DROP;
	}
	return TB_PASS;
}
