package plugins

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// definedOf returns the metrics plugin name of c defined, by name.
func definedOf(t *testing.T, c *Chain, name string) map[string]DefinedMetric {
	t.Helper()
	for _, pm := range c.Metrics() {
		if pm.Name == name {
			out := map[string]DefinedMetric{}
			for _, m := range pm.Defined {
				out[m.Name] = m
			}
			return out
		}
	}
	t.Fatalf("no plugin %q in the chain", name)
	return nil
}

func publishN(t *testing.T, c *Chain, n, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, err := c.OnPublish(&broker.Draft{Topic: "t", Payload: make([]byte, i%200)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// A counter every instance of a pool defines in its init counts every message once, whichever
// instance took it; a reload of the plugin keeps it, and removing the plugin drops it.
func TestDefinedCounterCountsEveryMessage(t *testing.T) {
	h := newHost(t)
	spec := Spec{Name: "counting", Wasm: fixture(t, "metrics"), PoolSize: 4}
	c1, err := h.Load(context.Background(), []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	publishN(t, c1, n, 4)
	if inst := c1.Metrics()[0].Instances; inst < 2 {
		t.Logf("only %d instance(s) ran: the pool was not exercised this time", inst)
	}
	m := definedOf(t, c1, "counting")
	if got := m["messages_total"]; got.Kind != abi.MetricCounter || got.Help != "Messages seen." || got.Series[0].Value != n {
		t.Fatalf("messages_total = %+v, want a counter at %d", got, n)
	}
	hist := m["payload_bytes"].Series[0]
	var small, total int64 // sizes are i%200: 0..199
	for i := range n {
		if i%200 <= 10 {
			small++
		}
		total += int64(i % 200)
	}
	if hist.Count != n || hist.Buckets[0] != uint64(small) || hist.Value != total {
		t.Fatalf("payload_bytes = %+v, want %d observations, %d of them <= 10, summing to %d", hist, n, small, total)
	}

	// A reload: the new chain is loaded, then the old one closed.
	c2, err := h.Load(context.Background(), []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	publishN(t, c2, 10, 1)
	if got := definedOf(t, c2, "counting")["messages_total"].Series[0].Value; got != n+10 {
		t.Fatalf("after a reload, messages_total = %d, want %d", got, n+10)
	}

	// Removed: a chain without it replaces c2; loaded again later, it starts from nothing.
	load(t, h)
	if err := c2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c4 := load(t, h, spec)
	if got := definedOf(t, c4, "counting")["messages_total"].Series[0].Value; got != 0 {
		t.Fatalf("after the plugin was removed and added again, messages_total = %d, want 0", got)
	}
}

// A hostile plugin gets the statuses docs/ABI.md gives (its tb_v1_init refuses the load
// otherwise), its label values are bounded, and the plugin beside it counts undisturbed.
func TestDefinedMetricsBounded(t *testing.T) {
	h := newHost(t)
	// counting first: the messages the hostile plugin drops would not reach it.
	c := load(t, h, Spec{Name: "counting", Wasm: fixture(t, "metrics")},
		Spec{Name: "hostile", Wasm: fixture(t, "metricshostile"), PoolSize: 2})
	const n = 150
	var dropped int
	for i := range n {
		v, err := c.OnPublish(&broker.Draft{Topic: "t", Payload: fmt.Appendf(nil, "v%03d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if v.Drop {
			dropped++
		}
	}
	hostile := definedOf(t, c, "hostile")
	if len(hostile) != abi.MaxMetrics {
		t.Errorf("the hostile plugin has %d metrics, want %d", len(hostile), abi.MaxMetrics)
	}
	series := hostile["by_payload"].Series
	if len(series) != abi.MaxMetricSeries {
		t.Fatalf("by_payload has %d series, want %d", len(series), abi.MaxMetricSeries)
	}
	other := series[0] // sorted: "_other" before "v..."
	if want := n - (abi.MaxMetricSeries - 1); other.LabelValue != otherLabelValue || other.Value != int64(want) || dropped != want {
		t.Errorf("_other = %+v and %d dropped (ERR_LIMIT), want both %d", other, dropped, want)
	}
	if got := definedOf(t, c, "counting")["messages_total"].Series[0].Value; got != n {
		t.Errorf("the plugin beside it counted %d, want %d", got, n)
	}
}

// Each refusal of v1_metric_define and of the calls that change a metric, with its status.
func TestDefineStatuses(t *testing.T) {
	ms := &definedMetrics{byName: map[string]int32{}}
	long := string(make([]byte, abi.MaxMetricName+1))
	for _, tc := range []struct {
		name                      string
		kind                      int32
		metric, help, label, bkts string
		want                      int32
	}{
		{"counter", abi.MetricCounter, "c_total", "h", "", "", 0},
		{"again", abi.MetricCounter, "c_total", "h", "", "", 0},
		{"other help", abi.MetricCounter, "c_total", "other", "", "", abi.StatusNotAllowed},
		{"other kind", abi.MetricGauge, "c_total", "h", "", "", abi.StatusNotAllowed},
		{"other label", abi.MetricCounter, "c_total", "h", "l", "", abi.StatusNotAllowed},
		{"histogram", abi.MetricHistogram, "h", "", "", "1, 5,10", 1},
		{"other buckets", abi.MetricHistogram, "h", "", "", "", abi.StatusNotAllowed},
		{"labelled gauge", abi.MetricGauge, "g", "", "route", "", 2},
		{"no kind", 0, "x", "", "", "", abi.StatusInvalid},
		{"empty name", abi.MetricGauge, "", "", "", "", abi.StatusInvalid},
		{"digit first", abi.MetricGauge, "1x", "", "", "", abi.StatusInvalid},
		{"colon", abi.MetricGauge, "a:b", "", "", "", abi.StatusInvalid},
		{"le", abi.MetricHistogram, "x", "", "le", "", abi.StatusInvalid},
		{"reserved label", abi.MetricGauge, "x", "", "__x", "", abi.StatusInvalid},
		{"bad help", abi.MetricGauge, "x", "\xff", "", "", abi.StatusInvalid},
		{"gauge buckets", abi.MetricGauge, "x", "", "", "1", abi.StatusInvalid},
		{"decreasing", abi.MetricHistogram, "x", "", "", "5,1", abi.StatusInvalid},
		{"not a number", abi.MetricHistogram, "x", "", "", "1,a", abi.StatusInvalid},
		{"long name", abi.MetricGauge, long, "", "", "", abi.StatusTooLarge},
	} {
		if got := ms.define(tc.kind, tc.metric, tc.help, tc.label, tc.bkts); got != tc.want {
			t.Errorf("%s: define = %d, want %d", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		op    int32
		add   bool
		id    int32
		value int64
		label string
		want  int32
	}{
		{"counter add", abi.MetricGauge, true, 0, 3, "", abi.StatusOK},
		{"counter down", abi.MetricGauge, true, 0, -1, "", abi.StatusInvalid},
		{"counter set", abi.MetricGauge, false, 0, 1, "", abi.StatusInvalid},
		{"counter observe", abi.MetricHistogram, true, 0, 1, "", abi.StatusInvalid},
		{"label on unlabelled", abi.MetricGauge, true, 0, 1, "x", abi.StatusInvalid},
		{"observe", abi.MetricHistogram, true, 1, 7, "", abi.StatusOK},
		{"gauge set", abi.MetricGauge, false, 2, -5, "a", abi.StatusOK},
		{"gauge long label value", abi.MetricGauge, false, 2, 1, string(make([]byte, abi.MaxMetricLabelValue+1)), abi.StatusTooLarge},
		{"gauge bad label value", abi.MetricGauge, false, 2, 1, "\xff", abi.StatusInvalid},
		{"undefined id", abi.MetricGauge, true, 3, 1, "", abi.StatusInvalid},
		{"negative id", abi.MetricGauge, true, -1, 1, "", abi.StatusInvalid},
		{"id past the table", abi.MetricGauge, true, abi.MaxMetrics, 1, "", abi.StatusInvalid},
	} {
		if got := ms.update(tc.op, tc.add, tc.id, tc.value, tc.label); got != tc.want {
			t.Errorf("%s: = %d, want %d", tc.name, got, tc.want)
		}
	}
	read := ms.read()
	if c, g := read[0].Series[0].Value, read[2].Series[0]; c != 3 || g.LabelValue != "a" || g.Value != -5 {
		t.Errorf("counter %d, gauge %+v; want 3 and a=-5", c, g)
	}
	if hs := read[1].Series[0]; hs.Count != 1 || hs.Buckets[0] != 0 || hs.Buckets[1] != 0 || hs.Buckets[2] != 1 || hs.Value != 7 {
		t.Errorf("histogram %+v, want one observation of 7 in the bucket <= 10", hs)
	}
}
