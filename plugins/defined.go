package plugins

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The metrics a plugin defines (v1_metric_define, docs/ABI.md "Metrics"). They belong to the
// plugin's name, not to one load of it: the Host keeps them while some loaded plugin of that
// name holds them, so a reload (SIGHUP) keeps their values and a plugin removed from the
// configuration takes them away once its last load is closed. Everything a plugin can make
// the broker hold for them is bounded by internal/abi's MaxMetric* constants.

// otherLabelValue is the label value under which a metric's values past
// abi.MaxMetricSeries - 1 distinct label values are counted.
const otherLabelValue = "_other"

// defaultBuckets are the upper bounds of a histogram defined without buckets: a 1-2-5 series
// over six decades, unit-free since the plugin chooses the unit (microseconds, bytes...).
var defaultBuckets = []int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000,
	20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000}

// maxBucketsText is the longest buckets text v1_metric_define reads: MaxMetricBuckets
// integers of up to 20 characters, and their commas.
const maxBucketsText = abi.MaxMetricBuckets * 21

// definedMetrics are the metrics of one plugin name.
type definedMetrics struct {
	refs int // the loaded plugins of that name holding them; Host.mu held

	mu      sync.Mutex // serializes defines
	byName  map[string]int32
	metrics [abi.MaxMetrics]atomic.Pointer[definedMetric] // by id; read without mu by the calls
	n       int32                                         // defined; mu held
}

// definedMetric is one metric: its definition and its series by label value.
type definedMetric struct {
	name, help, label string
	kind              int32
	bounds            []int64 // a histogram's

	plain  *series // the series of a metric without a label
	mu     sync.Mutex
	series map[string]*series // with a label: at most abi.MaxMetricSeries, otherLabelValue included
}

// series is one series' value: a counter's or gauge's in value, a histogram's in buckets
// (one per bound, then past them) and value (the sum).
type series struct {
	value   atomic.Int64
	buckets []atomic.Uint64
}

// acquireMetrics returns the metrics of plugin name, creating them, for a plugin being
// loaded; releaseMetrics gives them back when it is closed.
func (h *Host) acquireMetrics(name string) *definedMetrics {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.defined[name]
	if m == nil {
		m = &definedMetrics{byName: map[string]int32{}}
		h.defined[name] = m
	}
	m.refs++
	return m
}

func (h *Host) releaseMetrics(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.defined[name]; m != nil {
		if m.refs--; m.refs == 0 {
			delete(h.defined, name)
		}
	}
}

// define finds or defines a metric; it returns its id or an error status.
func (ms *definedMetrics) define(kind int32, name, help, label, buckets string) int32 {
	if len(name) > abi.MaxMetricName || len(label) > abi.MaxMetricName || len(help) > abi.MaxMetricHelp {
		return abi.StatusTooLarge
	}
	if kind < abi.MetricCounter || kind > abi.MetricHistogram || !validMetricName(name) ||
		label != "" && (!validMetricName(label) || strings.HasPrefix(label, "__") || label == "le") ||
		!utf8.ValidString(help) || buckets != "" && kind != abi.MetricHistogram {
		return abi.StatusInvalid
	}
	var bounds []int64
	if kind == abi.MetricHistogram {
		var rc int32
		if bounds, rc = parseBuckets(buckets); rc != abi.StatusOK {
			return rc
		}
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if id, ok := ms.byName[name]; ok {
		m := ms.metrics[id].Load()
		if m.kind != kind || m.help != help || m.label != label || !slices.Equal(m.bounds, bounds) {
			return abi.StatusNotAllowed
		}
		return id
	}
	if ms.n == abi.MaxMetrics {
		return abi.StatusLimit
	}
	m := &definedMetric{name: name, help: help, label: label, kind: kind, bounds: bounds}
	if label == "" {
		m.plain = m.newSeries()
	} else {
		m.series = map[string]*series{}
	}
	id := ms.n
	ms.byName[name] = id
	ms.metrics[id].Store(m)
	ms.n++
	return id
}

// validMetricName reports whether s is a Prometheus metric name without colons (which are
// for recording rules), and so a label name too.
func validMetricName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseBuckets reads a histogram's bounds: increasing integers separated by commas, or the
// default for none.
func parseBuckets(s string) ([]int64, int32) {
	if s == "" {
		return defaultBuckets, abi.StatusOK
	}
	fields := strings.Split(s, ",")
	if len(fields) > abi.MaxMetricBuckets {
		return nil, abi.StatusTooLarge
	}
	bounds := make([]int64, len(fields))
	for i, f := range fields {
		b, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || i > 0 && b <= bounds[i-1] {
			return nil, abi.StatusInvalid
		}
		bounds[i] = b
	}
	return bounds, abi.StatusOK
}

func (m *definedMetric) newSeries() *series {
	s := &series{}
	if m.kind == abi.MetricHistogram {
		s.buckets = make([]atomic.Uint64, len(m.bounds)+1)
	}
	return s
}

// seriesOf returns the series of label value v, and StatusLimit with the otherLabelValue
// series when the metric has all the series it may have.
func (m *definedMetric) seriesOf(v string) (*series, int32) {
	if m.label == "" {
		if v != "" {
			return nil, abi.StatusInvalid
		}
		return m.plain, abi.StatusOK
	}
	if len(v) > abi.MaxMetricLabelValue {
		return nil, abi.StatusTooLarge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[v]; s != nil {
		return s, abi.StatusOK
	}
	if !utf8.ValidString(v) {
		return nil, abi.StatusInvalid
	}
	rc := int32(abi.StatusOK)
	if len(m.series) >= abi.MaxMetricSeries-1 && v != otherLabelValue {
		// The last place is kept for otherLabelValue.
		v, rc = otherLabelValue, abi.StatusLimit
		if s := m.series[v]; s != nil {
			return s, rc
		}
	}
	s := m.newSeries()
	m.series[v] = s
	return s, rc
}

// update is the body of v1_metric_add, _set and _observe: op is the kind it acts on.
func (ms *definedMetrics) update(op int32, add bool, id int32, value int64, label string) int32 {
	if id < 0 || id >= abi.MaxMetrics {
		return abi.StatusInvalid
	}
	m := ms.metrics[id].Load()
	if m == nil {
		return abi.StatusInvalid
	}
	switch {
	case m.kind == abi.MetricCounter && op == abi.MetricGauge && add:
		if value < 0 {
			return abi.StatusInvalid // a counter only goes up
		}
	case m.kind != op:
		return abi.StatusInvalid
	}
	s, rc := m.seriesOf(label)
	if s == nil {
		return rc
	}
	switch {
	case m.kind == abi.MetricHistogram:
		i, _ := slices.BinarySearch(m.bounds, value) // the first bound >= value
		s.buckets[i].Add(1)
		s.value.Add(value)
	case add:
		s.value.Add(value)
	default:
		s.value.Store(value)
	}
	return rc
}

func (*hostMetricDefine) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	// The lengths are checked before reading: a length over the limit is refused, not trapped.
	if u32(s[2]) > abi.MaxMetricName || u32(s[4]) > abi.MaxMetricHelp || u32(s[6]) > abi.MaxMetricName ||
		u32(s[8]) > maxBucketsText {
		putI32(s, abi.StatusTooLarge)
		return
	}
	name, help := string(inst.read(u32(s[1]), u32(s[2]))), string(inst.read(u32(s[3]), u32(s[4])))
	label, buckets := string(inst.read(u32(s[5]), u32(s[6]))), string(inst.read(u32(s[7]), u32(s[8])))
	putI32(s, inst.p.defined.define(int32(u32(s[0])), name, help, label, buckets))
}

func (*hostMetricAdd) Call(ctx context.Context, s []uint64) {
	metricCall(ctx, s, abi.MetricGauge, true)
}

func (*hostMetricSet) Call(ctx context.Context, s []uint64) {
	metricCall(ctx, s, abi.MetricGauge, false)
}

func (*hostMetricObserve) Call(ctx context.Context, s []uint64) {
	metricCall(ctx, s, abi.MetricHistogram, true)
}

// metricCall is the body of v1_metric_add (op gauge, add; a counter too), _set and _observe.
func metricCall(ctx context.Context, s []uint64, op int32, add bool) {
	inst := enter(ctx)
	if u32(s[3]) > abi.MaxMetricLabelValue {
		putI32(s, abi.StatusTooLarge)
		return
	}
	label := inst.intern(u32(s[2]), u32(s[3]))
	putI32(s, inst.p.defined.update(op, add, int32(u32(s[0])), int64(s[1]), label))
}

// DefinedMetric is a metric a plugin defined, as read for a scrape.
type DefinedMetric struct {
	Name   string // as the plugin defined it, without the prefix
	Help   string
	Kind   int     // abi.MetricCounter, MetricGauge or MetricHistogram
	Label  string  // its label's name, or ""
	Bounds []int64 // a histogram's bucket bounds
	Series []DefinedSeries
}

// DefinedSeries is one series of a DefinedMetric.
type DefinedSeries struct {
	LabelValue string
	Value      int64    // a counter's or gauge's value, a histogram's sum
	Count      uint64   // a histogram's observations
	Buckets    []uint64 // a histogram's, cumulative, one per bound
}

// read returns the plugin's metrics, in the order defined.
func (ms *definedMetrics) read() []DefinedMetric {
	var out []DefinedMetric
	for i := range ms.metrics {
		m := ms.metrics[i].Load()
		if m == nil {
			break
		}
		dm := DefinedMetric{Name: m.name, Help: m.help, Kind: int(m.kind), Label: m.label, Bounds: m.bounds}
		if m.label == "" {
			dm.Series = []DefinedSeries{m.plain.read("")}
		} else {
			m.mu.Lock()
			for v, s := range m.series {
				dm.Series = append(dm.Series, s.read(v))
			}
			m.mu.Unlock()
			slices.SortFunc(dm.Series, func(a, b DefinedSeries) int { return strings.Compare(a.LabelValue, b.LabelValue) })
		}
		out = append(out, dm)
	}
	return out
}

func (s *series) read(label string) DefinedSeries {
	ds := DefinedSeries{LabelValue: label, Value: s.value.Load()}
	if s.buckets != nil {
		// The count is the buckets' sum, so that a scrape during an observe never shows a
		// bucket above it.
		ds.Buckets = make([]uint64, len(s.buckets)-1)
		for i := range s.buckets {
			ds.Count += s.buckets[i].Load()
			if i < len(ds.Buckets) {
				ds.Buckets[i] = ds.Count
			}
		}
	}
	return ds
}
