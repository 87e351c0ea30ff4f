//go:build unix

package main

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// watchKeys quits on q, and its stop ends the goroutine reading the terminal, key or not.
func TestWatchKeys(t *testing.T) {
	for _, key := range []string{"q", ""} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var quit atomic.Bool
		stop := watchKeys(int(r.Fd()), func() { quit.Store(true) })
		if key != "" {
			if _, err := w.WriteString("x" + key); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); !quit.Load(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%q typed: no quit", key)
				}
			}
		}
		stop() // returns only once the reading goroutine has
		if quit.Load() != (key != "") {
			t.Fatalf("key %q: quit %v", key, quit.Load())
		}
		r.Close()
		w.Close()
	}
}
