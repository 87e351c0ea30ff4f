package plugins

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// jetStreamKV is the KVBackend cmd/tinybroker gives the host on the JetStream engine
// (cmd/tinybroker/pluginkv.go): the engine's PluginStore, whose bucket outlives the plugin.
type jetStreamKV struct{ e *jetstream.Engine }

func (k jetStreamKV) Open(name string, maxBytes int64) (KVStore, func(), error) {
	s, err := k.e.PluginStore(name, maxBytes)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

// startJetStream starts a single-node JetStream engine of its own, embedded in the process.
func startJetStream(tb testing.TB) *jetstream.Engine {
	tb.Helper()
	e, err := jetstream.New(jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: tb.TempDir()}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

// The store in a NATS KV bucket keeps the ABI's semantics, keys of any bytes included, and
// its bound: a write past the bucket's max_bytes is refused with ERR_LIMIT.
func TestJetStreamStore(t *testing.T) {
	e := startJetStream(t)
	st, err := e.PluginStore("semantics", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	storeSemantics(t, st)

	// Two stores of one bucket, as two nodes have: each compares with the key's value now,
	// not with what it last read itself, and by value, as the memory store does.
	ctx := context.Background()
	other, err := e.PluginStore("semantics", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	k := []byte("shared")
	step := func(what string, st *jetstream.PluginStore, old, val string, want int32) {
		t.Helper()
		if rc, err := st.CompareAndSet(ctx, k, []byte(old), []byte(val), 0); err != nil || rc != want {
			t.Fatalf("%s: cas %q -> %q: status %d, %v; want %d", what, old, val, rc, err, want)
		}
	}
	step("a creates", st, "", "1", abi.StatusOK)
	if v, ok, err := other.Get(ctx, k); err != nil || !ok || string(v) != "1" {
		t.Fatalf("b reads %q %v %v, want 1", v, ok, err)
	}
	step("a", st, "1", "2", abi.StatusOK)
	step("b, from what it read", other, "1", "3", abi.StatusConflict)
	step("b, from the value now", other, "2", "3", abi.StatusOK)
	step("b", other, "3", "2", abi.StatusOK) // back to the value a wrote last
	step("a, from the same value at another revision", st, "2", "4", abi.StatusOK)
	if v, ok, err := other.Get(ctx, k); err != nil || !ok || string(v) != "4" {
		t.Fatalf("b reads %q %v %v, want 4", v, ok, err)
	}

	small, err := e.PluginStore("small", 4096)
	if err != nil {
		t.Fatal(err)
	}
	var rc int32
	for i := 0; rc == abi.StatusOK; i++ {
		if i == 10 {
			t.Fatalf("ten values of 1,000 bytes stored in a bucket of max_bytes 4,096")
		}
		if rc, err = small.Set(ctx, []byte{byte(i)}, make([]byte, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if rc != abi.StatusLimit {
		t.Fatalf("a write past the bound: status %d, want ERR_LIMIT", rc)
	}
	if rc, err := small.Set(ctx, []byte{0}, make([]byte, 10), 0); err != nil || rc != abi.StatusOK {
		t.Errorf("overwriting an entry with a smaller value in the full bucket: status %d, %v; want OK", rc, err)
	}
	// A reload raising kv_max_bytes raises the bucket's.
	if err := small.SetMaxBytes(1 << 20); err != nil {
		t.Fatal(err)
	}
	if rc, err := small.Set(ctx, []byte("more"), make([]byte, 1000), 0); err != nil || rc != abi.StatusOK {
		t.Errorf("a write after raising the bound: status %d, %v; want OK", rc, err)
	}
}

// The ack-counting hook counts exactly across the nodes of a cluster (issue 30): three nodes,
// replicas 3, the plugin loaded on each with pool_size 8, the members of one group on two of
// them acking what they are given, and every increment a compare-and-set on the one bucket.
func TestKVCountsAcrossClusterNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("a JetStream cluster takes seconds to form")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8)) // as in TestKVCountsWithPool8
	nodes, logger := startJetStreamCluster(t, 3, 3)
	hosts := make([]*Host, len(nodes))
	chains := make([]*Chain, len(nodes))
	for i, e := range nodes {
		h, err := NewHost(HostOptions{KV: jetStreamKV{e}, Logger: logger.Named("node" + strconv.Itoa(i+1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		hosts[i] = h
		// Sixteen instances of two nodes increment one key, each increment a compare-and-set
		// that a round trip to the bucket's leader decides: an instance may wait its turn
		// longer than the default call_timeout of a second, here under -race on two cores
		// (a call stopped by it would leave its ack uncounted).
		chains[i] = load(t, h, Spec{Name: "counter", Wasm: fixture(t, "kvcount"), PoolSize: 8, Groups: []string{"workers"}, CallTimeout: 30 * time.Second})
		e.SetHooks(chains[i])
	}
	const perNode, n = 4, 400
	var subs []*brokertest.Sub
	for _, e := range nodes[:2] {
		for range perNode {
			subs = append(subs, brokertest.Subscribe(t, e, broker.SubscribeOptions{ID: "jobs", Group: "workers", Patterns: []string{"jobs.*"}, Mode: broker.Balanced, MaxInFlight: 16}))
		}
	}
	for i := range n {
		if _, err := nodes[2].Publish("jobs."+strconv.Itoa(i%10), []byte("job"), nil); err != nil {
			t.Fatal(err)
		}
	}
	perSub := ackAll(t, subs, n, 2*brokertest.Patience)
	ackedOn := make([]int64, 2)
	for i, c := range perSub {
		ackedOn[i/perNode] += c
	}
	if ackedOn[0] == 0 || ackedOn[1] == 0 {
		t.Fatalf("acks by node: %d and %d; the test wants both nodes' hooks counting", ackedOn[0], ackedOn[1])
	}
	for i, c := range chains {
		if st := c.Stats()[0]; st.Failures != 0 {
			t.Errorf("node %d: %d calls failed", i+1, st.Failures)
		}
	}
	// Every node reads the one count (a replica may answer a read a moment behind the leader).
	for i, h := range hosts {
		got := kvNumber(t, h, "counter", "count")
		for deadline := time.Now().Add(brokertest.Patience); got != n && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond) // polling
			got = kvNumber(t, h, "counter", "count")
		}
		if got != n {
			t.Errorf("node %d reads count %d after %d acks on two nodes, want exactly %d", i+1, got, n, n)
		}
	}
	// Each node's instances counted themselves into the one store.
	if inst := kvNumber(t, hosts[0], "counter", "instances"); inst < 3 {
		t.Errorf("%d instances counted themselves; want at least one per node (3)", inst)
	}
}

// startJetStreamCluster starts n nodes in this process that form one JetStream cluster of the
// given replicas (as broker/jetstream's startCluster does); they stop when the test ends. The
// logger's lines are shown if the test fails.
func startJetStreamCluster(t *testing.T, n, replicas int) ([]*jetstream.Engine, hclog.Logger) {
	t.Helper()
	routes := brokertest.FreeAddrs(t, n)
	logs := new(brokertest.Log)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	nodes := make([]*jetstream.Engine, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n { // together: JetStream answers once a quorum is up
		wg.Go(func() {
			nodes[i], errs[i] = jetstream.New(jetstream.Options{Replicas: replicas, RequestTimeout: 10 * time.Second, Logger: logger,
				Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir(), Name: "n" + strconv.Itoa(i+1), ClusterName: "tb",
					ClusterListen: routes[i], Routes: routes}})
		})
	}
	wg.Wait()
	for _, e := range nodes {
		if e != nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = e.Shutdown(ctx)
			})
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	return nodes, logger
}

// A read and a compare-and-set of the store in a NATS KV bucket, on a single embedded node:
// each is a round trip from inside the plugin's call (the memory store's are
// BenchmarkMemoryStore).
func BenchmarkJetStreamStore(b *testing.B) {
	st, err := startJetStream(b).PluginStore("bench", DefaultKVMaxBytes)
	if err != nil {
		b.Fatal(err)
	}
	ctx, key, val := context.Background(), []byte("count"), []byte("12345678")
	if _, err := st.Set(ctx, key, val, 0); err != nil {
		b.Fatal(err)
	}
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := st.Get(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An increment as the ack-counting hook makes it, with no other writer: a read, then a
	// compare-and-set from what was read (one round trip each).
	b.Run("get+cas", func(b *testing.B) {
		for b.Loop() {
			v, _, err := st.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if rc, err := st.CompareAndSet(ctx, key, v, val, 0); err != nil || rc != abi.StatusOK {
				b.Fatal(rc, err)
			}
		}
	})
	b.Run("set", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.Set(ctx, key, val, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
