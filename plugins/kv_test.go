package plugins

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// kvNumber reads the 8-byte count kvcount.wat keeps at key in the store of plugin name.
func kvNumber(t *testing.T, h *Host, name, key string) uint64 {
	t.Helper()
	h.kv.mu.Lock()
	r := h.kv.open[name]
	h.kv.mu.Unlock()
	if r == nil {
		t.Fatalf("plugin %q has no store open", name)
	}
	v, ok, err := r.store.Get(context.Background(), []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return 0
	}
	if len(v) != 8 {
		t.Fatalf("%s: %d bytes, want 8", key, len(v))
	}
	return binary.LittleEndian.Uint64(v)
}

// acks calls c's on_ack hooks n times, from members goroutines at once, as the acks of that
// many members of one group do (the engine calls the hooks outside its group's lock).
func acks(c *Chain, members, n int) {
	var wg sync.WaitGroup
	for m := range members {
		wg.Go(func() {
			msg := &broker.Message{Topic: "jobs.1", Payload: []byte("job")}
			for range n / members {
				c.OnAck(&broker.AckEvent{Msg: msg, SystemID: "id", SubscriptionID: "jobs", Group: "workers", Attempt: uint32(m + 1)})
			}
		})
	}
	wg.Wait()
}

// The ack-counting hook counts exactly with pool_size = 8 (issue 30): its instances share the
// plugin's store, and compare-and-set loses no increment however their calls interleave.
func TestKVCountsWithPool8(t *testing.T) {
	// Guest code runs on GOMAXPROCS-1 goroutines at once (bounds.go): one on a machine of two
	// cores, where the calls would never overlap. With 8, up to 7 calls run at once, and the
	// scheduler interleaves them even on two cores.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	h := newHost(t)
	c := load(t, h, Spec{Name: "counter", Wasm: fixture(t, "kvcount"), PoolSize: 8})
	const members, n = 8, 4000
	acks(c, members, n)
	if got := kvNumber(t, h, "counter", "count"); got != n {
		t.Errorf("count %d after %d acks, want exactly %d", got, n, n)
	}
	// Several instances counted into the one store (each counted itself in tb_v1_init).
	if inst := kvNumber(t, h, "counter", "instances"); inst < 2 || inst > 8 {
		t.Errorf("%d instances counted themselves; want 2 to 8 (pool_size 8, %d callers)", inst, members)
	}
	if st := c.Stats()[0]; st.Failures != 0 {
		t.Errorf("%d calls failed", st.Failures)
	}
}

// The same through a broker: eight members of one group each ack what they are given, from
// their own goroutines, and the engine runs the on_ack hook in each member's Ack.
func TestKVCountsAcksOfEightMembers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8)) // as in TestKVCountsWithPool8
	h := newHost(t)
	c := load(t, h, Spec{Name: "counter", Wasm: fixture(t, "kvcount"), PoolSize: 8, Groups: []string{"workers"}})
	b := brokertest.Start(t, brokertest.Options{Hooks: c})
	const members, n = 8, 800
	subs := make([]*brokertest.Sub, members)
	for i := range subs {
		subs[i] = brokertest.Subscribe(t, b, broker.SubscribeOptions{ID: "jobs", Group: "workers", Patterns: []string{"jobs.*"}, Mode: broker.Balanced})
	}
	for i := range n {
		if _, err := b.Publish("jobs."+strconv.Itoa(i%10), []byte("job"), nil); err != nil {
			t.Fatal(err)
		}
	}
	ackAll(t, subs, n, brokertest.Patience)
	if got := kvNumber(t, h, "counter", "count"); got != n {
		t.Errorf("count %d after %d acks from %d members, want exactly %d", got, n, members, n)
	}
}

// ackAll has the members subs poll and ack, each on a goroutine of its own, until n messages
// are acked or patience has passed (then it fails the test); it returns how many each member
// acked.
func ackAll(t *testing.T, subs []*brokertest.Sub, n int64, patience time.Duration) []int64 {
	t.Helper()
	var acked atomic.Int64
	per := make([]atomic.Int64, len(subs))
	deadline := time.Now().Add(patience)
	var wg sync.WaitGroup
	for i, m := range subs {
		wg.Go(func() {
			for acked.Load() < n && time.Now().Before(deadline) {
				d, ok := m.Poll()
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				if m.Ack([]string{d.Msg.SystemID}) == 0 {
					acked.Add(1)
					per[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := acked.Load(); got != n {
		t.Fatalf("%d of %d messages acked", got, n)
	}
	counts := make([]int64, len(subs))
	for i := range per {
		counts[i] = per[i].Load()
	}
	return counts
}

// A plugin's store belongs to its name: a reload that keeps the name keeps it, one that
// removes the plugin drops it when the old chain is closed.
func TestKVSurvivesReloadOfItsName(t *testing.T) {
	h := newHost(t)
	spec := Spec{Name: "counter", Wasm: fixture(t, "kvcount"), PoolSize: 2}
	first, err := h.Load(context.Background(), []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	acks(first, 1, 10)
	// As a SIGHUP does: the new chain is loaded, then the old one closed.
	second, err := h.Load(context.Background(), []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	acks(second, 1, 5)
	if got := kvNumber(t, h, "counter", "count"); got != 15 {
		t.Fatalf("count %d after 10 acks, a reload and 5 acks; want 15", got)
	}
	// A reload that fails keeps the store too: the running chain still has it.
	if _, err := h.Load(context.Background(), []Spec{spec, {Name: "bad", Wasm: fixture(t, "nomarker")}}); err == nil {
		t.Fatal("a chain with a bad plugin loaded")
	}
	if got := kvNumber(t, h, "counter", "count"); got != 15 {
		t.Fatalf("count %d after a failed reload, want 15", got)
	}

	// A reload without the plugin: its store is dropped with the last chain that has it.
	load(t, h, Spec{Name: "other", Wasm: fixture(t, "pass")})
	if err := second.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.kv.mu.Lock()
	_, open := h.kv.open["counter"]
	h.kv.mu.Unlock()
	if open {
		t.Fatal("the store of a plugin no chain has is still open")
	}
	again := load(t, h, spec)
	acks(again, 1, 3)
	if got := kvNumber(t, h, "counter", "count"); got != 3 {
		t.Fatalf("count %d after the plugin was removed and added again with 3 acks; want 3 (a new store)", got)
	}
}

// A plugin that writes past its store's bound gets ERR_LIMIT (a value over its
// kv_max_value_bytes ERR_TOO_LARGE); the broker delivers on, and another plugin's store is
// not touched.
func TestKVBounds(t *testing.T) {
	h := newHost(t)
	const maxBytes = 4096
	full := load(t, h, Spec{Name: "full", Wasm: fixture(t, "kvset"), KVMaxBytes: maxBytes, KVMaxValueBytes: 2048})
	other := load(t, h, Spec{Name: "other", Wasm: fixture(t, "kvset")})
	b := brokertest.Start(t, brokertest.Options{Hooks: full})
	s := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	status := func(topic string, size int) string {
		t.Helper()
		if _, err := b.Publish(topic, []byte(strings.Repeat("x", size)), nil); err != nil {
			t.Fatalf("publish %s: %v", topic, err)
		}
		d := s.Next(t)
		if d.Msg.Topic != topic {
			t.Fatalf("delivered %s, want %s", d.Msg.Topic, topic)
		}
		return d.Msg.Headers.Map()["kv-status"]
	}
	// Each entry of 1,000 bytes and a 3-byte key costs 1,067 bytes: three fit in 4,096.
	for i, want := range []string{"0", "0", "0", "4", "4"} {
		topic := "k." + string(rune('a'+i))
		if got := status(topic, 1000); got != want {
			t.Errorf("write %d (%s): status %q, want %q", i+1, topic, got, want)
		}
	}
	if got := status("k.a", 900); got != "0" {
		t.Errorf("overwriting an entry with a smaller value: status %q, want 0", got)
	}
	if got := status("k.z", 2049); got != "2" {
		t.Errorf("a value over kv_max_value_bytes: status %q, want 2 (ERR_TOO_LARGE)", got)
	}
	if n := full.all[0].kv.(*memStore).Bytes(); n > maxBytes {
		t.Errorf("the store holds %d bytes, over its bound of %d", n, maxBytes)
	}
	// The other plugin's store, with the default bound, still takes what the full one refused.
	d := broker.Draft{Topic: "k.d", Payload: make([]byte, 1000)}
	if _, err := other.OnPublish(&d); err != nil {
		t.Fatal(err)
	}
	if got := d.Headers.Map()["kv-status"]; got != "0" {
		t.Errorf("the other plugin's write: status %q, want 0", got)
	}
	if st := full.Stats()[0]; st.Failures != 0 {
		t.Errorf("the full plugin failed %d calls; a refused write is not a failure", st.Failures)
	}
}

// A value bound over the store's could never be stored: the load says so.
func TestKVBoundsChecked(t *testing.T) {
	_, err := newHost(t).Load(context.Background(), []Spec{{Name: "p", Wasm: fixture(t, "kvset"), KVMaxBytes: 1000, KVMaxValueBytes: 1001}})
	if err == nil || !strings.Contains(err.Error(), "kv_max_value_bytes 1001 is over kv_max_bytes 1000") {
		t.Fatalf("load: %v, want kv_max_value_bytes refused", err)
	}
}

// storeSemantics checks what every KVStore does, whatever keeps it (st is empty, bounded to
// at least 1,000 bytes): compare-and-set, get, delete, and an entry that reads as absent once
// its TTL has passed and may be created again.
func storeSemantics(t *testing.T, st KVStore) {
	t.Helper()
	ctx := context.Background()
	rc := func(rc int32, err error) int32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	get := func(k string) ([]byte, bool) {
		t.Helper()
		v, ok, err := st.Get(ctx, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
	k := []byte("k")
	if rc := rc(st.CompareAndSet(ctx, k, []byte("x"), []byte("1"), 0)); rc != abi.StatusConflict {
		t.Errorf("cas on an absent key with an old value: %d, want ERR_CONFLICT", rc)
	}
	if rc := rc(st.CompareAndSet(ctx, k, nil, []byte("1"), 0)); rc != abi.StatusOK {
		t.Errorf("cas creating the key: %d", rc)
	}
	if rc := rc(st.CompareAndSet(ctx, k, nil, []byte("2"), 0)); rc != abi.StatusConflict {
		t.Errorf("cas with empty old on a present key: %d, want ERR_CONFLICT", rc)
	}
	if rc := rc(st.CompareAndSet(ctx, k, []byte("1"), []byte("2"), 0)); rc != abi.StatusOK {
		t.Errorf("cas 1 -> 2: %d", rc)
	}
	if rc := rc(st.CompareAndSet(ctx, k, []byte("1"), []byte("3"), 0)); rc != abi.StatusConflict {
		t.Errorf("cas from a value no longer current: %d, want ERR_CONFLICT", rc)
	}
	if v, ok := get("k"); !ok || string(v) != "2" {
		t.Errorf("get %q %v, want 2", v, ok)
	}
	if err := st.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, ok := get("k"); ok {
		t.Error("present after delete")
	}
	if rc := rc(st.CompareAndSet(ctx, k, nil, []byte("4"), 0)); rc != abi.StatusOK {
		t.Errorf("cas creating a deleted key again: %d", rc)
	}
	// Any bytes make a key, and an empty value is a value.
	odd := []byte{0, '.', '*', '>', ' ', 0xff, '/'}
	if rc := rc(st.Set(ctx, odd, nil, 0)); rc != abi.StatusOK {
		t.Errorf("set of key %q: %d", odd, rc)
	}
	if v, ok := get(string(odd)); !ok || len(v) != 0 {
		t.Errorf("key %q: %q %v, want an empty value", odd, v, ok)
	}

	// An expired entry reads as absent at once, and may be created again. (The JetStream
	// store's NATS removes it only after a whole second.)
	if rc := rc(st.Set(ctx, []byte("ttl"), []byte("v"), 50*time.Millisecond)); rc != abi.StatusOK {
		t.Fatalf("set with ttl: %d", rc)
	}
	time.Sleep(100 * time.Millisecond) // the clock is what the test waits for
	if _, ok := get("ttl"); ok {
		t.Error("an entry read 100ms after it was written with a ttl of 50ms")
	}
	if rc := rc(st.CompareAndSet(ctx, []byte("ttl"), nil, []byte("again"), 0)); rc != abi.StatusOK {
		t.Errorf("cas creating an expired key again: %d", rc)
	}
}

// The memory store's semantics, below the ABI, and its bound: TTL frees bytes, writes past
// the bound are refused.
func TestMemoryStore(t *testing.T) {
	open := func() *memStore {
		st, closeFn, err := NewMemoryKV().Open("p", 1000)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeFn)
		return st.(*memStore)
	}
	storeSemantics(t, open())

	ctx := context.Background()
	st := open()
	set := func(k string, v []byte, ttl time.Duration) int32 {
		rc, _ := st.Set(ctx, []byte(k), v, ttl) // the memory store returns no error
		return rc
	}
	if rc := set("ttl", []byte("v"), time.Millisecond); rc != abi.StatusOK {
		t.Fatalf("set with ttl: %d", rc)
	}
	time.Sleep(5 * time.Millisecond)
	if _, ok, _ := st.Get(ctx, []byte("ttl")); ok {
		t.Error("an expired entry is returned")
	}
	if st.Bytes() != 0 {
		t.Errorf("%d bytes held after the only entry expired", st.Bytes())
	}
	if st.expiring != 0 {
		t.Errorf("%d entries counted as expiring in an empty store", st.expiring)
	}

	// The bound counts expired entries only until a write needs their room.
	big := make([]byte, 1000-kvEntryOverhead-2)
	if rc := set("b1", big, time.Millisecond); rc != abi.StatusOK {
		t.Fatalf("set filling the store: %d", rc)
	}
	if rc := set("b2", []byte("v"), 0); rc != abi.StatusLimit {
		t.Errorf("set past the bound: %d, want ERR_LIMIT", rc)
	}
	time.Sleep(5 * time.Millisecond)
	if rc := set("b2", []byte("v"), 0); rc != abi.StatusOK {
		t.Errorf("set once the entry filling the store expired: %d, want OK", rc)
	}
}

// The host functions' statuses for what the store never sees: keys, values and TTLs out of
// range, read through the edges a guest can give.
func TestKVStatuses(t *testing.T) {
	inst := &instance{p: &plugin{spec: Spec{KVMaxValueBytes: 10}}}
	cases := []struct {
		key, val uint32
		ttl      int64
		want     int32
	}{
		{1, 10, 0, abi.StatusOK},
		{abi.KVMaxKeyBytes, 0, 1, abi.StatusOK},
		{0, 1, 0, abi.StatusInvalid},
		{abi.KVMaxKeyBytes + 1, 1, 0, abi.StatusTooLarge},
		{1, 11, 0, abi.StatusTooLarge},
		{1, 1, -1, abi.StatusInvalid},
		{1, 1, 1 << 62, abi.StatusInvalid},
	}
	for _, c := range cases {
		if _, rc := inst.kvWriteStatus(c.key, c.val, c.ttl); rc != c.want {
			t.Errorf("key %d bytes, value %d, ttl %d ms: status %d, want %d", c.key, c.val, c.ttl, rc, c.want)
		}
	}
}

// The store's own cost, under the host call (about 36 ns, BENCHMARKS.md): a read, and a
// compare-and-set of one counter from every core at once, the ack-counting hook's worst case.
func BenchmarkMemoryStore(b *testing.B) {
	st, closeFn, _ := NewMemoryKV().Open("p", DefaultKVMaxBytes)
	defer closeFn()
	ctx, key, val := context.Background(), []byte("count"), []byte("12345678")
	st.Set(ctx, key, val, 0)
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			st.Get(ctx, key)
		}
	})
	b.Run("cas-contended", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				v, _, _ := st.Get(ctx, key)
				st.CompareAndSet(ctx, key, v, val, 0)
			}
		})
	})
}

// failingKV's stores fail every call once down is set, as a store in NATS does without a
// quorum.
type failingKV struct{ down *atomic.Bool }

func (f failingKV) Open(string, int64) (KVStore, func(), error) {
	return failingStore{memStore: &memStore{max: DefaultKVMaxBytes, m: map[string]*kvEntry{}}, down: f.down}, func() {}, nil
}

type failingStore struct {
	*memStore
	down *atomic.Bool
}

var errStoreDown = errors.New("no quorum")

func (f failingStore) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	if f.down.Load() {
		return nil, false, errStoreDown
	}
	return f.memStore.Get(ctx, key)
}

// A store that cannot be reached fails the plugin's call, naming why: a read does not pass
// it off as an absent key (the counter would start again from 1).
func TestKVStoreErrorFailsTheCall(t *testing.T) {
	var down atomic.Bool
	var logs brokertest.Log
	h, err := NewHost(HostOptions{KV: failingKV{&down}, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	c := load(t, h, Spec{Name: "counter", Wasm: fixture(t, "kvcount")})
	acks(c, 1, 1)
	down.Store(true)
	acks(c, 1, 1)
	if st := c.Stats()[0]; st.Calls != 2 || st.Failures != 1 {
		t.Errorf("%d calls, %d failed; want 2 and 1 (the call with the store down)", st.Calls, st.Failures)
	}
	if !strings.Contains(logs.String(), "v1_kv_get: the plugin's store: no quorum") {
		t.Errorf("log: %s\nwant the call's failure naming the store's error", logs.String())
	}
	down.Store(false)
	if got := kvNumber(t, h, "counter", "count"); got != 1 {
		t.Errorf("count %d, want 1: the failed call wrote nothing", got)
	}
}
