package ops_test

import (
	"fmt"
	"testing"

	"github.com/tinybroker/tinybroker/plugins"
)

// The metrics plugins define are on /metrics under their plugin's prefix: a counter every
// instance of a pool increments, a histogram, and a hostile plugin's label values bounded
// under "_other". Two plugins whose prefixes are the same ("a-b" and "a_b") export the metric
// once, and the scrape does not fail.
func TestMetricsDefinedByPlugins(t *testing.T) {
	s := start(t, stackOptions{plugins: []plugins.Spec{
		{Name: "count-me", Wasm: wasm(t, "metrics"), PoolSize: 4},
		{Name: "count_me", Wasm: wasm(t, "metrics"), Topics: []string{"none"}},
		{Name: "hostile", Wasm: wasm(t, "metricshostile")},
	}})
	s.waitMetric(t, "tinybroker_plugin_count_me_messages_total", eq(0))
	const n = 120
	for i := range n {
		s.publish(t, "t", fmt.Sprintf("v%03d", i))
	}
	s.waitMetric(t, "tinybroker_plugin_count_me_messages_total", eq(n))
	s.waitMetric(t, "tinybroker_plugin_count_me_payload_bytes", eq(n)) // the histogram's count
	s.waitMetric(t, "tinybroker_plugin_hostile_by_payload", eq(1), "payload=v000")
	s.waitMetric(t, "tinybroker_plugin_hostile_by_payload", eq(n-99), "payload=_other")
	if v, found := value(s.scrape(t), "tinybroker_plugin_hostile_by_payload", "payload=v100"); found {
		t.Errorf("payload=v100 has a series (%v): past the bound, it should be under _other", v)
	}
	s.waitMetric(t, "tinybroker_plugin_hostile_m_A", eq(0))
}

// A plugin named so that one of its metrics takes the name of one of the broker's
// ("dropped" + "messages_total") does not replace it, nor fail the scrape.
func TestMetricsDefinedNotOverBuiltins(t *testing.T) {
	s := start(t, stackOptions{plugins: []plugins.Spec{
		{Name: "dropped", Wasm: wasm(t, "metrics")},
	}})
	s.publish(t, "t", "p")
	s.publish(t, "t", "q")
	s.waitMetric(t, "tinybroker_plugin_dropped_payload_bytes", eq(2))
	mf := s.scrape(t)["tinybroker_plugin_dropped_messages_total"]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetCounter().GetValue() != 0 || mf.GetHelp() == "Messages seen." {
		t.Fatalf("tinybroker_plugin_dropped_messages_total = %v: want the broker's own (0 dropped), not the plugin's (2)", mf)
	}
}
