package plugins

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The plugins' key-value stores (docs/ABI.md, "State"): one per plugin name, shared by every
// instance of its pool, kept across reloads of that name and dropped when no chain loaded
// has the name any more (RATIONALE.md, "Why does a plugin's store belong to its name?").

// Default bounds of a plugin's store (Spec.KVMaxBytes, Spec.KVMaxValueBytes).
const (
	DefaultKVMaxBytes      = 4 << 20
	DefaultKVMaxValueBytes = 64 << 10
)

// kvEntryOverhead is what each entry counts against its store's bound beyond its key and
// value: about what the map's slot, the entry and the value's slice header cost. Without it
// a plugin could hold millions of empty values within a few MiB of "bytes".
const kvEntryOverhead = 64

// KVStore is one plugin's key-value store, shared by its instances and safe for concurrent
// use. Keys are checked by the host (1 to abi.KVMaxKeyBytes bytes) and values against the
// plugin's kv_max_value_bytes before they reach it; the store checks its total bound. The
// int32 results are ABI statuses (abi.StatusOK, abi.StatusLimit, abi.StatusConflict), the
// plugin's answer; an error is a store that could not be reached (the JetStream engine's
// bucket: no quorum, a timeout), and fails the plugin's call. ctx is the call's: its time
// limit bounds a store elsewhere than in this process.
type KVStore interface {
	// Get returns the value of key, if present and not expired. The slice is the store's: the
	// caller copies it out and never changes it.
	Get(ctx context.Context, key []byte) ([]byte, bool, error)
	// Set sets key to a copy of value, expiring after ttl (0: never).
	Set(ctx context.Context, key, value []byte, ttl time.Duration) (int32, error)
	// CompareAndSet sets key as Set does only if its value is old now (an empty old: if it is
	// absent), else returns abi.StatusConflict.
	CompareAndSet(ctx context.Context, key, old, value []byte, ttl time.Duration) (int32, error)
	// Delete removes key, if present.
	Delete(ctx context.Context, key []byte) error
	// SetMaxBytes changes the bound, when a reload changes kv_max_bytes. Entries over a
	// lowered bound stay until deleted or expired; writes that grow the store are refused
	// until it is under it.
	SetMaxBytes(n int64) error
}

// KVBackend makes the plugins' stores: HostOptions.KV. An interface so that an engine can keep
// them elsewhere than in the broker's process: the JetStream engine keeps them in NATS KV
// buckets shared by every node (cmd/tinybroker passes its backend; RATIONALE.md, "Why is a
// plugin's store a NATS KV bucket on JetStream?").
type KVBackend interface {
	// Open returns the store of plugin name, bounded to maxBytes, made empty if it does not
	// exist. The plugin host opens a name once while a chain loaded by it has the name, and
	// calls the store's close function when the last such chain is closed; a store opened
	// again after that may be empty (in memory) or hold what it held (in NATS).
	Open(name string, maxBytes int64) (store KVStore, close func(), err error)
}

// NewMemoryKV returns a KVBackend that keeps the stores in process memory: the default.
func NewMemoryKV() KVBackend { return memoryKV{} }

type memoryKV struct{}

func (memoryKV) Open(_ string, maxBytes int64) (KVStore, func(), error) {
	return &memStore{max: maxBytes, m: map[string]*kvEntry{}}, func() {}, nil
}

// memStore is a KVStore in memory: a map under one mutex; it counts keys, values and 64 bytes
// per entry (kvEntryOverhead) against its bound, and never returns an error. Plugin calls are short and the host
// call costs far more than the lock; a store hot enough for the lock to matter is one key
// under compare-and-set, which no sharding would help.
type memStore struct {
	mu    sync.Mutex
	max   int64
	m     map[string]*kvEntry // by pointer: overwriting a key changes its entry, with no new key string
	bytes int64               // counted as kvCost
	// expiring counts the entries with a TTL: a store without any is never swept.
	expiring int
}

type kvEntry struct {
	value   []byte // its bytes never changed once stored: Get hands them out, and a write replaces the slice
	expires int64  // Unix ns; 0: never
}

func kvCost(key string, value []byte) int64 {
	return int64(len(key)+len(value)) + kvEntryOverhead
}

// kvSweepSample is how many entries a write looks at for expired ones: with Go's random map
// iteration, a store whose entries expire is swept a little on every write, and a full sweep
// is left for a write that would pass the bound. A store with no entry that expires is not
// swept at all (memStore.expiring).
const kvSweepSample = 4

func (s *memStore) Get(_ context.Context, key []byte) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[string(key)] // looked up without a copy
	if !ok {
		return nil, false, nil
	}
	if e.expires != 0 && e.expires <= nowNanos() {
		s.remove(string(key), e)
		return nil, false, nil
	}
	return e.value, true, nil
}

func (s *memStore) Set(_ context.Context, key, value []byte, ttl time.Duration) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setLocked(key, value, ttl, nowNanos()), nil
}

func (s *memStore) CompareAndSet(_ context.Context, key, old, value []byte, ttl time.Duration) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := nowNanos()
	e, ok := s.m[string(key)]
	if ok && e.expires != 0 && e.expires <= now {
		s.remove(string(key), e)
		ok = false
	}
	if len(old) == 0 && ok || len(old) > 0 && (!ok || string(e.value) != string(old)) {
		return abi.StatusConflict, nil
	}
	return s.setLocked(key, value, ttl, now), nil
}

func (s *memStore) Delete(_ context.Context, key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[string(key)]; ok {
		s.remove(string(key), e)
	}
	return nil
}

func (s *memStore) SetMaxBytes(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.max = n
	return nil
}

// Bytes is what the store holds, as counted against its bound.
func (s *memStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// setLocked stores a copy of value at key, if the bound allows. s.mu is held.
func (s *memStore) setLocked(key, value []byte, ttl time.Duration, now int64) int32 {
	s.sweep(now, kvSweepSample)
	var freed int64
	e := s.m[string(key)]
	if e != nil {
		freed = kvCost(string(key), e.value)
	}
	grow := kvCost(string(key), value) - freed
	if grow > 0 && s.bytes+grow > s.max {
		s.sweep(now, len(s.m)) // only when full: the writes before it swept as they went
		if s.bytes+grow > s.max {
			return abi.StatusLimit
		}
	}
	if e == nil {
		e = &kvEntry{}
		s.m[string(key)] = e
	}
	e.value = append([]byte(nil), value...)
	if e.expires != 0 {
		s.expiring--
	}
	e.expires = 0
	if ttl > 0 {
		e.expires = now + int64(ttl)
		s.expiring++
	}
	s.bytes += grow
	return abi.StatusOK
}

// sweep removes the expired entries among the first n of the map's (random) iteration order.
// s.mu is held.
func (s *memStore) sweep(now int64, n int) {
	if s.expiring == 0 {
		return
	}
	for k, e := range s.m {
		if n--; n < 0 {
			return
		}
		if e.expires != 0 && e.expires <= now {
			s.remove(k, e)
		}
	}
}

// remove deletes key, whose entry is e. s.mu is held.
func (s *memStore) remove(key string, e *kvEntry) {
	delete(s.m, key)
	s.bytes -= kvCost(key, e.value)
	if e.expires != 0 {
		s.expiring--
	}
}

// kvStores are a Host's open stores, by plugin name, with how many loaded plugins use each.
type kvStores struct {
	backend KVBackend
	mu      sync.Mutex
	open    map[string]*kvRef
}

type kvRef struct {
	store KVStore
	close func()
	refs  int
}

// acquire returns the store of plugin name, opening it for the first plugin of that name;
// release it when the plugin is closed.
func (ks *kvStores) acquire(name string, maxBytes int64) (KVStore, error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if r := ks.open[name]; r != nil {
		if err := r.store.SetMaxBytes(maxBytes); err != nil { // the newest load's
			return nil, fmt.Errorf("kv_max_bytes: %w", err)
		}
		r.refs++
		return r.store, nil
	}
	store, closeFn, err := ks.backend.Open(name, maxBytes)
	if err != nil {
		return nil, err
	}
	ks.open[name] = &kvRef{store: store, close: closeFn, refs: 1}
	return store, nil
}

// release forgets one plugin's use of its store, and drops the store after the last.
func (ks *kvStores) release(name string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	r := ks.open[name]
	if r == nil {
		return
	}
	if r.refs--; r.refs == 0 {
		delete(ks.open, name)
		r.close()
	}
}

// kvTTL converts a guest's ttl_ms, and reports whether it is valid.
func kvTTL(ms int64) (time.Duration, bool) {
	if ms < 0 || ms > int64(time.Duration(1<<63-1)/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// kvKeyStatus is the status of a key a plugin gives, of n bytes.
func kvKeyStatus(n uint32) int32 {
	switch {
	case n == 0:
		return abi.StatusInvalid
	case n > abi.KVMaxKeyBytes:
		return abi.StatusTooLarge
	}
	return abi.StatusOK
}

// kvWriteStatus is the status of a write of key n bytes, a value of v bytes and ttlMS, before
// the store's own bound.
func (inst *instance) kvWriteStatus(n, v uint32, ttlMS int64) (time.Duration, int32) {
	if rc := kvKeyStatus(n); rc != abi.StatusOK {
		return 0, rc
	}
	ttl, ok := kvTTL(ttlMS)
	switch {
	case !ok:
		return 0, abi.StatusInvalid
	case int(v) > inst.p.spec.KVMaxValueBytes:
		return 0, abi.StatusTooLarge
	}
	return ttl, abi.StatusOK
}

// kvError traps a call whose store could not be reached: the call fails, as its failure
// policy says, rather than read a value as absent or report a write as refused that may yet
// have been made.
type kvError struct {
	fn  string
	err error
}

func (e kvError) Error() string {
	return "tinybroker ABI: " + e.fn + ": the plugin's store: " + e.err.Error()
}

func (e kvError) Unwrap() error { return e.err }

// The host functions of the store. A write takes effect at once, whatever becomes of the
// call (docs/ABI.md, "State").
type (
	hostKVGet    struct{}
	hostKVSet    struct{}
	hostKVCas    struct{}
	hostKVDelete struct{}
)

func (*hostKVGet) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	n := u32(s[1])
	if kvKeyStatus(n) != abi.StatusOK { // no write could have made it
		putI32(s, -1)
		return
	}
	v, ok, err := inst.kv.Get(ctx, inst.read(u32(s[0]), n))
	if err != nil {
		panic(kvError{"v1_kv_get", err})
	}
	if !ok {
		putI32(s, -1)
		return
	}
	putI32(s, inst.give(v, u32(s[2]), u32(s[3])))
}

func (*hostKVSet) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	ttl, rc := inst.kvWriteStatus(u32(s[1]), u32(s[3]), int64(s[4])) // first: a length over the limit is refused, not trapped
	if rc == abi.StatusOK {
		var err error
		if rc, err = inst.kv.Set(ctx, inst.read(u32(s[0]), u32(s[1])), inst.read(u32(s[2]), u32(s[3])), ttl); err != nil {
			panic(kvError{"v1_kv_set", err})
		}
	}
	putI32(s, rc)
}

func (*hostKVCas) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	ttl, rc := inst.kvWriteStatus(u32(s[1]), u32(s[5]), int64(s[6]))
	if rc == abi.StatusOK {
		key := inst.read(u32(s[0]), u32(s[1]))
		old := inst.read(u32(s[2]), u32(s[3]))
		var err error
		if rc, err = inst.kv.CompareAndSet(ctx, key, old, inst.read(u32(s[4]), u32(s[5])), ttl); err != nil {
			panic(kvError{"v1_kv_cas", err})
		}
	}
	putI32(s, rc)
}

func (*hostKVDelete) Call(ctx context.Context, s []uint64) {
	inst := enter(ctx)
	n := u32(s[1])
	rc := kvKeyStatus(n)
	if rc == abi.StatusOK {
		if err := inst.kv.Delete(ctx, inst.read(u32(s[0]), n)); err != nil {
			panic(kvError{"v1_kv_delete", err})
		}
	}
	putI32(s, rc)
}
