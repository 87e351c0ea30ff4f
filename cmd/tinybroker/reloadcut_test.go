package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// A SIGHUP's reload cut short by shutdown (serve's context cancelled by SIGTERM while a
// plugin file is read) is logged as cut short by the shutdown, with the signal, not as a
// refused reload of a file that "took longer than 10s". Issue 23, finding 8.
func TestReloadCutShortByShutdown(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.wasm")
	b := make([]byte, 3<<20) // read in several reads: the context is checked between them
	copy(b, "\x00asm\x01\x00\x00\x00")
	if err := os.WriteFile(big, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("plugin_cache_dir = \"none\"\nplugin \"p\" {\n  path = \""+big+"\"\n}\n"), filepath.Join(dir, "tb.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	var logs brokertest.Log
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	b2 := memory.New(memory.Options{MaxMemoryBytes: 64 << 20})
	defer func() { _ = b2.Shutdown(context.Background()) }()
	pm, err := newPluginManager(config.Default(), b2, log)
	if err != nil {
		t.Fatal(err)
	}
	defer pm.close(context.Background())

	// serve's context, as signal.NotifyContext cancels it on SIGTERM.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("terminated signal received"))
	_, err = pm.reload(ctx, cfg.Plugins)
	if err == nil {
		t.Fatal("reload with serve's context cancelled succeeded")
	}
	logReloadFailure(ctx, log, err)
	line := logs.String()
	if !strings.Contains(line, "reload cut short: the broker is shutting down") || !strings.Contains(line, "terminated signal received") ||
		strings.Contains(line, "took longer") || strings.Contains(line, "reload refused") {
		t.Fatalf("log: %s\nwant the reload cut short by the shutdown, naming the signal", line)
	}

	// A reload refused while the broker runs is still "reload refused".
	logs = brokertest.Log{}
	logReloadFailure(context.Background(), log, errors.New("nothing changed: bad file"))
	if !strings.Contains(logs.String(), "reload refused") {
		t.Fatalf("log: %s", logs.String())
	}
}
