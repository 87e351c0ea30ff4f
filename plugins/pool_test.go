package plugins

import (
	"context"
	"sync"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// Many goroutines calling a plugin whose pool is smaller than their number: every call is
// served, never two at once on one instance (testdata/exclusive.wat traps if so), no more
// instances than the pool's size are made, and closing the chain discards them all, the one
// waiting in the pool's hot slot included.
func TestPoolHammer(t *testing.T) {
	for _, size := range []int{1, 2, 3} {
		h := newHost(t)
		c, err := h.Load(context.Background(), []Spec{{Name: "x", Wasm: fixture(t, "exclusive"), PoolSize: size, FailurePolicy: FailClosed}})
		if err != nil {
			t.Fatal(err)
		}
		const goroutines, calls = 8, 500
		var wg sync.WaitGroup
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					if _, err := c.OnPublish(&broker.Draft{Topic: "a"}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		p := c.all[0]
		p.pool.mu.Lock()
		alive := p.pool.alive
		p.pool.mu.Unlock()
		if st := c.Stats()[0]; st.Calls != goroutines*calls || st.Failures != 0 || alive > size {
			t.Fatalf("pool size %d: stats %+v, %d instances alive", size, st, alive)
		}
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		p.pool.mu.Lock()
		alive = p.pool.alive
		p.pool.mu.Unlock()
		if alive != 0 || p.pool.hot.Load() != nil {
			t.Fatalf("pool size %d: %d instances alive after Close", size, alive)
		}
	}
}
