//go:build lockrank

package lockrank

import (
	"strings"
	"testing"
)

// Locks taken in order pass; one taken under a lock of the same or a higher rank panics,
// naming both.
func TestOrder(t *testing.T) {
	var e RWMutex[MemoryEngine]
	var g Mutex[MemoryGroup]
	var o Mutex[Outbox]
	n := 0
	e.RLock()
	g.Lock()
	o.Lock()
	n++
	o.Unlock()
	g.Unlock()
	e.RUnlock()
	if n != 1 {
		t.Fatal(n)
	}

	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "taking memory group.mu (rank 30) while holding memory outbox.mu (rank 40)") {
			t.Fatalf("panic %q", msg)
		}
		o.Unlock()
		release(MemoryGroup{})
	}()
	o.Lock()
	g.Lock()
	t.Fatal("out of order, no panic")
}
