/* w4-filter-c is workload W4's filter plugin in C (bench/plugins/w4-filter in Go): it reads
 * one header and passes the message, dropping it only if the header "tenant" is "blocked".
 * It is built with the SDK in its fastest mode, the inbox (-DTB_INBOX), which also takes a
 * publish frame's messages in one call (tb_v1_on_publish_batch), as bench/plugins/build.sh
 * does:
 *
 *   clang --target=wasm32 -nostdlib -O2 -DTB_INBOX -I ../../../sdk/c -Wl,--no-entry \
 *         -o w4-filter-c.wasm filter.c ../../../sdk/c/tinybroker.c
 */
#include "tinybroker.h"

TB_ABI_V1

TB_ON_PUBLISH(filter) {
	if (tb_eq(tb_header(TB_S("tenant")), TB_S("blocked")))
		return tb_drop(TB_S("blocked tenant"));
	return TB_PASS;
}
