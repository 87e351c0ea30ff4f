package plugin

import (
	"strconv"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// A Metric is a counter, gauge or histogram the plugin defined, exported on the broker's
// /metrics as tinybroker_plugin_<plugin>_<name> (docs/ABI.md, "Metrics"). Define metrics in
// Init: every instance runs it, and defining a name again with the same kind, help, label and
// buckets gives the same metric, so that the instances share its series; the values outlive
// a reload of the plugin.
//
// Values are int64: choose the unit (microseconds, bytes) so that they are integers.
type Metric struct {
	id   int32
	name string
}

// NewCounter defines a counter: Add only. label names its one label, or is "" for none.
func NewCounter(name, help, label string) (Metric, error) {
	return define(abi.MetricCounter, name, help, label, "")
}

// NewGauge defines a gauge: Add and Set.
func NewGauge(name, help, label string) (Metric, error) {
	return define(abi.MetricGauge, name, help, label, "")
}

// NewHistogram defines a histogram: Observe. buckets are its increasing upper bounds; none
// gives the default, 1, 2, 5, 10, 20, 50 ... 1,000,000.
func NewHistogram(name, help, label string, buckets ...int64) (Metric, error) {
	var b []byte
	for i, v := range buckets {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return define(abi.MetricHistogram, name, help, label, string(b))
}

// define returns the metric, or a *StatusError: ErrInvalid for a malformed name, help, label
// or buckets, ErrTooLarge for one too long, ErrLimit past 32 metrics, ErrNotAllowed for a name
// already defined otherwise.
func define(kind int32, name, help, label, buckets string) (Metric, error) {
	id := hostMetricDefine(kind, name, help, label, buckets)
	if id < 0 {
		return Metric{}, &StatusError{Op: "define metric " + strconv.Quote(name), Status: id}
	}
	return Metric{id: id, name: name}, nil
}

// Add adds v to a counter (v >= 0) or a gauge without a label.
func (m Metric) Add(v int64) error { return m.With("").Add(v) }

// Set sets a gauge without a label.
func (m Metric) Set(v int64) error { return m.With("").Set(v) }

// Observe records v in a histogram without a label.
func (m Metric) Observe(v int64) error { return m.With("").Observe(v) }

// With is the series of the metric's label value v.
func (m Metric) With(v string) Series { return Series{m: m, value: v} }

// A Series is one label value's series of a Metric. A metric has at most 100 of them: past
// them a value is counted under "_other", and the call returns an error wrapping ErrLimit.
type Series struct {
	m     Metric
	value string
}

// Add adds v to a counter (v >= 0) or a gauge.
func (s Series) Add(v int64) error { return s.status("add to", hostMetricAdd(s.m.id, v, s.value)) }

// Set sets a gauge.
func (s Series) Set(v int64) error { return s.status("set", hostMetricSet(s.m.id, v, s.value)) }

// Observe records v in a histogram.
func (s Series) Observe(v int64) error {
	return s.status("observe", hostMetricObserve(s.m.id, v, s.value))
}

func (s Series) status(op string, st int32) error {
	if st == abi.StatusOK {
		return nil
	}
	return &StatusError{Op: op + " metric " + strconv.Quote(s.m.name), Status: st}
}
