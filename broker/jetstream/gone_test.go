package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
)

// A reading of a consumer taken before JetStream deleted it (a Stats listing in flight when
// the group expired or was deleted) does not bring the forgotten group back; a consumer made
// again under the same name is another, and is learned. Before, the stale reading added the
// group again, and with no deletion left to forget it, it never expired (TestGroupExpiry on
// this engine, about one run in five).
func TestStaleReadingDoesNotBringBackAGroup(t *testing.T) {
	e := newEngine(t, Options{})
	gc := broker.GroupConfig{ID: "jobs", Name: "jobs", Patterns: []string{"jobs"}}
	if err := e.Declare(gc); err != nil {
		t.Fatal(err)
	}
	read := func() *jetstream.ConsumerInfo {
		t.Helper()
		ctx, cancel := e.ctx()
		defer cancel()
		c, err := e.js.Consumer(ctx, e.opts.Stream, encodeName("jobs"))
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo()
	}
	stale := read()
	if err := e.DeleteGroup("jobs"); err != nil {
		t.Fatal(err)
	}
	if g := e.learn(stale); g != nil {
		t.Fatal("a reading from before the deletion brought the group back")
	}
	if n := len(e.Stats().Groups); n != 0 {
		t.Fatalf("%d groups after the deletion, want 0", n)
	}

	// Made again: the new consumer is learned, and the old reading changes nothing.
	if err := e.Declare(gc); err != nil {
		t.Fatal(err)
	}
	fresh := read()
	if !fresh.Created.After(stale.Created) {
		t.Fatalf("created %v, not after the deleted one's %v", fresh.Created, stale.Created)
	}
	e.mu.Lock()
	g := e.groups["jobs"]
	e.mu.Unlock()
	if g == nil {
		t.Fatal("the group made again is not known")
	}
	e.learn(stale)
	e.mu.Lock()
	created := g.created
	e.mu.Unlock()
	if !created.Equal(fresh.Created) {
		t.Fatalf("the group's consumer is taken as the one created %v, want %v", created, fresh.Created)
	}
}

// Fanout copies skip NATS only where nothing but this process can reach the server.
func TestLocalFanout(t *testing.T) {
	for _, tt := range []struct {
		listen string
		local  bool
	}{{"", true}, {"127.0.0.1:0", false}} {
		e, err := New(Options{Embedded: EmbeddedOptions{DataDir: t.TempDir(), Listen: tt.listen}, MemoryStorage: true})
		if err != nil {
			t.Fatal(err)
		}
		if e.local != tt.local {
			t.Errorf("listen %q: local %v, want %v", tt.listen, e.local, tt.local)
		}
		st := e.NewStream(nil)
		if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"a.*", "a.b"}}); err != nil {
			t.Fatal(err)
		}
		res, err := e.Publish("a.b", []byte("x"), map[string]string{"k": "v"})
		if err != nil || res.Routed != 1 {
			t.Fatalf("publish: %+v %v", res, err)
		}
		var got []broker.Delivery
		for deadline := time.Now().Add(5 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
			for _, d := range st.Next(nil, 10, 1<<20) {
				if d.Msg != nil {
					got = append(got, d)
				}
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // a second copy, if any, would have come
		if len(got) != 1 || got[0].Msg == nil || string(got[0].Msg.Payload) != "x" || got[0].Msg.Headers.Map()["k"] != "v" ||
			got[0].Msg.SystemID != res.SystemID || got[0].Msg.HeaderBytes != 2 || got[0].Msg.PublishedAt == 0 {
			t.Fatalf("listen %q: got %+v", tt.listen, got)
		}
		if more := st.Next(nil, 10, 1<<20); len(more) != 0 { // two patterns match: once
			t.Fatalf("listen %q: delivered twice: %+v", tt.listen, more)
		}
		st.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.Shutdown(ctx)
	}
}
