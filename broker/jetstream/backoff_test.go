package jetstream_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// backoffTolerance is how far a redelivery on JetStream may land from the policy's delay:
// real time, a pull's round trips and -race on a shared machine. The delays tested are 1s
// and more, and their entries at least 500ms apart, so that ±300ms tells them apart.
const backoffTolerance = 300 * time.Millisecond

// nackAndTime nacks d without a delay and returns how long its redelivery took, and it.
func nackAndTime(t *testing.T, st broker.Stream, sub broker.Subscription, d broker.Delivery) (time.Duration, broker.Delivery) {
	t.Helper()
	start := time.Now()
	if sub.Nack([]string{d.Msg.SystemID}, 0, "") != 0 {
		t.Fatal("nack skipped")
	}
	next := receive(t, st)
	return time.Since(start), next
}

func within(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want-backoffTolerance || got > want+backoffTolerance {
		t.Fatalf("%s: redelivered after %v, want %v ± %v", what, got, want, backoffTolerance)
	}
}

// A group's back-off list (issue 28) on file storage, across a restart of the engine: a
// message nacked just before the stop comes back at its entry's delay after the nack, to
// JetStream's second (the delay went to JetStream with the -NAK); the group, not declared again, has
// its settings from the consumer's metadata; and the next attempt waits the entry of
// JetStream's delivery count, which the restart kept too.
func TestBackoffListAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}}
	s := time.Second
	list := []time.Duration{s, 2 * s, 3 * s}
	const jitter = 0.1
	// Jitter shortens by up to a tenth: a delay is in (0.9, 1] of its entry; want its middle.
	entry := func(attempt uint32) time.Duration {
		d := list[min(int(attempt), len(list))-1]
		return d - time.Duration(jitter/2*float64(d))
	}
	e := start(t, o)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"},
		Limits: broker.GroupLimits{RedeliveryBackoff: list, RedeliveryJitter: jitter}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish("jobs.x", []byte("m"), nil); err != nil {
		t.Fatal(err)
	}
	st := e.NewStream(nil)
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}})
	if err != nil {
		t.Fatal(err)
	}
	took, d := nackAndTime(t, st, sub, receive(t, st))
	if d.Attempt != 2 {
		t.Fatalf("attempt %d, want 2", d.Attempt)
	}
	within(t, "attempt 1", took, entry(1))
	nacked := time.Now()
	if sub.Nack([]string{d.Msg.SystemID}, 0, "") != 0 {
		t.Fatal("nack skipped")
	}
	stop(t, e)

	restarted := time.Now()
	e = start(t, o)
	defer stop(t, e)
	gi, err := e.Group("jobs")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gi.Limits.RedeliveryBackoff, list) || gi.Limits.RedeliveryJitter != jitter {
		t.Fatalf("after the restart the group's back-off is %v jitter %v, want %v jitter %v", gi.Limits.RedeliveryBackoff, gi.Limits.RedeliveryJitter, list, jitter)
	}
	st = e.NewStream(nil)
	defer st.Close()
	if sub, err = st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	if up := time.Since(restarted); up > entry(2)-backoffTolerance {
		t.Fatalf("the restart took %v, longer than the delay it is to be measured within", up)
	}
	d = receive(t, st)
	if d.Attempt != 3 {
		t.Fatalf("after the restart: attempt %d, want 3 (JetStream's delivery count)", d.Attempt)
	}
	// JetStream keeps the due time of a nacked message in its consumer store in whole
	// seconds, rounded down (nats-server's encodeConsumerState): a delay a restart
	// interrupts may end up to a second early, never late.
	if took := time.Since(nacked); took < entry(2)-time.Second-backoffTolerance || took > entry(2)+backoffTolerance {
		t.Fatalf("attempt 2, nacked before the restart: redelivered after %v, want %v less up to 1s (± %v)", took, entry(2), backoffTolerance)
	}
	took, d = nackAndTime(t, st, sub, d)
	if d.Attempt != 4 {
		t.Fatalf("attempt %d, want 4", d.Attempt)
	}
	within(t, "attempt 3, after the restart", took, entry(3))
}

// The ack deadline's expiry takes the policy too, and a declaration the policy cannot
// apply is refused, naming the setting.
func TestBackoffListOnDeadline(t *testing.T) {
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	defer stop(t, e)
	err := e.Declare(broker.GroupConfig{Name: "bad", Patterns: []string{"bad.>"}, Limits: broker.GroupLimits{RedeliveryBackoff: []time.Duration{time.Second, -time.Second}}})
	if !errors.Is(err, broker.ErrInvalidSubscription) || !strings.Contains(err.Error(), "redelivery_backoff[1] is -1s") {
		t.Fatalf("a negative entry: %v", err)
	}
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"},
		Limits: broker.GroupLimits{RedeliveryBackoff: []time.Duration{1200 * time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish("jobs.x", []byte("m"), nil); err != nil {
		t.Fatal(err)
	}
	st := e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, AckDeadline: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	receive(t, st)
	start := time.Now()
	if d := receive(t, st); d.Attempt != 2 {
		t.Fatalf("attempt %d", d.Attempt)
	}
	within(t, "after the ack deadline", time.Since(start), 100*time.Millisecond+1200*time.Millisecond)
}

// consumerLeader returns the name of the server leading the consumer of group, and the
// stream and consumer names, as JetStream reports them to a client of srvURL.
func consumerLeader(t *testing.T, js natsjs.JetStream, group string) (leader, stream, consumer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "TB")
	if err != nil {
		t.Fatal(err)
	}
	for ci := range s.ListConsumers(ctx).Info() {
		if ci.Config.Metadata["tinybroker-group"] == group {
			if ci.Cluster != nil {
				leader = ci.Cluster.Leader
			}
			return leader, "TB", ci.Name
		}
	}
	t.Fatalf("no consumer for group %q", group)
	return
}

// A leader change on a cluster of three: the group declared on node a with a back-off
// list, its member on node b, then on node c (which learned the group from JetStream);
// the consumer's leader steps down between a nack and its redelivery. The nacked message
// comes back at its entry's delay, up to a second late (the new leader has the due time
// from the old one's log), and the next nack, handled by node c, takes the entry of
// JetStream's delivery count under the settings c read from the consumer's metadata.
func TestBackoffListAcrossLeaderChange(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	s := time.Second
	list := []time.Duration{s, 2 * s, 3 * s}
	if err := a.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}, Limits: broker.GroupLimits{RedeliveryBackoff: list}}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "node b routes to the group", func() bool {
		_, err := b.Group("jobs")
		return err == nil
	})
	if _, err := a.Publish("jobs.x", []byte("m"), nil); err != nil {
		t.Fatal(err)
	}
	st := b.NewStream(nil)
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}})
	if err != nil {
		t.Fatal(err)
	}
	took, d := nackAndTime(t, st, sub, receive(t, st))
	within(t, "attempt 1", took, list[0])

	nc, err := nats.Connect(a.Server().ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The member leaves (its attempt 2 goes back at once: it did not fail); node c's
	// member takes it and nacks it.
	st.Close()
	st = c.NewStream(nil)
	defer st.Close()
	if sub, err = st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, st)
	if d.Attempt != 3 {
		t.Fatalf("on node c: attempt %d, want 3", d.Attempt)
	}
	if gi, err := c.Group("jobs"); err != nil || !slices.Equal(gi.Limits.RedeliveryBackoff, list) {
		t.Fatalf("node c's settings of the group: %v %v", gi.Limits.RedeliveryBackoff, err)
	}
	nacked := time.Now()
	if sub.Nack([]string{d.Msg.SystemID}, 0, "") != 0 {
		t.Fatal("nack skipped")
	}
	old, stream, consumer := consumerLeader(t, js, "jobs")
	if _, err := nc.Request("$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+consumer, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "a new consumer leader", func() bool {
		l, _, _ := consumerLeader(t, js, "jobs")
		return l != "" && l != old
	})
	d = receive(t, st)
	if d.Attempt != 4 {
		t.Fatalf("after the leader change: attempt %d, want 4", d.Attempt)
	}
	// Measured: 1.02 to 1.05s late in every run (JetStream's new leader; the cause is not
	// pinned down). Never early; the next attempt, on the new leader, is on time.
	if took := time.Since(nacked); took < list[2]-backoffTolerance || took > list[2]+time.Second+backoffTolerance {
		t.Fatalf("attempt 3, across the leader change: redelivered after %v, want %v, up to 1s late (± %v)", took, list[2], backoffTolerance)
	}
	took, _ = nackAndTime(t, st, sub, d) // the last entry repeats
	within(t, "attempt 4, on the new leader", took, list[2])
}
