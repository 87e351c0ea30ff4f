//go:build unix

package main

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// watchKeys calls quit when q (or Ctrl-C, Ctrl-D) is typed on the terminal fd, until stop is
// called, which waits for the goroutine reading it. The terminal is read through a
// non-blocking duplicate of fd, which Go's poller can wake with a deadline: a blocking read of
// a terminal cannot be interrupted.
func watchKeys(fd int, quit func()) (stop func()) {
	dup, err := syscall.Dup(fd)
	if err != nil {
		return func() {}
	}
	if err := syscall.SetNonblock(dup, true); err != nil { // shared with fd: restored by stop
		_ = syscall.Close(dup)
		return func() {}
	}
	f := os.NewFile(uintptr(dup), "terminal")
	var wg sync.WaitGroup
	wg.Go(func() { quitOnKey(f, quit) })
	return func() {
		_ = f.SetReadDeadline(time.Now())
		wg.Wait()
		_ = syscall.SetNonblock(fd, false)
		_ = f.Close()
	}
}
