/* w4-transform-c is workload W4's transform plugin in C (bench/plugins/w4-transform in Go):
 * it adds the header x-w4: 1.
 *
 *   clang --target=wasm32 -nostdlib -O2 -I ../../../sdk/c \
 *         -Wl,--no-entry -Wl,--export-dynamic -o w4-transform-c.wasm transform.c
 */
#include "../../../sdk/c/tinybroker.h"

TB_ABI_V1

TB_EXPORT(tb_on_publish) int64_t tb_on_publish(void) {
	if (tb_msg_set_header(TB_STR("x-w4"), TB_STR("1")) != TB_OK) {
		tb_log(TB_ERROR, TB_STR("w4-transform-c: v1_msg_set_header failed"));
	}
	return TB_PASS;
}
