//go:build unix

package plugins

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A FIFO is refused at once: opening it does not wait for a writer.
func TestReadModuleFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := readModule(context.Background(), fifo, DefaultMaxPluginBytes); err == nil || !strings.Contains(err.Error(), "is a named pipe (FIFO), not a regular file") {
		t.Fatalf("readModule(FIFO) = %v", err)
	}
}
