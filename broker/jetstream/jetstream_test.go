package jetstream_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/brokertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, o jetstream.Options) *jetstream.Engine {
	t.Helper()
	e, err := jetstream.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func stop(t *testing.T, e *jetstream.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
}

// receive waits for the next message delivered on st.
func receive(t *testing.T, st broker.Stream) broker.Delivery {
	t.Helper()
	deadline := time.After(brokertest.Patience)
	for {
		for _, d := range st.Next(nil, 1, math.MaxInt) {
			if d.Msg != nil {
				return d
			}
		}
		select {
		case <-st.Ready():
		case <-deadline:
			t.Fatal("no delivery")
		}
	}
}

// A single embedded node is durable: what a group without members was given is still there
// after a restart on the same data directory, for its next member, in order.
func TestDurableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}}
	e := start(t, o)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	ids := make([]string, n)
	for i := range n {
		res, err := e.Publish("jobs.x", []byte(strconv.Itoa(i)), map[string]string{"n": strconv.Itoa(i)})
		if err != nil || res.Routed != 1 {
			t.Fatalf("publish %d: %+v %v", i, res, err)
		}
		ids[i] = res.SystemID
	}
	stop(t, e)

	e = start(t, o)
	defer stop(t, e)
	if g, err := e.Group("jobs"); err != nil || g.Queued != n || !g.Declared {
		t.Fatalf("after the restart: %+v %v", g.GroupStats, err)
	}
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		d := receive(t, st)
		if string(d.Msg.Payload) != strconv.Itoa(i) || d.Msg.Headers["n"] != strconv.Itoa(i) || d.Msg.SystemID != ids[i] || d.Attempt != 1 {
			t.Fatalf("message %d: %q %v %s attempt %d", i, d.Msg.Payload, d.Msg.Headers, d.Msg.SystemID, d.Attempt)
		}
		if sub.Ack([]string{d.Msg.SystemID}) != 0 {
			t.Fatalf("ack of %d skipped", i)
		}
	}
	brokertest.Eventually(t, "every message acked", func() bool {
		g, _ := e.Group("jobs")
		return g.Queued == 0 && g.InFlight == 0
	})
}

// A data directory that cannot be written is refused at start, saying so.
func TestUnwritableDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(file, "data")}
	if os.Geteuid() != 0 { // root writes anywhere
		dirs = append(dirs, ro)
	}
	for _, dir := range dirs {
		_, err := jetstream.New(jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}})
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("data dir %s: %v", dir, err)
		}
	}
	if _, err := jetstream.New(jetstream.Options{}); err == nil || !strings.Contains(err.Error(), "data_dir") {
		t.Fatalf("no data dir: %v", err)
	}
}

// An unreachable external NATS server is a clear error at start; one that goes away makes
// publishes and subscriptions UNAVAILABLE until it is back.
func TestExternalNATS(t *testing.T) {
	_, err := jetstream.New(jetstream.Options{URL: "nats://127.0.0.1:1", RequestTimeout: time.Second})
	if !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach the NATS server at nats://127.0.0.1:1") {
		t.Fatalf("unreachable: %v", err)
	}

	srv, err := jetstream.StartEmbedded(jetstream.EmbeddedOptions{DataDir: t.TempDir(), Listen: "127.0.0.1:0"}, broker.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	e := start(t, jetstream.Options{URL: srv.ClientURL(), RequestTimeout: time.Second})
	defer stop(t, e)
	if err := e.Declare(broker.GroupConfig{Name: "g", Patterns: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish("a", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	brokertest.Eventually(t, "publishes refused", func() bool {
		_, err := e.Publish("a", []byte("y"), nil)
		return errors.Is(err, broker.ErrUnavailable)
	})
	st := e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"b"}}); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("subscribe while NATS is down: %v", err)
	}
}
