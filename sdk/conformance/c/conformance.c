/* The conformance plugin (sdk/conformance/SPEC.md) in C, with the SDK in sdk/c. */
#include "tinybroker.h"

TB_ABI_V1

TB_INIT(init) {
	tb_str refuse = tb_config_value(TB_S("refuse"));
	if (!TB_ABSENT(refuse))
		return tb_refuse(tb_concat(TB_S("refused: "), refuse));
	return 0;
}

/* enumerate is every header as name=value, joined by ','. */
static tb_str enumerate(void) {
	tb_str out = TB_S("");
	int32_t n = tb_header_count();
	for (int32_t i = 0; i < n; i++) {
		tb_str name = tb_header_name_at(i);
		if (i > 0)
			out = tb_concat(out, TB_S(","));
		out = tb_concat(tb_concat(tb_concat(out, name), TB_S("=")), tb_header(name));
	}
	return out;
}

TB_ON_PUBLISH(on_publish) {
	tb_str topic = tb_topic();
	if (tb_eq(topic, TB_S("c.pass")))
		return TB_PASS;
	if (tb_eq(topic, TB_S("c.drop")))
		return tb_drop(TB_S("dropped by conformance"));
	if (tb_eq(topic, TB_S("c.reject")))
		return tb_reject(TB_CODE_PERMISSION_DENIED, tb_concat(TB_S("rejected: "), tb_header(TB_S("why"))));
	if (tb_eq(topic, TB_S("c.retopic"))) {
		tb_set_topic(TB_S("c.retopic.done"));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.headers"))) {
		tb_set_header(TB_S("added"), TB_S("1"));
		tb_set_header(TB_S("changed"), TB_S("new"));
		tb_del_header(TB_S("removed"));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.enum"))) {
		tb_set_payload(enumerate());
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.payload"))) {
		tb_str p = tb_payload();
		tb_set_payload(tb_concat(p, p));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.empty"))) {
		tb_set_payload(TB_NONE);
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.key"))) {
		tb_set_header(TB_S("key-was"), tb_key());
		tb_str tenant = tb_header(TB_S("tenant"));
		if (TB_ABSENT(tenant))
			tenant = TB_S("");
		if (tb_set_key(tenant) != TB_OK)
			return tb_reject(TB_CODE_INVALID_ARGUMENT, TB_S("key refused"));
		tb_emit_set_key(tb_emit_to(TB_S("c.key.emitted"), TB_S("")), tb_concat(TB_S("e-"), tenant));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.kv"))) {
		tb_str k = tb_header(TB_S("k")), old = tb_header(TB_S("old"));
		if (TB_ABSENT(k))
			k = TB_S("");
		if (TB_ABSENT(old))
			old = TB_S("");
		if (tb_kv_swap(k, old, tb_payload(), 0) != TB_OK)
			return tb_drop(TB_S("kv refused"));
		tb_set_payload(tb_kv_read(k));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.kv.del"))) {
		tb_str k = tb_header(TB_S("k"));
		if (TB_ABSENT(k))
			k = TB_S("");
		if (tb_kv_write(k, tb_payload(), 0) != TB_OK || tb_kv_remove(k) != TB_OK)
			__builtin_trap();
		if (!TB_ABSENT(tb_kv_read(k)))
			return tb_drop(TB_S("kv not deleted"));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.emit"))) {
		int32_t h = tb_emit_to(tb_config_value(TB_S("emit_topic")), tb_payload());
		tb_emit_set_header(h, TB_S("origin"), topic);
		h = tb_emit_to(TB_S("c.emit.second"), TB_S("2"));
		tb_emit_set_header(h, TB_S("n"), TB_S("2"));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.config"))) {
		tb_set_payload(tb_concat(tb_concat(tb_config_value(TB_S("tenant")), TB_S("|")), tb_config_text()));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.log"))) {
		tb_log_str(TB_WARN, tb_concat(TB_S("conformance log: "), tb_payload()));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.tenant"))) {
		if (!tb_eq(tb_header(TB_S("tenant")), tb_config_value(TB_S("tenant"))))
			return tb_drop(TB_S("wrong tenant"));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.metric"))) {
		/* Defined on every call, which finds the metric defined before, as SPEC.md says; a
		 * plugin would define them once, in its init. */
		int32_t messages = tb_new_metric(TB_ABI_METRIC_COUNTER, TB_S("c_metric_total"), TB_S("Messages on c.metric."), TB_S("tenant"), TB_NONE);
		int32_t size = tb_new_metric(TB_ABI_METRIC_HISTOGRAM, TB_S("c_metric_bytes"), TB_S("Payload bytes on c.metric."), TB_NONE, TB_S("10,100"));
		if (messages < 0 || size < 0 || tb_add_metric(messages, 1, tb_header(TB_S("tenant"))) != TB_OK ||
		    tb_observe_metric(size, tb_payload().len, TB_NONE) != TB_OK)
			return tb_reject(TB_CODE_INVALID_ARGUMENT, TB_S("metric refused"));
		return TB_PASS;
	}
	if (tb_eq(topic, TB_S("c.trap")))
		__builtin_trap();
	return TB_PASS;
}

TB_ON_ACK(on_ack) {
	tb_str p = tb_concat(tb_subscription(), TB_S("|"));
	p = tb_concat(tb_concat(p, tb_group()), TB_S("|"));
	p = tb_concat(tb_concat(p, tb_utoa((uint32_t)tb_attempt())), TB_S("|"));
	p = tb_concat(p, tb_id());
	int32_t h = tb_emit_to(TB_S("c.acked"), p);
	tb_emit_set_header(h, TB_S("in_flight"), tb_in_flight_ns() > 0 ? TB_S("yes") : TB_S("no"));
}

TB_ON_TICK(on_tick) {
	tb_str topic = tb_config_value(TB_S("tick_topic"));
	if (!TB_ABSENT(topic))
		tb_emit_to(topic, TB_S("tick"));
}

TB_ON_REDELIVER(on_redeliver) {
	tb_set_header(TB_S("reason"), tb_redeliver_reason());
	tb_str retry = tb_header(TB_S("retry"));
	if (tb_eq(retry, TB_S("delay"))) {
		tb_set_header(TB_S("delayed"), TB_S("1"));
		return TB_DELAY(50);
	}
	if (tb_eq(retry, TB_S("dead")))
		return tb_dead_letter(TB_S("conformance dead-letter"));
	if (tb_eq(retry, TB_S("drop")))
		return TB_DROP_MESSAGE;
	tb_set_header(TB_S("attempt-seen"), tb_utoa((uint32_t)tb_attempt()));
	return TB_REDELIVER;
}
