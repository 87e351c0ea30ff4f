package memory

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// A fanout subscriber that is slow but reads paces its publisher instead of overflowing: with
// a 16-message buffer, 2,000 messages all arrive. Without the wait the same run disconnects it.
func TestBackpressurePacesPublisher(t *testing.T) {
	for _, wait := range []time.Duration{30 * time.Second, -1} { // a long wait: a loaded machine must not fail it
		b := newTestBroker(t, Options{FanoutBufferMessages: 16, PublisherWait: wait})
		s, err := b.Subscribe(broker.SubscribeOptions{Patterns: []string{"p"}, Mode: broker.Fanout})
		if err != nil {
			t.Fatal(err)
		}
		const n = 2000
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if _, err := b.Publish("p", []byte("x"), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		if wait < 0 {
			wg.Wait() // no backpressure: the publisher finishes long before the reader starts
		}
		got := 0
		var buf []broker.Delivery
	read:
		for got < n {
			buf = s.Next(buf[:0], 4, 1<<20)
			got += len(buf)
			if len(buf) == 0 {
				select {
				case <-s.Ready():
				case <-s.Done():
					break read
				case <-time.After(10 * time.Second):
					t.Fatalf("stuck after %d messages", got)
				}
			}
			time.Sleep(10 * time.Microsecond) // a slow reader
		}
		wg.Wait()
		if wait > 0 && (got != n || s.Err() != nil) {
			t.Fatalf("with publisher_wait: got %d of %d, err %v", got, n, s.Err())
		}
		if wait < 0 && !errors.Is(s.Err(), broker.ErrSlowConsumer) {
			t.Fatalf("without publisher_wait: got %d of %d, err %v; want a slow-consumer disconnect", got, n, s.Err())
		}
		s.Close()
	}
}
