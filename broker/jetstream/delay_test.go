package jetstream_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// publishDelayed publishes one message delayed by delay and returns its answer.
func publishDelayed(t *testing.T, e *jetstream.Engine, topic, payload string, delay time.Duration) (broker.PublishResult, error) {
	t.Helper()
	res, errs := make([]broker.PublishResult, 1), make([]error, 1)
	e.PublishBatch([]broker.Draft{{Topic: topic, Payload: []byte(payload), DeliverAfter: delay}}, res, errs)
	return res[0], errs[0]
}

// nothingBefore fails if st delivers anything before until.
func nothingBefore(t *testing.T, st broker.Stream, until time.Time) {
	t.Helper()
	for time.Until(until) > 0 {
		for _, d := range st.Next(nil, 1, math.MaxInt) {
			if d.Msg != nil {
				t.Fatalf("%q delivered %v before anything may be", d.Msg.Payload, time.Until(until))
			}
		}
		select {
		case <-st.Ready():
		case <-time.After(time.Until(until)):
		}
	}
}

// A delayed message is stored at once and published at its time, to a group and a fanout
// subscription that match then: not before it, and soon after (NATS fires a schedule within
// 250 ms of its time, which -race and a loaded machine stretch). Its headers, key and ttl
// come with it; the answer's system_id names the schedule.
func TestDelayedPublish(t *testing.T) {
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	defer stop(t, e)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	st := e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 10}); err != nil {
		t.Fatal(err)
	}
	fan := e.NewStream(nil)
	defer fan.Close()
	if _, err := fan.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	const delay = time.Second
	sent := time.Now()
	res, errs := make([]broker.PublishResult, 2), make([]error, 2)
	e.PublishBatch([]broker.Draft{
		{Topic: "jobs.a", Payload: []byte("later"), Headers: broker.MakeHeaders(map[string]string{"h": "v"}), Key: "k1", TTL: time.Hour, DeliverAfter: delay},
		{Topic: "jobs.a", Payload: []byte("now")},
	}, res, errs)
	if errs[0] != nil || errs[1] != nil || res[0].SystemID == "" || res[0].Routed != 0 {
		t.Fatalf("publish: %v %v; want both published, the delayed one with a system_id and routed 0", res, errs)
	}
	for _, s := range []broker.Stream{st, fan} {
		if d := receive(t, s); string(d.Msg.Payload) != "now" {
			t.Fatalf("first delivery %q, want the undelayed message", d.Msg.Payload)
		}
	}
	nothingBefore(t, st, sent.Add(delay))
	for _, s := range []broker.Stream{st, fan} {
		d := receive(t, s)
		if string(d.Msg.Payload) != "later" || d.Msg.Key != "k1" || !hasHeader(d.Msg.Headers, "h", "v") {
			t.Fatalf("delivered %q key %q headers %v; want \"later\", its key and header", d.Msg.Payload, d.Msg.Key, d.Msg.Headers)
		}
		if late := time.Since(sent); late < delay {
			t.Fatalf("delivered after %v, before its delay of %v", late, delay)
		}
	}
	// The engine acks the delayed copy once it has routed it, so the delivery may come
	// before the delayed stream lets go of it.
	brokertest.Eventually(t, "no message delayed after it was published", func() bool { return e.Stats().Delayed == 0 })
}

// The delayed stream is JetStream's: a message delayed past a restart of the only node is
// published after it, at its time, to the group that matches then.
func TestDelayedAcrossRestart(t *testing.T) {
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}}
	e := start(t, o)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	const delay = 3 * time.Second
	sent := time.Now()
	if _, err := publishDelayed(t, e, "jobs.a", "across", delay); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.Delayed != 1 || s.DelayedBytes <= 0 {
		t.Fatalf("stats: %d delayed of %d bytes, want 1", s.Delayed, s.DelayedBytes)
	}
	stop(t, e)

	e = start(t, o)
	defer stop(t, e)
	st := e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	if time.Since(sent) >= delay {
		t.Skipf("the restart took %v, past the delay: nothing to check before it", time.Since(sent))
	}
	nothingBefore(t, st, sent.Add(delay))
	if d := receive(t, st); string(d.Msg.Payload) != "across" {
		t.Fatalf("delivered %q, want the delayed message", d.Msg.Payload)
	}
}

// The bounds refuse with ErrLimit, naming the setting; a retried publish (the same id) is
// stored once.
func TestDelayedBounds(t *testing.T) {
	lim := broker.Limits{MaxDelayed: 2}
	e := start(t, jetstream.Options{Limits: lim, MemoryStorage: true, Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	defer stop(t, e)
	res, errs := make([]broker.PublishResult, 3), make([]error, 3)
	d := broker.Draft{Topic: "jobs.a", Payload: []byte("x"), DeliverAfter: time.Hour, ID: "1:uid"}
	e.PublishBatch([]broker.Draft{d, d, {Topic: "jobs.a", DeliverAfter: time.Hour}}, res, errs)
	if errs[0] != nil || errs[1] != nil || !res[1].Duplicate || res[1].SystemID != res[0].SystemID {
		t.Fatalf("the same id twice: %v %v; want the second a duplicate of the first", res[:2], errs[:2])
	}
	if errs[2] != nil {
		t.Fatalf("second delayed message: %v", errs[2])
	}
	_, err := publishDelayed(t, e, "jobs.a", "third", time.Hour)
	if !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), "limits { max_delayed }") {
		t.Fatalf("third delayed message: %v; want ErrLimit naming max_delayed", err)
	}

	e2 := start(t, jetstream.Options{Limits: broker.Limits{MaxDelayedBytes: 1000}, MemoryStorage: true, Prefix: "tb2", Stream: "TB2", Server: e.Server()})
	defer stop(t, e2)
	if _, err := publishDelayed(t, e2, "jobs.a", strings.Repeat("x", 400), time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err = publishDelayed(t, e2, "jobs.a", strings.Repeat("x", 800), time.Hour)
	if !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), "limits { max_delayed_bytes }") {
		t.Fatalf("past max_delayed_bytes: %v; want ErrLimit naming it", err)
	}
}

func hasHeader(h broker.Headers, k, v string) bool {
	got, ok := h.Get(k)
	return ok && got == v
}

// A cluster of three, replicas 3: delayed messages published on every node reach the group's
// member once each, at their time, though the node leading the delayed stream (which fires
// the schedules) is stopped before they are due.
func TestDelayedAcrossLeaderLoss(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	if err := nodes[0].Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		brokertest.Eventually(t, "every node knows the group", func() bool {
			_, err := n.Group("jobs")
			return err == nil
		})
	}
	const delay, each = 3 * time.Second, 10
	sent := time.Now()
	ids := map[string]bool{}
	for i, n := range nodes {
		for j := range each {
			res, err := publishDelayed(t, n, "jobs.x", strconv.Itoa(i*each+j), delay)
			if err != nil {
				t.Fatal(err)
			}
			ids[res.SystemID] = true
		}
	}
	if len(ids) != len(nodes)*each {
		t.Fatalf("%d distinct system_ids for %d delayed messages", len(ids), len(nodes)*each)
	}
	nc, err := nats.Connect(nodes[0].Server().ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "TB_DELAYED")
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	nc.Close()
	var member *jetstream.Engine
	for i, n := range nodes {
		if "n"+strconv.Itoa(i+1) == leader {
			stop(t, n)
		} else if member == nil {
			member = n
		}
	}
	if member == nil || time.Since(sent) >= delay {
		t.Fatalf("leader %q, member %v, %v after the publishes: the test cannot check what it is for", leader, member, time.Since(sent))
	}
	st := member.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 100})
	if err != nil {
		t.Fatal(err)
	}
	nothingBefore(t, st, sent.Add(delay))
	got := map[string]bool{}
	for len(got) < len(nodes)*each {
		d := receive(t, st)
		if got[string(d.Msg.Payload)] {
			t.Fatalf("%q delivered twice", d.Msg.Payload)
		}
		got[string(d.Msg.Payload)] = true
		sub.Ack([]string{d.Msg.SystemID})
	}
	nothingBefore(t, st, time.Now().Add(time.Second)) // and nothing more
}
