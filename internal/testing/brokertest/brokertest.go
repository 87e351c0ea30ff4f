// Package brokertest is what tinybroker's tests share to run an engine: the table of engines
// (Engines) that engine-neutral suites run on, the engine-neutral settings those tests set
// (Options), an engine started for one test (Engine.Start, Start), subscriptions drained in
// the test's goroutine (Subscribe), Eventually, and Log.
//
// Serving an engine over gRPC on loopback is package servertest, below this one: the
// plugins package's own tests use this package, and the server imports plugins.
//
// A new engine joins every suite by adding an entry to Engines that maps Options onto its own
// settings; no test of the server, the plugins or the SDKs changes.
package brokertest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
)

// Options are the settings tests give an engine, named after the configuration file's. Zero
// values take the engine's defaults. An engine without a setting ignores it; tests that rely
// on one it lacks skip that engine (see Engine).
type Options struct {
	broker.Limits

	// MaxMemoryBytes is the budget for everything the engine holds for later.
	MaxMemoryBytes int64

	// Fanout subscriptions (fanout { ... }).
	FanoutBufferMessages int
	FanoutBufferBytes    int
	DropSlowConsumers    bool          // drop what a full buffer cannot take, instead of ending the subscription
	PublisherWait        time.Duration // how long a publish may wait for a filling subscriber

	// Hooks, if not nil, are installed before the test gets the engine. (A nil
	// *plugins.Chain in this interface is not nil: leave Hooks unset instead.)
	Hooks broker.Hooks
}

// Engine is an entry of the table: how to make an engine from Options.
type Engine struct {
	Name string
	// New makes an engine with o's settings (o.Hooks are installed by Start). It may use tb
	// to skip the test, or to release what the engine needs when the test ends; shutting
	// the engine down is its caller's.
	New func(tb testing.TB, o Options) broker.Engine
	// MemoryBudget: the engine bounds what it holds by Options.MaxMemoryBytes, consumer
	// groups together to 3/4 of it, and reports it in broker.Stats.
	MemoryBudget bool
	// GroupBounds: the engine bounds each consumer group by Options.GroupMaxQueued and
	// GroupMaxQueuedBytes (and a user's quota), applying GroupOverflow when one is full.
	GroupBounds bool
	// GroupExpiry: the engine removes a group without members after GroupExpireAfter.
	GroupExpiry bool
	// DeadLetterStore: the engine keeps each group's dead letters for the admin API
	// (Engine.DeadLetters, ReplayDeadLetters, PurgeDeadLetters).
	DeadLetterStore bool
	// ExactAcks: an ack or nack of a system_id no member holds is refused as unknown
	// (ErrUnknownMessage) even from outside the member's stream. A clustered engine may pass
	// it on to the node that holds it instead.
	ExactAcks bool
	// Ordering and Fairness: the engine honours a consumer group's broker.Dispatch ordering
	// and fair_by (issue 27) instead of refusing them.
	Ordering, Fairness bool
	// Release, if not nil, releases what the engine's entry shares between the tests of a
	// package (an embedded server): EachEngine calls it after the entry's run.
	Release func()
}

// Engines is the table of engines. The first is the default: tests that do not run on every
// engine use it.
var Engines = []Engine{
	{Name: "memory", New: newMemory, MemoryBudget: true, GroupBounds: true, GroupExpiry: true, DeadLetterStore: true, ExactAcks: true, Ordering: true, Fairness: true},
	{Name: "jetstream", New: newJetStream, Release: releaseJetStream, GroupBounds: true, GroupExpiry: true, DeadLetterStore: true, ExactAcks: true,
		Ordering: true, Fairness: true},
}

func newMemory(_ testing.TB, o Options) broker.Engine {
	mo := memory.Options{
		Limits:               o.Limits,
		MaxMemoryBytes:       o.MaxMemoryBytes,
		FanoutBufferMessages: o.FanoutBufferMessages,
		FanoutBufferBytes:    o.FanoutBufferBytes,
		PublisherWait:        o.PublisherWait,
	}
	if o.DropSlowConsumers {
		mo.SlowConsumer = memory.SlowConsumerDrop
	}
	return memory.New(mo)
}

// Start makes an engine with e.New, installs o.Hooks and shuts the engine down, without
// grace, when the test ends.
func (e Engine) Start(tb testing.TB, o Options) broker.Engine {
	tb.Helper()
	b := e.New(tb, o)
	if o.Hooks != nil {
		b.SetHooks(o.Hooks)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // what the test left unacked or unsent is not waited for
		_ = b.Shutdown(ctx)
	})
	return b
}

// Start starts the default engine: Engines[0].Start.
func Start(tb testing.TB, o Options) broker.Engine {
	tb.Helper()
	return Engines[0].Start(tb, o)
}

// EachEngine returns m for a TestMain that runs the package's tests once per entry of
// Engines (those named in $TINYBROKER_ENGINES, comma-separated, if set), with *current set
// to the entry, and returns the first failing run's code:
//
//	var engine brokertest.Engine
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.EachEngine(m, &engine)) }
func EachEngine(m interface{ Run() int }, current *Engine) interface{ Run() int } {
	return eachEngine{m, current}
}

type eachEngine struct {
	m   interface{ Run() int }
	cur *Engine
}

func (r eachEngine) Run() (code int) {
	only := os.Getenv("TINYBROKER_ENGINES") // a comma-separated list of names: run those only
	for _, e := range Engines {
		if only != "" && !slices.Contains(strings.Split(only, ","), e.Name) {
			continue
		}
		*r.cur = e
		fmt.Printf("brokertest: engine %s\n", e.Name)
		c := r.m.Run()
		if e.Release != nil {
			e.Release()
		}
		if c != 0 {
			fmt.Printf("brokertest: engine %s failed\n", e.Name)
			if code == 0 {
				code = c
			}
		}
	}
	return code
}
