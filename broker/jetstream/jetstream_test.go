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

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns: the parent kills it
	}
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, o jetstream.Options) *jetstream.Engine {
	t.Helper()
	e, err := jetstream.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// embedded starts a NATS server in the process, stopped when the test ends.
func embedded(t *testing.T, o jetstream.EmbeddedOptions) *natsserver.Server {
	t.Helper()
	srv, err := jetstream.StartEmbedded(o, broker.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
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
		if string(d.Msg.Payload) != strconv.Itoa(i) || d.Msg.Headers.Map()["n"] != strconv.Itoa(i) || d.Msg.SystemID != ids[i] || d.Attempt != 1 {
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

	dir := t.TempDir()
	srv := embedded(t, jetstream.EmbeddedOptions{DataDir: dir, Listen: "127.0.0.1:0"})
	addr := strings.TrimPrefix(srv.ClientURL(), "nats://")
	e := start(t, jetstream.Options{URL: srv.ClientURL(), RequestTimeout: time.Second})
	defer stop(t, e)
	if err := e.Declare(broker.GroupConfig{Name: "g", Patterns: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish("a", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Ready(); err != nil {
		t.Fatalf("ready with NATS up: %v", err)
	}
	srv.Shutdown()
	brokertest.Eventually(t, "publishes refused", func() bool {
		_, err := e.Publish("a", []byte("y"), nil)
		return errors.Is(err, broker.ErrUnavailable)
	})
	if err := e.Ready(); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("ready with NATS down: %v; want ErrUnavailable (the HTTP listener's /readyz answers 503)", err)
	}
	st := e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"b"}}); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("subscribe while NATS is down: %v", err)
	}

	// NATS comes back on the same address and files: the engine reconnects by itself, and
	// the group still has what was confirmed before.
	embedded(t, jetstream.EmbeddedOptions{DataDir: dir, Listen: addr})
	brokertest.Eventually(t, "publishes accepted again", func() bool {
		_, err := e.Publish("a", []byte("z"), nil)
		return err == nil
	})
	if err := e.Ready(); err != nil {
		t.Fatalf("ready after NATS came back: %v", err)
	}
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"b"}}); err != nil {
		t.Fatalf("subscribe after NATS came back: %v", err)
	}
	brokertest.Eventually(t, "the confirmed messages queued", func() bool {
		g, err := e.Group("g")
		return err == nil && g.Queued >= 2 // a "z" that timed out may have been stored as well
	})
}

// A PublishStream frame is stored in one go: every message a group matches is confirmed
// with its own stream sequence, in order, only once JetStream has it (the group holds them
// all); a fanout subscriber gets the frame in order with the
// same system_ids and headers; and a frame JetStream cannot store is refused, each message
// saying why.
func TestPublishBatch(t *testing.T) {
	srv := embedded(t, jetstream.EmbeddedOptions{DataDir: t.TempDir()})
	o := jetstream.Options{Server: srv, RequestTimeout: time.Second}
	e := start(t, o)
	defer stop(t, e)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.*"}}); err != nil {
		t.Fatal(err)
	}
	st := e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"jobs.>", "other"}}); err != nil {
		t.Fatal(err)
	}
	const n = 300 // more than one frame's worth of the bench, fewer than the pending bound
	msgs := make([]broker.Draft, n)
	for i := range msgs {
		msgs[i] = broker.Draft{Topic: "jobs.a", Payload: []byte(strconv.Itoa(i)), Headers: broker.MakeHeaders(map[string]string{"i": strconv.Itoa(i)})}
		if i%3 == 2 { // not a group's: fanout only
			msgs[i].Topic = "other"
		}
	}
	res, errs := make([]broker.PublishResult, n), make([]error, n)
	e.PublishBatch(msgs, res, errs)
	var last uint64
	stored := 0
	for i, o := range res {
		if errs[i] != nil {
			t.Fatalf("message %d: %v", i, errs[i])
		}
		if msgs[i].Topic == "other" {
			if o.Routed != 1 {
				t.Fatalf("message %d routed to %d", i, o.Routed)
			}
			continue
		}
		if o.Seq <= last || o.Routed != 2 {
			t.Fatalf("message %d: seq %d after %d, routed %d", i, o.Seq, last, o.Routed)
		}
		last = o.Seq
		stored++
	}
	// Every store was confirmed with its sequence number above; the consumer's pending count,
	// which Queued reads, follows the stream a moment later.
	brokertest.Eventually(t, "the group holds every stored message", func() bool {
		g, err := e.Group("jobs")
		return err == nil && g.Queued == stored
	})
	for i := range n {
		d := receive(t, st)
		if string(d.Msg.Payload) != strconv.Itoa(i) || d.Msg.Headers.Map()["i"] != strconv.Itoa(i) || d.Msg.SystemID != res[i].SystemID || d.Msg.Topic != msgs[i].Topic {
			t.Fatalf("fanout %d: %q %v %s on %s", i, d.Msg.Payload, d.Msg.Headers, d.Msg.SystemID, d.Msg.Topic)
		}
	}

	// When JetStream refuses to store them (here: too large for the stream now), every
	// message of the frame a group wanted is refused UNAVAILABLE, and a fanout-only one
	// still goes out.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shrinkStream(ctx, srv, "TB"); err != nil {
		t.Fatal(err)
	}
	res, errs = make([]broker.PublishResult, 3), make([]error, 3)
	e.PublishBatch(msgs[:3], res, errs)
	for i, err := range errs {
		if want := msgs[i].Topic == "jobs.a"; want != errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("without the stream, message %d: %+v %v", i, res[i], err)
		}
	}
	if !strings.Contains(errs[0].Error(), "JetStream did not store the message") {
		t.Fatalf("error says: %v", errs[0])
	}
}

// shrinkStream makes a JetStream stream refuse every message, behind the engine's back.
func shrinkStream(ctx context.Context, srv *natsserver.Server, name string) error {
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 1
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// The dead letters a group keeps are JetStream's: bounded by the group's dead_letters_max
// (the oldest go first, counted), still there after a restart, and replayed from there.
func TestDeadLetterStore(t *testing.T) {
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}}
	e := start(t, o)
	gc := broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs"}, MaxDeliveries: 1, Limits: broker.GroupLimits{DeadLetterMax: 2}}
	if err := e.Declare(gc); err != nil {
		t.Fatal(err)
	}
	st := e.NewStream(nil)
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs"}, MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		if _, err := e.Publish("jobs", []byte(strconv.Itoa(i)), map[string]string{"n": strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
		d := receive(t, st)
		ids = append(ids, d.Msg.SystemID)
		if sub.Nack([]string{d.Msg.SystemID}, 0, "bad "+strconv.Itoa(i)) != 0 {
			t.Fatal("nack skipped")
		}
	}
	brokertest.Eventually(t, "three dead-lettered", func() bool {
		g, _ := e.Group("jobs")
		return g.DeadLettered == 3 && g.DeadLetters == 2
	})
	if g, _ := e.Group("jobs"); g.DeadLettersDropped != 1 || g.DeadLetterBytes <= 0 {
		t.Fatalf("dropped %d, bytes %d; want 1 dropped, some bytes", g.DeadLettersDropped, g.DeadLetterBytes)
	}
	st.Close()
	stop(t, e)

	e = start(t, o)
	defer stop(t, e)
	dls, next, err := e.DeadLetters("jobs", "", 1)
	if err != nil || len(dls) != 1 || next == "" {
		t.Fatalf("first page after a restart: %v %q %v", dls, next, err)
	}
	rest, next2, err := e.DeadLetters("jobs", next, 10)
	if err != nil || len(rest) != 1 || next2 != "" {
		t.Fatalf("second page: %v %q %v", rest, next2, err)
	}
	dls = append(dls, rest...)
	for i, dl := range dls { // the oldest (message 0) was let go of
		n := strconv.Itoa(i + 1)
		if dl.ID != ids[i+1] || dl.Topic != "jobs" || string(dl.Payload) != n || dl.Reason != "bad "+n || dl.Attempts != 1 ||
			dl.Code != deadletter.CodeMaxDeliveries || dl.Headers[deadletter.HeaderCode] != deadletter.CodeMaxDeliveries ||
			dl.Headers["n"] != n || dl.Headers[deadletter.HeaderGroup] != "jobs" || dl.DeadAt == 0 {
			t.Fatalf("dead letter %d: %+v", i, dl)
		}
	}
	if _, _, err := e.DeadLetters("jobs", "x", 1); !errors.Is(err, broker.ErrInvalidSubscription) {
		t.Fatalf("bad token: %v", err)
	}
	rs, err := e.ReplayDeadLetters("jobs", []string{ids[2], ids[0], "not.an id"})
	if err != nil || len(rs) != 3 || rs[0].Err != nil || rs[0].Routed != 1 || !errors.Is(rs[1].Err, broker.ErrUnknownMessage) || !errors.Is(rs[2].Err, broker.ErrUnknownMessage) {
		t.Fatalf("replay: %+v %v", rs, err)
	}
	st = e.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs"}}); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, st); string(d.Msg.Payload) != "2" || d.Msg.Headers.Map()[deadletter.HeaderReplayCount] != "1" || d.Msg.Headers.Map()[deadletter.HeaderReason] != "" ||
		d.Msg.Headers.Map()[deadletter.HeaderCode] != "" {
		t.Fatalf("replayed: %q %v", d.Msg.Payload, d.Msg.Headers)
	}
	if n, err := e.PurgeDeadLetters("jobs", nil); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if dls, _, err := e.DeadLetters("jobs", "", 10); err != nil || len(dls) != 0 {
		t.Fatalf("after the purge: %v %v", dls, err)
	}
}

// storage = "memory" keeps the stream, the dead letters and the consumers in memory; an
// existing stream keeps its storage, and the consumers follow it.
func TestMemoryStorage(t *testing.T) {
	srv := embedded(t, jetstream.EmbeddedOptions{DataDir: t.TempDir()})
	js := connect(t, srv)
	check := func(stream string, memory bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Storage == natsjs.MemoryStorage; got != memory {
			t.Errorf("stream %s: memory storage %v, want %v", stream, got, memory)
		}
		for ci := range s.ListConsumers(ctx).Info() {
			if ci.Config.MemoryStorage != memory {
				t.Errorf("consumer %s of %s: memory storage %v, want %v", ci.Name, stream, ci.Config.MemoryStorage, memory)
			}
		}
	}
	for _, tt := range []struct {
		stream        string
		first, second bool // storage asked by the engine that makes the stream, then by the next
	}{{"M", true, false}, {"F", false, true}} {
		for i, mem := range []bool{tt.first, tt.second} {
			e := start(t, jetstream.Options{Server: srv, Stream: tt.stream, Prefix: strings.ToLower(tt.stream), MemoryStorage: mem})
			if err := e.Declare(broker.GroupConfig{Name: "g" + strconv.Itoa(i), Patterns: []string{"a"}}); err != nil {
				t.Fatal(err)
			}
			stop(t, e)
		}
		check(tt.stream, tt.first)
		check(tt.stream+"_DLQ", tt.first)
	}
}
