package client_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// WithKey gives Publish's and a Publisher's messages their key, Message.Key reads it, and a
// group with OrderingKey runs 4 handlers at once yet never two of one key, each key's in
// publish order.
func TestOrderingKeys(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	var mu sync.Mutex
	busy := map[string]bool{}
	last := map[string]int{}
	var done recorder[string]
	sub := subscribe(t, c, client.SubscribeOptions{Patterns: []string{"ord.>"}, Mode: client.Balanced, Group: "ord",
		Ordering: client.OrderingKey, Concurrency: 4}, func(_ context.Context, m *client.Message) error {
		mu.Lock()
		if busy[m.Key] {
			mu.Unlock()
			t.Errorf("key %s: %s handled while another of its messages is", m.Key, m.Payload)
			return fmt.Errorf("key %s busy", m.Key)
		}
		busy[m.Key] = true
		n, _ := strconv.Atoi(string(m.Payload))
		if prev, ok := last[m.Key]; ok && n != prev+1 {
			t.Errorf("key %s: %d after %d", m.Key, n, prev)
		}
		last[m.Key] = n
		mu.Unlock()
		time.Sleep(time.Millisecond) // work: a second message of the key would overlap
		mu.Lock()
		busy[m.Key] = false
		mu.Unlock()
		done.add(m.Key)
		return nil
	})
	if s := sub.Settings(); s.Ordering != client.OrderingKey {
		t.Fatalf("settings %+v, want OrderingKey", s)
	}
	ctx := context.Background()
	if _, err := c.Publish(ctx, "ord.x", []byte("0"), nil, client.WithKey("k-unary")); err != nil {
		t.Fatal(err)
	}
	p, err := c.NewPublisher(ctx, client.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 50 {
		for k := range 4 {
			if err := p.Publish(ctx, "ord.x", []byte(strconv.Itoa(i)), nil, client.WithKey("k"+strconv.Itoa(k))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "201 messages handled", func() bool { return done.len() == 201 })
	mu.Lock()
	defer mu.Unlock()
	for k := range 4 {
		if last["k"+strconv.Itoa(k)] != 49 {
			t.Fatalf("key k%d: last handled %d, want 49", k, last["k"+strconv.Itoa(k)])
		}
	}
	if _, ok := last["k-unary"]; !ok {
		t.Fatal("the unary publish's key did not arrive")
	}
}
