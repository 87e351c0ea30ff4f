/* tenant-filter drops messages whose header "tenant" is not in the config's "allow" list. */
#include "tinybroker.h"

TB_ABI_V1

TB_ON_PUBLISH(filter) {
	tb_str tenant = tb_header(TB_S("tenant"));
	if (!tb_list_has(tb_config_value(TB_S("allow")), ',', tenant))
		return tb_drop(tb_concat(TB_S("tenant not allowed: "), tenant));
	return TB_PASS;
}
