package ops

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/plugins"
)

// definedCollector exports the metrics plugins define (v1_metric_define, docs/ABI.md
// "Metrics"), each named tinybroker_plugin_<plugin>_<name>. It is unchecked (its Describe
// sends nothing) because the plugins choose the names at run time; collector is checked, and
// the registry would refuse a metric it did not describe. A name that would repeat one already
// exported (two plugins "a-b" and "a_b", or a plugin named so that one of its metrics takes the
// name of one of ours) is left out, since the registry would otherwise fail the whole scrape.
// RATIONALE.md, "Why are a plugin's metrics named after it?".
type definedCollector struct {
	plugins func() []plugins.PluginMetrics
}

func (definedCollector) Describe(chan<- *prometheus.Desc) {}

func (c definedCollector) Collect(ch chan<- prometheus.Metric) {
	if c.plugins == nil {
		return
	}
	seen := map[string]bool{}
	for _, p := range c.plugins() {
		prefix := "tinybroker_plugin_" + strings.ReplaceAll(p.Name, "-", "_") + "_"
		for _, m := range p.Defined {
			name := prefix + m.Name
			if seen[name] || builtinNames[name] {
				continue
			}
			seen[name] = true
			var labels []string
			if m.Label != "" {
				labels = []string{m.Label}
			}
			d := prometheus.NewDesc(name, m.Help, labels, nil)
			for _, s := range m.Series {
				var lv []string
				if m.Label != "" {
					lv = []string{s.LabelValue}
				}
				if metric, err := definedMetric(d, m, s, lv); err == nil {
					ch <- metric
				}
			}
		}
	}
}

// definedMetric is one series of a plugin's metric. The host checked its names and label
// values already, so an error is not expected; one would leave the series out.
func definedMetric(d *prometheus.Desc, m plugins.DefinedMetric, s plugins.DefinedSeries, lv []string) (prometheus.Metric, error) {
	switch m.Kind {
	case abi.MetricCounter:
		return prometheus.NewConstMetric(d, prometheus.CounterValue, float64(s.Value), lv...)
	case abi.MetricGauge:
		return prometheus.NewConstMetric(d, prometheus.GaugeValue, float64(s.Value), lv...)
	}
	buckets := make(map[float64]uint64, len(m.Bounds))
	for i, b := range m.Bounds {
		buckets[float64(b)] = s.Buckets[i]
	}
	return prometheus.NewConstHistogram(d, s.Count, float64(s.Value), buckets, lv...)
}
