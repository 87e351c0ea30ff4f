/* w4-transform-c is workload W4's transform plugin in C (bench/plugins/w4-transform in Go):
 * it adds the header x-w4: 1. It is built with the SDK in its fastest mode, the inbox
 * (-DTB_INBOX), which also takes a publish frame's messages in one call
 * (tb_v1_on_publish_batch), as bench/plugins/build.sh does:
 *
 *   clang --target=wasm32 -nostdlib -O2 -DTB_INBOX -I ../../../sdk/c -Wl,--no-entry \
 *         -o w4-transform-c.wasm transform.c ../../../sdk/c/tinybroker.c
 */
#include "tinybroker.h"

TB_ABI_V1

TB_ON_PUBLISH(transform) {
	if (tb_set_header(TB_S("x-w4"), TB_S("1")) != TB_OK)
		tb_log_str(TB_ERROR, TB_S("w4-transform-c: tb_set_header failed"));
	return TB_PASS;
}
