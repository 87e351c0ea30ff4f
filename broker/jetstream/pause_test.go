package jetstream_test

import (
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
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
