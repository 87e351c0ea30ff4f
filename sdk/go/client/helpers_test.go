package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/sdk/go/client"
	"github.com/tinybroker/tinybroker/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor is how long a test waits for something that should happen in milliseconds.
const waitFor = 20 * time.Second

// eventually fails the test unless cond becomes true before the deadline.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testServer is a broker served in-process.
type testServer struct {
	addr string
	b    *memory.Engine
	srv  *server.Server
	done chan error
	once sync.Once
}

// startServer serves a new broker on addr ("127.0.0.1:0" for any free port) until stop or
// the end of the test.
func startServer(t testing.TB, addr string) *testServer {
	t.Helper()
	return startServerWith(t, addr, memory.Options{})
}

// startServerWith is startServer with broker options.
func startServerWith(t testing.TB, addr string, opts memory.Options) *testServer {
	t.Helper()
	var lis net.Listener
	eventually(t, "listening on "+addr, func() bool { // the port of a server just stopped may linger
		var err error
		lis, err = net.Listen("tcp", addr)
		return err == nil
	})
	b := memory.New(opts)
	ts := &testServer{addr: lis.Addr().String(), b: b, srv: server.New(b, 1<<20, server.Options{}), done: make(chan error, 1)}
	go func() { ts.done <- ts.srv.Serve(lis) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testServer) stop(t testing.TB) {
	ts.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ts.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-ts.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// group returns the stats of consumer group id.
func (ts *testServer) group(id string) broker.GroupStats {
	for _, g := range ts.b.Stats().Groups {
		if g.ID == id {
			return g
		}
	}
	return broker.GroupStats{}
}

func dial(t testing.TB, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(addr, client.WithReconnectBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Client.Close: %v", err)
		}
	})
	return c
}

func subscribe(t testing.TB, c *client.Client, o client.SubscribeOptions, h client.Handler) *client.Subscription {
	t.Helper()
	s, err := c.Subscribe(context.Background(), o, h)
	if err != nil {
		t.Fatalf("Subscribe(%+v): %v", o, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Subscription.Close: %v", err)
		}
	})
	return s
}

// recorder collects what handlers saw.
type recorder[T any] struct {
	mu   sync.Mutex
	list []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	r.list = append(r.list, v)
	r.mu.Unlock()
}

func (r *recorder[T]) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.list)
}

func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.list...)
}
