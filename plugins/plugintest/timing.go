package plugintest

import (
	"fmt"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

// Timing is the cost of a plugin's calls of one hook, as measured by TimePublish, TimeAck and
// TimeRedeliver.
type Timing struct {
	Calls     int           // calls timed
	PerCall   time.Duration // wall-clock time per call, on the broker's own path
	HostCalls float64       // host functions (v1_*) the plugin called per call
	Failures  int           // calls that failed (included in PerCall)
	Batched   float64       // TimePublishFrame: the part of the calls made in batches (0 to 1)
}

// TimePublish calls on_publish on m over and over for about d (at least 10 calls), the way
// the broker does for each message published on its topics, and returns the cost of a
// call: the plugin's own work, its host calls, and the host's per-call work (taking an
// instance, checking the verdict), but not what the broker does with the result.
//
// The time is wall-clock time on this machine, with whatever else runs on it. A time limit
// per call (Options.CallTimeout, 10s by default here) costs a few µs a call: to see what
// the broker pays by default, load the plugin with CallTimeout -1 (none).
func (p *Plugin) TimePublish(m Message, d time.Duration) (Timing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d0, err := p.timedDraft(m)
	if err != nil {
		return Timing{}, err
	}
	return p.time(plugins.HookPublish, d, func() {
		dr := d0
		_, _ = p.chain.OnPublish(&dr)
	})
}

// timedDraft is m as the message a timing publishes again and again, checked as a publish
// would be, with headers of its own. p.mu is held.
func (p *Plugin) timedDraft(m Message) (broker.Draft, error) {
	if p.closed {
		return broker.Draft{}, errClosed
	}
	if err := broker.ValidateTopic(m.Topic); err != nil {
		return broker.Draft{}, refused(err)
	}
	return broker.Draft{Topic: m.Topic, Payload: m.Payload, Headers: broker.MakeHeaders(m.Headers)}, nil
}

// TimePublishFrame is TimePublish for m published in frames of size copies of it (as
// PublishStream frames are: the Go SDK's publisher and `tinybroker bench` send up to 128
// messages a frame): Calls and PerCall count messages. A plugin with batches (docs/ABI.md,
// "Batches") takes each frame in one call; Batched says which part of the calls were.
func (p *Plugin) TimePublishFrame(m Message, size int, d time.Duration) (Timing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d0, err := p.timedDraft(m)
	if err != nil {
		return Timing{}, err
	}
	if size < 1 {
		return Timing{}, fmt.Errorf("plugin %q: a frame of %d messages", p.name, size)
	}
	ds := make([]broker.Draft, size)
	vs, errs := make([]broker.PublishVerdict, size), make([]error, size)
	before := p.Stats()
	t, err := p.time(plugins.HookPublish, d, func() {
		for i := range ds {
			ds[i] = d0
		}
		clear(vs)
		p.chain.OnPublishBatch(ds, vs, errs)
	})
	if err != nil {
		return t, err
	}
	after := p.Stats()
	t.Calls *= size
	t.PerCall /= time.Duration(size)
	if made := after.Calls - before.Calls; made > 0 {
		t.Batched = float64(after.Batched-before.Batched) / float64(made)
	}
	return t, nil
}

// TimeAck is TimePublish for on_ack.
func (p *Plugin) TimeAck(e AckEvent, d time.Duration) (Timing, error) {
	return p.timeEvent(plugins.HookAck, e.Message, e.Event, d, func(ev event) func() {
		a := ev.ack(e.InFlight)
		return func() { p.chain.OnAck(a) }
	})
}

// TimeRedeliver is TimePublish for on_redeliver.
func (p *Plugin) TimeRedeliver(e RedeliverEvent, d time.Duration) (Timing, error) {
	return p.timeEvent(plugins.HookRedeliver, e.Message, e.Event, d, func(ev event) func() {
		r := ev.redeliver(e.Reason)
		return func() { p.chain.OnRedeliver(r) }
	})
}

// timeEvent times hook on the event of m and e: caller returns a function that makes one
// call of it, given the event (made once, before the calls are timed).
func (p *Plugin) timeEvent(hook string, m Message, e Event, d time.Duration, caller func(event) func()) (Timing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ev, err := p.event(m, e)
	if err != nil {
		return Timing{}, err
	}
	return p.time(hook, d, caller(ev))
}

// time runs call, one call of hook, in rounds of doubling size until d has passed, and
// reports the cost per call from the plugin's counters. p.mu is held.
func (p *Plugin) time(hook string, d time.Duration, call func()) (Timing, error) {
	before := p.Stats()
	var (
		calls   int
		elapsed time.Duration
	)
	for n := 1; calls < 10 || elapsed < d; {
		start := time.Now()
		for range n {
			call()
		}
		elapsed += time.Since(start)
		calls += n
		if p.Stats().Calls == before.Calls {
			return Timing{}, fmt.Errorf("plugin %q: %s: %w", p.name, hook, ErrNoHook)
		}
		// Next, twice as many calls, or about as many as are left to fill d.
		left := int64(d-elapsed) * int64(calls) / max(int64(elapsed), 1)
		n = int(max(min(int64(2*n), left), 1))
	}
	after := p.Stats()
	made := after.Calls - before.Calls
	return Timing{
		Calls:     calls,
		PerCall:   elapsed / time.Duration(calls),
		HostCalls: float64(after.HostCalls-before.HostCalls) / float64(made),
		Failures:  int(after.Failures - before.Failures),
	}, nil
}
