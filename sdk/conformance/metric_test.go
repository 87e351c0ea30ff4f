package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/plugins"
)

// metricLanguages are the languages whose conformance plugin has the row metric (all six).
var metricLanguages = []string{"go", "c", "wat", "rust", "assemblyscript", "zig"}

// metricRow is SPEC.md's row metric: a labelled counter and a histogram with buckets given,
// defined on every call, counted as the messages say.
func metricRow(t *testing.T, e *env) {
	lang := strings.TrimSuffix(strings.Split(t.Name(), "/")[1], "-calls")
	if !slices.Contains(metricLanguages, lang) {
		unavailable(t, "the row metric is not written in "+lang+" yet")
	}
	before := conformanceMetrics(t, e)
	s := e.fanout(t, ">")
	long := strings.Repeat("x", 150)
	msgs := []message{
		{"c.metric", "a", map[string]string{"tenant": "acme"}},
		{"c.metric", "bb", map[string]string{"tenant": "acme"}},
		{"c.metric", long, map[string]string{"tenant": "globex"}},
		{"c.metric", "", nil},
	}
	for _, m := range msgs {
		e.publish(t, m.topic, m.payload, m.headers)
	}
	for _, m := range msgs {
		expect(t, s.Next(t), m.topic, m.payload, m.headers)
	}
	after := conformanceMetrics(t, e)
	counter, hist := after["c_metric_total"], after["c_metric_bytes"]
	if counter.Kind != abi.MetricCounter || counter.Help != "Messages on c.metric." || counter.Label != "tenant" {
		t.Fatalf("c_metric_total defined as %+v, want a counter labelled tenant", counter)
	}
	if hist.Kind != abi.MetricHistogram || hist.Help != "Payload bytes on c.metric." || hist.Label != "" || !slices.Equal(hist.Bounds, []int64{10, 100}) {
		t.Fatalf("c_metric_bytes defined as %+v, want a histogram without a label, buckets 10 and 100", hist)
	}
	for tenant, want := range map[string]int64{"acme": 2, "globex": 1, "": 1} {
		if got := seriesOf(counter, tenant).Value - seriesOf(before["c_metric_total"], tenant).Value; got != want {
			t.Errorf("c_metric_total{tenant=%q} counted %d, want %d", tenant, got, want)
		}
	}
	h, h0 := seriesOf(hist, ""), seriesOf(before["c_metric_bytes"], "")
	if h0.Buckets == nil {
		h0.Buckets = make([]uint64, 2)
	}
	if h.Count-h0.Count != 4 || h.Value-h0.Value != 153 || h.Buckets[0]-h0.Buckets[0] != 3 || h.Buckets[1]-h0.Buckets[1] != 3 {
		t.Errorf("c_metric_bytes went from %+v to %+v; want 4 observations more, summing to 153, 3 at most 10 and at most 100", h0, h)
	}
}

// conformanceMetrics returns the metrics the conformance plugin defined, by name.
func conformanceMetrics(t *testing.T, e *env) map[string]plugins.DefinedMetric {
	t.Helper()
	out := map[string]plugins.DefinedMetric{}
	for _, m := range e.chain.Metrics()[0].Defined {
		out[m.Name] = m
	}
	return out
}

// seriesOf returns m's series of label value v; the zero series if it has none.
func seriesOf(m plugins.DefinedMetric, v string) plugins.DefinedSeries {
	for _, s := range m.Series {
		if s.LabelValue == v {
			return s
		}
	}
	return plugins.DefinedSeries{}
}
