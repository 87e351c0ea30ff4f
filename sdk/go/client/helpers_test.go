package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// payloadsTo is a handler that adds the payloads it gets to r.
func payloadsTo(r *recorder[string]) client.Handler {
	return func(_ context.Context, m *client.Message) error {
		r.add(string(m.Payload))
		return nil
	}
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
