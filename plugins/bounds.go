package plugins

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tinybroker/tinybroker/plugins/internal/meter"
)

// What keeps a plugin from stopping the broker (RATIONALE.md, "Why is every plugin call
// bounded, even with call_timeout = "none"?"):
//
//   - Every module is metered (plugins/internal/meter), whatever call_timeout says: its loops
//     and calls come back to meterYield every meter.Fuel turns, where a call whose instance's
//     context was cancelled is stopped, and where the Go runtime can stop it for a garbage
//     collection (without it, one looping call holds up the collector's stop-the-world, and
//     with it every goroutine of the broker).
//   - A watchdog goroutine per plugin with a call_timeout stops a call that runs past it, by
//     cancelling its instance's context: no timer or context per call.
//   - Guest code runs on at most GOMAXPROCS-1 goroutines at once across every plugin (one on
//     a machine of one or two cores): a looping plugin cannot take every core. A call that
//     finds them all busy waits, at most its call_timeout (or noLimitWait), and then fails as
//     any call of the plugin fails, through its failure policy.
//   - Closing a plugin (a reload, shutdown) cancels the calls still running once the grace
//     period its caller gives is over.

// DefaultCallTimeout is call_timeout when the config file does not set it (RATIONALE.md).
const DefaultCallTimeout = time.Second

// NoCallTimeout is call_timeout = "none": no time limit per call. The calls are still
// stopped when the plugin is closed, and still count against the broker's cores.
const NoCallTimeout time.Duration = -1

// noLimitWait is how long a call of a plugin without a call_timeout waits for a core.
const noLimitWait = time.Second

// timeoutError is why a call stopped by the watchdog failed; it is a context.DeadlineExceeded.
type timeoutError struct{ limit time.Duration }

func (e timeoutError) Error() string {
	return fmt.Sprintf("the call ran longer than its call_timeout (%v) and was stopped; make the plugin faster or raise call_timeout", e.limit)
}
func (e timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// errUnloading is why a call still running when its plugin was closed failed.
var errUnloading = errors.New("the plugin was unloaded (a reload or shutdown) while the call ran, and the call was stopped")

// busyError is why a call that found every core allowed to plugins busy for too long failed.
type busyError struct {
	max  int32
	wait time.Duration
}

func (e busyError) Error() string {
	return fmt.Sprintf("no core was free for the call within %v: plugin calls already run on %d goroutines, the most the broker allows (GOMAXPROCS-1); another plugin may be slow or looping", e.wait, e.max)
}

// cores bounds the goroutines running guest code at once, across every plugin of a Host.
type cores struct {
	max  int32
	busy atomic.Int32
}

func newCores() *cores { return &cores{max: int32(max(1, runtime.GOMAXPROCS(0)-1))} }

// acquire takes a core for a call of p, waiting if none is free (see busyError).
func (c *cores) acquire(p *plugin) error {
	if c.busy.Add(1) <= c.max {
		return nil
	}
	c.busy.Add(-1)
	return c.wait(p)
}

func (c *cores) release() { c.busy.Add(-1) }

func (c *cores) wait(p *plugin) error {
	limit := p.spec.CallTimeout
	if limit <= 0 {
		limit = noLimitWait
	}
	deadline := time.Now().Add(limit)
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		if p.base.Err() != nil {
			return errUnloading
		}
		time.Sleep(pause)
		if c.busy.Add(1) <= c.max {
			return nil
		}
		c.busy.Add(-1)
		if time.Now().After(deadline) {
			return busyError{c.max, limit}
		}
	}
}

// watch is the plugin's registry of live instances, which its watchdog looks at.
type watch struct {
	mu    sync.Mutex
	insts map[*instance]struct{}
	stop  chan struct{}
	wg    sync.WaitGroup // the watchdog
}

// track registers inst, made with a context of its own (cancel stops its calls).
func (p *plugin) track(inst *instance) {
	p.watch.mu.Lock()
	if p.watch.insts == nil {
		p.watch.insts = make(map[*instance]struct{})
	}
	p.watch.insts[inst] = struct{}{}
	p.watch.mu.Unlock()
}

func (p *plugin) untrack(inst *instance) {
	p.watch.mu.Lock()
	delete(p.watch.insts, inst)
	p.watch.mu.Unlock()
	inst.cancel(nil)
}

// startWatchdog starts the goroutine that stops calls past the plugin's call_timeout. It
// looks four times per call_timeout: a call is stopped after between one and one and a
// quarter call_timeouts. An instance's phase (odd while a call runs, counted up at its start
// and end) is all a call pays for it.
func (p *plugin) startWatchdog() {
	limit := p.spec.CallTimeout
	if limit <= 0 {
		return
	}
	p.watch.stop = make(chan struct{})
	tick := max(limit/4, time.Millisecond)
	p.watch.wg.Go(func() { // stopped by stopWatchdog, which waits for it
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-p.watch.stop:
				return
			case <-t.C:
			}
			p.watch.mu.Lock()
			for inst := range p.watch.insts {
				phase := inst.phase.Load()
				if phase&1 == 0 || phase != inst.seenPhase {
					inst.seenPhase, inst.seenFor = phase, 0
					continue
				}
				if inst.seenFor += tick; inst.seenFor >= limit {
					inst.cancel(timeoutError{limit})
				}
			}
			p.watch.mu.Unlock()
		}
	})
}

func (p *plugin) stopWatchdog() {
	if p.watch.stop != nil {
		close(p.watch.stop)
		p.watch.wg.Wait()
	}
}

// meterYield is the host function metered code calls every meter.Fuel turns (meter's
// ImportModule.ImportName). Being in Go, the goroutine can be stopped for a collection or
// preempted here; a call whose context is done is stopped, by a panic that wazero turns into
// the call's error (and the instance is discarded, as after any failed call). ctx is the
// call's *callCtx: the instance's own context, or instantiation's with its time limit.
type meterYield struct{}

func (*meterYield) Call(ctx context.Context, stack []uint64) {
	if err := ctx.Err(); err != nil {
		panic(err)
	}
	stack[0] = meter.Fuel
}

func instantiateMeter(ctx context.Context, r wazero.Runtime) error {
	_, err := r.NewHostModuleBuilder(meter.ImportModule).NewFunctionBuilder().
		WithGoFunction(new(meterYield), nil, []api.ValueType{api.ValueTypeI32}).Export(meter.ImportName).
		Instantiate(ctx)
	return err
}

// stoppedWhy turns the error of a call that wazero stopped because its instance's context
// was cancelled into why it was: its time ran out, or the plugin was unloaded.
func (inst *instance) stoppedWhy(err error) error {
	if err == nil || inst.ictx.Err() == nil {
		return err
	}
	if cause := context.Cause(inst.ictx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return instanceError{errUnloading}
}
