package plugins

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// Ticks (on_tick, Spec.TickInterval): each plugin with the hook has one goroutine that calls
// it every tick_interval on an instance of its pool, under its call timeout and circuit
// breaker, as any hook. The period is the operator's, in the plugin's block, not the
// plugin's (RATIONALE.md, "Why are plugin ticks set by tick_interval..."). The loops start
// when an engine installs the chain (its SetHooks calls Start), which gives them the
// engine's way to publish what a tick emits, and stop when the chain is closed. Every engine
// that installs a chain ticks it: on the JetStream engine every node does, as proxy-wasm
// ticks in every worker.

// ticking is a chain's tick loops.
type ticking struct {
	emit atomic.Pointer[func([]broker.Draft)] // the engine's, from Start

	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{} // closed by stop, once started
	wg      sync.WaitGroup
	running atomic.Int32  // loops not ended
	ended   chan struct{} // closed by the last loop to end; nil: none started
}

// Start gives the chain emit, through which what on_tick emits is published, and the first
// call starts the tick loops. Every engine's SetHooks calls it with its own emit, which
// routes the messages as what OnAck returns (broker/internal/publishing.Start); installed in
// another engine later, the chain publishes through that one. After Close it does nothing.
func (c *Chain) Start(emit func([]broker.Draft)) {
	t := &c.ticking
	t.emit.Store(&emit)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started || t.stopped {
		return
	}
	t.started = true
	t.done = make(chan struct{})
	if c.logs != nil { // the lines for log topics: published from now on (logtopic.go)
		c.logs.open.Store(true)
		t.wg.Go(func() { c.logs.forward(t) })
	}
	if len(c.tick) == 0 {
		return
	}
	t.ended = make(chan struct{})
	t.running.Store(int32(len(c.tick)))
	for _, p := range c.tick {
		t.wg.Go(func() {
			p.tickLoop(t)
			if t.running.Add(-1) == 0 {
				close(t.ended)
			}
		})
	}
}

// stop ends the loops: none starts a tick after it.
func (t *ticking) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started && !t.stopped {
		close(t.done)
	}
	t.stopped = true
}

// waitUntil waits for the loops to end, until ctx is done: a tick in progress finishes, as
// the other calls in progress do when a chain is closed.
func (t *ticking) waitUntil(ctx context.Context) {
	t.mu.Lock()
	ended := t.ended
	t.mu.Unlock()
	if ended == nil {
		return
	}
	select {
	case <-ended:
	case <-ctx.Done():
	}
}

// wait waits for the loops to end.
func (t *ticking) wait() { t.wg.Wait() }

// tickLoop calls p's on_tick every tick_interval until t stops. A tick that runs past the
// next one's time makes that one skipped, and counted, not run late: ticks never queue up
// behind a slow plugin, and a plugin sees at most one tick at a time.
func (p *plugin) tickLoop(t *ticking) {
	every := p.spec.TickInterval
	next := time.Now().Add(every)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-timer.C:
		}
		p.tick(t)
		now := time.Now()
		next = next.Add(every)
		if late := now.Sub(next); late >= 0 {
			n := late/every + 1 // the ticks whose time has come
			p.ticksSkipped.Add(uint64(n))
			next = next.Add(n * every)
		}
		timer.Reset(next.Sub(now))
	}
}

// tick calls on_tick once and publishes what it emitted. A failure is counted as any call's
// (and may open the breaker); while the breaker is open the tick is skipped.
func (p *plugin) tick(t *ticking) {
	inst, _, err := p.call(&callInput{hook: abi.HookTick})
	if err != nil {
		return
	}
	var ds []broker.Draft
	if len(inst.st.emits) > 0 {
		ds = slices.Clone(inst.st.emits) // the call state's, reset by done
	}
	p.done(inst)
	if emit := t.emit.Load(); ds != nil && emit != nil {
		(*emit)(ds)
	}
}
