package plugins

import (
	"context"
	"errors"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// What the metrics need of the plugins beyond Stats: calls per hook, failures by kind, a
// histogram of call latency per hook, and instances. Everything is counted with atomic
// adds on the plugin, and read only when metrics are scraped (Chain.Metrics); the calls
// themselves are counted on each instance first, without an atomic operation, and added
// when the plugin collects its idle instances (plugin.collect, for Stats and Metrics) or
// discards one: a scrape sees every call but those of instances busy at that moment, which
// the next scrape counts.

// Failure kinds, the values of FailureKinds.
const (
	FailTimeout    = iota // the call ran past call_timeout
	FailMemory            // it tried to grow its memory past memory_limit_mb
	FailMalformed         // it returned a verdict the ABI does not define
	FailNoInstance        // no instance could be had: instantiating or tb_v1_init failed, or the plugin was unloading
	FailTrap              // it trapped (unreachable, out-of-bounds access, a Go guest's panic...)
	NumFailureKinds
)

// FailureKinds names the failure kinds, by index.
var FailureKinds = [NumFailureKinds]string{"timeout", "memory_limit", "malformed_verdict", "no_instance", "trap"}

// failureKind classifies the error of a failed call.
func failureKind(err error) int {
	var mal malformedError
	var noInst instanceError
	switch {
	case errors.As(err, &noInst):
		return FailNoInstance
	case errors.As(err, &mal):
		return FailMalformed
	case errors.Is(err, errMemoryLimit):
		return FailMemory
	case errors.Is(err, context.DeadlineExceeded):
		return FailTimeout
	}
	return FailTrap
}

// instanceError is the failure to get an instance for a call (pool.get).
type instanceError struct{ err error }

func (e instanceError) Error() string { return e.err.Error() }
func (e instanceError) Unwrap() error { return e.err }

// The latency histogram's buckets: powers of two from 1,024 ns (~1 µs) to 2^30 ns (~1.07 s),
// and past that. Finding a bucket is one bits.Len64.
const (
	latencyMinShift = 10
	latencyBuckets  = 21 // finite upper bounds 2^10 .. 2^30 ns
)

// LatencyBounds are the upper bounds of the latency histogram's buckets, in seconds.
var LatencyBounds = func() []float64 {
	b := make([]float64, latencyBuckets)
	for i := range b {
		b[i] = float64(uint64(1)<<(latencyMinShift+i)) / 1e9
	}
	return b
}()

// latencySample: one call in latencySample is timed. Reading the clock twice costs 40-60 ns
// where Go reads it in user space, and about 250 ns where it is a system call (some virtual
// machines): more than a plain filter's whole call. See RATIONALE.md, "Operating".
const latencySample = 64

type hookMetrics struct {
	calls    atomic.Uint64
	failures [NumFailureKinds]atomic.Uint64
	buckets  [latencyBuckets + 1]atomic.Uint64 // the last: over the largest bound
	sumNanos atomic.Uint64
}

// callMetrics are one plugin's metrics, per hook.
type callMetrics struct {
	hooks [abi.NumHooks]hookMetrics
}

func (m *callMetrics) observe(k abi.Hook, start time.Time) { m.observeDuration(k, time.Since(start)) }

func (m *callMetrics) observeDuration(k abi.Hook, d time.Duration) {
	h := &m.hooks[k]
	i := 0
	if d > 1 {
		i = max(bits.Len64(uint64(d-1))-latencyMinShift, 0)
	}
	h.buckets[min(i, latencyBuckets)].Add(1)
	h.sumNanos.Add(uint64(max(d, 0)))
}

// observeEach records, for a call that handled m messages (a batch), the time each took:
// the call's time divided among them.
func (m *callMetrics) observeEach(k abi.Hook, start time.Time, n int) {
	m.observeDuration(k, time.Since(start)/time.Duration(n))
}

func (m *callMetrics) failed(k abi.Hook, err error) {
	m.hooks[k].failures[failureKind(err)].Add(1)
}

// PluginMetrics is one plugin's Stats and the rest of its metrics.
type PluginMetrics struct {
	PluginStats
	Instances int           // instances alive: idle, busy or being created
	Hooks     []HookMetrics // one per hook the plugin exports, in ABI order

	Defined []DefinedMetric // the metrics the plugin defined (v1_metric_define), in that order
}

// HookMetrics counts the calls of one hook of a plugin.
type HookMetrics struct {
	Hook     string // on_publish, on_ack or on_redeliver
	Calls    uint64 // calls made (not those skipped while the breaker was open)
	Failures [NumFailureKinds]uint64
	// Latency is a histogram of a sample of the calls (each instance's first, then one in
	// latencySample of its calls): Buckets[i] counts those that took at most LatencyBounds[i] seconds
	// (cumulative), Count all of them, Sum their total in seconds.
	Buckets []uint64
	Count   uint64
	Sum     float64
}

// Metrics reports every plugin's metrics, in chain order.
func (c *Chain) Metrics() []PluginMetrics {
	st := c.Stats()
	out := make([]PluginMetrics, len(c.all))
	for i, p := range c.all {
		pm := PluginMetrics{PluginStats: st[i], Defined: p.defined.read()}
		p.pool.mu.Lock()
		pm.Instances = p.pool.alive
		p.pool.mu.Unlock()
		for k := abi.HookPublish; k < abi.NumHooks; k++ {
			if !p.has[k] {
				continue
			}
			h := &p.metrics.hooks[k]
			hm := HookMetrics{Hook: abi.Names[k], Calls: h.calls.Load(), Buckets: make([]uint64, latencyBuckets),
				Sum: float64(h.sumNanos.Load()) / 1e9}
			for j := range h.failures {
				hm.Failures[j] = h.failures[j].Load()
			}
			for j := range h.buckets {
				hm.Count += h.buckets[j].Load()
				if j < latencyBuckets {
					hm.Buckets[j] = hm.Count
				}
			}
			pm.Hooks = append(pm.Hooks, hm)
		}
		out[i] = pm
	}
	return out
}
