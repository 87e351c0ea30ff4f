package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// max_bytes bounds what the consumer groups hold: a publish past it is refused as a limit
// (ResourceExhausted), saying which setting, and no queued message is dropped for it; fanout,
// which JetStream does not store, goes on (the canary); acks make room again. A stream made
// without the bound takes it when an engine configured with it starts.
func TestMaxBytes(t *testing.T) {
	dir := t.TempDir()
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}})
	stop(t, e) // the stream exists, unbounded
	const bound = 64 << 10
	e = start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}, MaxBytes: bound})
	defer stop(t, e)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	canary := e.NewStream(nil)
	defer canary.Close()
	if _, err := canary.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"canary"}}); err != nil {
		t.Fatal(err)
	}

	payload := make([]byte, 1024)
	stored := 0
	var err error
	for ; stored < 1000; stored++ {
		if _, err = e.Publish("jobs.x", payload, nil); err != nil {
			break
		}
		if stored%16 == 0 {
			if _, err := e.Publish("canary", []byte("tweet"), nil); err != nil {
				t.Fatalf("canary publish after %d stored: %v", stored, err)
			}
			if d := receive(t, canary); string(d.Msg.Payload) != "tweet" {
				t.Fatalf("canary got %q", d.Msg.Payload)
			}
		}
	}
	if !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("publish past max_bytes: %v, want ErrLimit naming max_bytes", err)
	}
	if stored < 32 || stored > bound/1024 {
		t.Fatalf("%d messages of 1 KiB stored under a %d-byte bound", stored, bound)
	}
	brokertest.Eventually(t, "every stored message queued (none dropped)", func() bool {
		g, err := e.Group("jobs")
		return err == nil && g.Queued == stored // JetStream's count follows the stores
	})
	if _, err := e.Publish("canary", []byte("tweet"), nil); err != nil {
		t.Fatalf("canary publish when full: %v", err)
	}
	receive(t, canary)

	// A member acks a few: the stream has room again.
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if sub.Ack([]string{receive(t, st).Msg.SystemID}) != 0 {
			t.Fatal("ack skipped")
		}
	}
	brokertest.Eventually(t, "room after acks", func() bool {
		_, err := e.Publish("jobs.x", payload, nil)
		return err == nil
	})

	// The stream took the bound, with discard new: JetStream refuses rather than drops.
	js := connect(t, e.Server())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "TB")
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxBytes != bound || c.Discard != natsjs.DiscardNew {
		t.Fatalf("stream: max_bytes %d discard %v, want %d and discard new", c.MaxBytes, c.Discard, bound)
	}
}

// connect returns a JetStream client of srv, an embedded server, closed when the test ends.
func connect(t *testing.T, srv *natsserver.Server) natsjs.JetStream {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// With memory storage, the embedded server keeps at most EmbeddedOptions.MaxMemoryStore in
// memory (serve sets it to the memory engine's default budget, not JetStream's 3/4 of the
// machine): past it a publish to a group is refused as a limit, and Stats reports the bound
// as the budget. Issue 23: nothing bounded it below JetStream's default.
func TestMemoryStoreBound(t *testing.T) {
	const bound = 1 << 20
	e := start(t, jetstream.Options{MemoryStorage: true, Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir(), MaxMemoryStore: bound}})
	defer stop(t, e)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	stored := 0
	var err error
	for ; stored < 4*bound/1024; stored++ {
		if _, err = e.Publish("jobs.x", payload, nil); err != nil {
			break
		}
	}
	if !errors.Is(err, broker.ErrLimit) {
		t.Fatalf("publish past the memory store's %d bytes, after %d stored: %v, want ErrLimit", bound, stored, err)
	}
	t.Logf("%d messages of 1 KiB stored, then: %v", stored, err)
	if stored > bound/1024 {
		t.Fatalf("%d messages of 1 KiB stored in a memory store of %d bytes", stored, bound)
	}
	if b := e.Stats().MemoryBudget; b != bound {
		t.Fatalf("Stats().MemoryBudget = %d, want the memory store's %d", b, bound)
	}
}
