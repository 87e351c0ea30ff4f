package jetstream_test

import (
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// A pause is JetStream's (the consumer's configuration): it survives a restart of the only
// node, and a group paused so delivers nothing until resumed, then everything it kept. An
// ordered group, whose node parks what it pulls ahead, hands out nothing parked while paused.
func TestPauseAcrossRestart(t *testing.T) {
	for _, d := range []broker.Dispatch{{}, {Ordering: broker.OrderingKey}} {
		t.Run("ordering="+d.Ordering.String(), func(t *testing.T) {
			o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}}
			e := start(t, o)
			if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}, Dispatch: d}); err != nil {
				t.Fatal(err)
			}
			if err := e.PauseGroup("jobs", true); err != nil {
				t.Fatal(err)
			}
			stop(t, e)

			e = start(t, o)
			defer stop(t, e)
			if gi, err := e.Group("jobs"); err != nil || !gi.Paused {
				t.Fatalf("after the restart: paused %v, %v; want paused", gi.Paused, err)
			}
			if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}, Dispatch: d}); err != nil {
				t.Fatal(err) // as the configuration does at every start: it must not resume it
			}
			st := e.NewStream(nil)
			defer st.Close()
			sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"a", "b", "c"} {
				res, errs := make([]broker.PublishResult, 1), make([]error, 1)
				e.PublishBatch([]broker.Draft{{Topic: "jobs.x", Payload: []byte(k), Key: k}}, res, errs)
				if errs[0] != nil {
					t.Fatal(errs[0])
				}
			}
			nothingBefore(t, st, time.Now().Add(time.Second))
			if gi, err := e.Group("jobs"); err != nil || !gi.Paused || gi.Queued+gi.InFlight != 3 {
				t.Fatalf("paused group: %+v, %v; want paused holding 3", gi.GroupStats, err)
			}
			if err := e.PauseGroup("jobs", false); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				d := receive(t, st)
				sub.Ack([]string{d.Msg.SystemID})
			}
			if gi, err := e.Group("jobs"); err != nil || gi.Paused {
				t.Fatalf("resumed group: paused %v, %v", gi.Paused, err)
			}
		})
	}
}

// An ordered group whose queued messages wait behind a key its member holds unsettled is
// stalled from when Stats first saw it so, and stuck once that is long enough; an idle group
// is not; the ack that lets the key go on ends it.
func TestStalledGroup(t *testing.T) {
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	defer stop(t, e)
	for _, gc := range []broker.GroupConfig{
		{Name: "orders", Patterns: []string{"orders.>"}, Dispatch: broker.Dispatch{Ordering: broker.OrderingKey}},
		{Name: "idle", Patterns: []string{"idle.>"}},
	} {
		if err := e.Declare(gc); err != nil {
			t.Fatal(err)
		}
	}
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "orders", Patterns: []string{"orders.>"}, MaxInFlight: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"1", "2", "3"} {
		res, errs := make([]broker.PublishResult, 1), make([]error, 1)
		e.PublishBatch([]broker.Draft{{Topic: "orders.new", Payload: []byte(p), Key: "customer-7"}}, res, errs)
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	held := receive(t, st)
	var since int64
	// JetStream's deliveries into the node's parking count as deliveries until they stop:
	// stalled since the same time twice running.
	brokertest.Eventually(t, "the group stalled", func() bool {
		g := groupStats(t, e, "orders")
		stable := g.Stalled != 0 && g.Stalled == since
		since = g.Stalled
		return stable && g.Room == 9 && g.OldestUnacked != 0
	})
	nothingBefore(t, st, time.Now().Add(300*time.Millisecond))
	g := groupStats(t, e, "orders")
	if g.Stalled != since || !g.Stuck(time.Now().UnixNano(), 250*time.Millisecond) {
		t.Fatalf("stalled since %d, then %d; stuck %v: want the same time, stuck", since, g.Stalled, g.Stuck(time.Now().UnixNano(), 250*time.Millisecond))
	}
	if g := groupStats(t, e, "idle"); g.Stalled != 0 {
		t.Fatalf("the idle group is stalled since %d", g.Stalled)
	}
	sub.Ack([]string{held.Msg.SystemID})
	receive(t, st)
	brokertest.Eventually(t, "the group no longer stalled since then", func() bool {
		return groupStats(t, e, "orders").Stalled != since
	})
}
