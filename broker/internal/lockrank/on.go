//go:build lockrank

package lockrank

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// Enabled says whether locks are checked (the lockrank build tag).
const Enabled = true

// Mutex is a sync.Mutex of rank R, checked.
type Mutex[R Rank] struct{ mu sync.Mutex }

func (m *Mutex[R]) Lock() {
	var r R
	acquire(r)
	m.mu.Lock()
}

func (m *Mutex[R]) Unlock() {
	m.mu.Unlock()
	var r R
	release(r)
}

// RWMutex is a sync.RWMutex of rank R, checked; a read lock counts as the lock.
type RWMutex[R Rank] struct{ mu sync.RWMutex }

func (m *RWMutex[R]) Lock() {
	var r R
	acquire(r)
	m.mu.Lock()
}

func (m *RWMutex[R]) Unlock() {
	m.mu.Unlock()
	var r R
	release(r)
}

func (m *RWMutex[R]) RLock() {
	var r R
	acquire(r)
	m.mu.RLock()
}

func (m *RWMutex[R]) RUnlock() {
	m.mu.RUnlock()
	var r R
	release(r)
}

var (
	heldMu sync.Mutex
	held   = map[uint64][]Rank{} // by goroutine: the locks it holds, in the order taken
)

// acquire checks that the calling goroutine holds no lock of r's rank or above, and records
// that it takes r.
func acquire(r Rank) {
	g := goid()
	n, name := r.rank()
	heldMu.Lock()
	defer heldMu.Unlock()
	for _, h := range held[g] {
		if hn, hname := h.rank(); hn >= n {
			panic(fmt.Sprintf("lockrank: taking %s (rank %d) while holding %s (rank %d): out of order (broker/internal/lockrank, RATIONALE.md \"Lock order\")", name, n, hname, hn))
		}
	}
	held[g] = append(held[g], r)
}

// release forgets the calling goroutine's last lock of r's class (or, if another goroutine
// took it, as sync's locks allow, that goroutine's).
func release(r Rank) {
	g := goid()
	heldMu.Lock()
	defer heldMu.Unlock()
	if drop(g, r) {
		return
	}
	for other := range held {
		if drop(other, r) {
			return
		}
	}
}

func drop(g uint64, r Rank) bool {
	hs := held[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i] == r {
			hs = append(hs[:i], hs[i+1:]...)
			if len(hs) == 0 {
				delete(held, g)
			} else {
				held[g] = hs
			}
			return true
		}
	}
	return false
}

// goid returns the calling goroutine's id, read from the header of its stack trace.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("lockrank: cannot read the goroutine id: " + err.Error())
	}
	return id
}
