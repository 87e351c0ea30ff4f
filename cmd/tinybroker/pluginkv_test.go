package main

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
)

// kvcount is the ack-counting plugin of plugins' tests: its tb_v1_init counts each instance
// under "instances" in its store.
func kvcount(t *testing.T) plugins.Spec {
	t.Helper()
	wasm, err := os.ReadFile("../../plugins/testdata/kvcount.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return plugins.Spec{Name: "counter", Wasm: wasm, PoolSize: 2}
}

// instances reads the count kvcount keeps under "instances" in the engine's bucket.
func instances(t *testing.T, st plugins.KVStore) uint64 {
	t.Helper()
	v, ok, err := st.Get(context.Background(), []byte("instances"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok || len(v) != 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(v)
}

// On the JetStream engine, the plugins' stores are the engine's NATS KV buckets, not the
// process's memory: what a plugin's instances write there, the engine's bucket holds.
func TestPluginStoresInJetStream(t *testing.T) {
	e, err := jetstream.New(jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Shutdown(context.Background()) }()
	cfg := config.Default()
	cfg.PluginCacheDir = "none"
	cfg.Plugins = []plugins.Spec{kvcount(t)}
	pm, err := newPluginManager(cfg, e, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer pm.close(context.Background())
	st, err := e.PluginStore("counter", plugins.DefaultKVMaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	if n := instances(t, st); n == 0 {
		t.Fatal("the plugin's instances counted themselves, and the bucket holds no count")
	}
}

// A node waiting for its cluster loads its plugins before its engine starts: their stores
// refuse every call until it has, then open the bucket.
func TestPluginStoreOfAStartingEngine(t *testing.T) {
	defer func(b time.Duration) { startingBackoff = b }(startingBackoff)
	startingBackoff = time.Millisecond
	dir := t.TempDir()
	release := make(chan struct{})
	start := func() (broker.Engine, error) {
		select {
		case <-release:
			return jetstream.New(jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}})
		default:
			return nil, broker.ErrUnavailable
		}
	}
	s := newStartingEngine(broker.ErrUnavailable, start, func(broker.Engine) error { return nil }, hclog.NewNullLogger())
	defer func() { _ = s.Shutdown(context.Background()) }()
	st, closeFn, err := pluginKV(s).Open("counter", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	ctx := context.Background()
	if _, _, err := st.Get(ctx, []byte("k")); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("a read before the engine started: %v, want unavailable", err)
	}
	close(release)
	brokertest.Eventually(t, "the engine to start", func() bool { return s.get() != nil })
	if rc, err := st.Set(ctx, []byte("k"), []byte("v"), 0); err != nil || rc != 0 {
		t.Fatalf("a write once it started: %d %v", rc, err)
	}
	direct, err := s.get().(*jetstream.Engine).PluginStore("counter", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := direct.Get(ctx, []byte("k")); err != nil || !ok || string(v) != "v" {
		t.Fatalf("the bucket holds %q %v %v, want v", v, ok, err)
	}
}
