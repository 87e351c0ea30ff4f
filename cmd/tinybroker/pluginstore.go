package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	tbjs "github.com/tinybroker/tinybroker/broker/jetstream"
)

// The deployed plugins' store: their modules, by content hash, and the set (which plugin
// runs which version, how). Two implementations: localStore (the memory engine: in memory,
// or in state_dir) and natsStore (the JetStream engine: NATS, the same on every node).

// pluginStore keeps the deployed plugins. It is an interface because where they are kept
// depends on the engine; the lifecycle (pluginManager) is the same over both.
type pluginStore interface {
	// putModule keeps a module under its hash (doing nothing if it is there).
	putModule(ctx context.Context, hash string, wasm []byte) error
	module(ctx context.Context, hash string) ([]byte, error)
	// load returns the set and its revision (0: none stored yet).
	load(ctx context.Context) (pluginSet, uint64, error)
	// save stores the set if the stored one is still at revision rev (errSetChanged if
	// not: another node changed it), and returns the new revision.
	save(ctx context.Context, set pluginSet, rev uint64) (uint64, error)
	// watch calls changed with the set and its revision whenever it is stored (by another
	// node too), until ctx is done; it returns at once where nobody else can change it.
	watch(ctx context.Context, changed func(set pluginSet, rev uint64))
	// where names the store for the log ("" : memory only, forgotten at restart).
	where() string
}

// errSetChanged: the set was changed by someone else since it was read.
var errSetChanged = errors.New("the deployed plugins were changed by another call or node meanwhile; try again")

// pluginSet is the stored state of the deployed plugins, in the order they were first
// deployed.
type pluginSet struct {
	Plugins []storedPlugin `json:"plugins"`
}

// storedPlugin is one plugin's deployed state. A plugin the config file declares has one
// too once it is paused or given a deployed module.
type storedPlugin struct {
	Name     string          `json:"name"`
	Settings *deploySettings `json:"settings,omitempty"` // the latest deploy's
	Versions []storedVersion `json:"versions,omitempty"`
	// Current is the version running (0: the config file's module).
	Current   int              `json:"current"`
	Paused    bool             `json:"paused,omitempty"`
	Candidate *storedCandidate `json:"candidate,omitempty"`
	// LastRollback says why the last candidate was rolled back by itself.
	LastRollback string `json:"last_rollback,omitempty"`
}

type storedVersion struct {
	Version  int    `json:"version"`
	Hash     string `json:"hash"`
	Deployed int64  `json:"deployed_unix_nano"`
}

type storedCandidate struct {
	Version      int      `json:"version"`
	Mode         string   `json:"mode"` // "shadow" or "canary"
	Percent      float64  `json:"percent,omitempty"`
	Keys         []string `json:"keys,omitempty"`
	MaxErrorRate float64  `json:"max_error_rate,omitempty"`
}

// deploySettings are a deployed plugin's settings (a config plugin block's).
type deploySettings struct {
	Hooks         []string          `json:"hooks,omitempty"`
	Topics        []string          `json:"topics,omitempty"`
	Groups        []string          `json:"groups,omitempty"`
	Config        map[string]string `json:"config,omitempty"`
	EmitTopics    []string          `json:"emit_topics,omitempty"`
	PoolSize      int               `json:"pool_size,omitempty"`
	MemoryLimitMB int               `json:"memory_limit_mb,omitempty"`
	CallTimeout   time.Duration     `json:"call_timeout,omitempty"`
	FailurePolicy string            `json:"failure_policy,omitempty"`
	MaxEmits      int               `json:"max_emits,omitempty"`
}

// find returns the plugin of that name, or nil.
func (s *pluginSet) find(name string) *storedPlugin {
	for i := range s.Plugins {
		if s.Plugins[i].Name == name {
			return &s.Plugins[i]
		}
	}
	return nil
}

// version returns the hash of version n, or "".
func (p *storedPlugin) version(n int) string {
	for _, v := range p.Versions {
		if v.Version == n {
			return v.Hash
		}
	}
	return ""
}

// clone returns a deep copy, to change without touching the set in force.
func (s pluginSet) clone() pluginSet {
	b, _ := json.Marshal(s) // a pluginSet always marshals
	var c pluginSet
	_ = json.Unmarshal(b, &c)
	return c
}

func moduleHash(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// localStore keeps the deployed plugins in this process, and in dir if set: the modules as
// dir/plugins/<hex>.wasm, the set as dir/plugins/set.json (written to a temporary file then
// renamed, so a crash leaves the old set or the new, never half of one).
type localStore struct {
	dir string // "": memory only

	mu      sync.Mutex
	modules map[string][]byte
	set     pluginSet
	rev     uint64
}

func newLocalStore(stateDir string) (*localStore, error) {
	s := &localStore{modules: map[string][]byte{}}
	if stateDir == "" {
		return s, nil
	}
	s.dir = filepath.Join(stateDir, "plugins")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "set.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	if err := json.Unmarshal(b, &s.set); err != nil {
		return nil, fmt.Errorf("state_dir: %s: %w (move it away to start without the deployed plugins)", filepath.Join(s.dir, "set.json"), err)
	}
	s.rev = 1
	return s, nil
}

func (s *localStore) where() string { return s.dir }

func (s *localStore) modulePath(hash string) string {
	return filepath.Join(s.dir, hash[len("sha256:"):]+".wasm")
}

func (s *localStore) putModule(_ context.Context, hash string, wasm []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.modules[hash]; ok {
		return nil
	}
	if s.dir != "" {
		if err := writeAtomic(s.modulePath(hash), wasm); err != nil {
			return err
		}
	}
	s.modules[hash] = wasm
	return nil
}

func (s *localStore) module(_ context.Context, hash string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.modules[hash]; ok {
		return b, nil
	}
	if s.dir == "" {
		return nil, fmt.Errorf("module %s is not stored", hash)
	}
	b, err := os.ReadFile(s.modulePath(hash))
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", hash, err)
	}
	if moduleHash(b) != hash {
		return nil, fmt.Errorf("module %s: the file %s does not have that hash: it was changed outside the broker", hash, s.modulePath(hash))
	}
	s.modules[hash] = b
	return b, nil
}

func (s *localStore) load(context.Context) (pluginSet, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set.clone(), s.rev, nil
}

func (s *localStore) save(_ context.Context, set pluginSet, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev != s.rev {
		return 0, errSetChanged
	}
	if s.dir != "" {
		b, err := json.MarshalIndent(set, "", "  ")
		if err != nil {
			return 0, err
		}
		if err := writeAtomic(filepath.Join(s.dir, "set.json"), b); err != nil {
			return 0, err
		}
	}
	s.set, s.rev = set.clone(), s.rev+1
	return s.rev, nil
}

func (s *localStore) watch(context.Context, func(pluginSet, uint64)) {}

// writeAtomic writes b to path through a temporary file in the same folder, synced and
// renamed over it.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// natsStore keeps the deployed plugins in NATS: the modules in the object store bucket
// <prefix>_plugins (named by hash), the set under the key "set" of the KV bucket
// <prefix>_plugin_set. Every node reads the same, and watches the key.
type natsStore struct {
	engine   func() *tbjs.Engine // nil until the engine has started (a cluster still forming)
	prefix   string
	replicas int

	mu  sync.Mutex
	obj jetstream.ObjectStore
	kv  jetstream.KeyValue
}

const pluginSetKey = "set"

// buckets opens (creating them the first time) the two buckets.
func (s *natsStore) buckets(ctx context.Context) (jetstream.ObjectStore, jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.obj, s.kv, nil
	}
	e := s.engine()
	if e == nil {
		return nil, nil, fmt.Errorf("the plugin store: %w: the JetStream engine has not started yet", broker.ErrUnavailable)
	}
	js := e.JetStream()
	obj, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: s.prefix + "_plugins",
		Description: "tinybroker's deployed plugin modules, by content hash", Replicas: s.replicas})
	if err != nil {
		return nil, nil, fmt.Errorf("the plugin store: object store %s_plugins: %w", s.prefix, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.prefix + "_plugin_set",
		Description: "tinybroker's deployed plugin set", Replicas: s.replicas, History: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("the plugin store: key-value bucket %s_plugin_set: %w", s.prefix, err)
	}
	s.obj, s.kv = obj, kv
	return obj, kv, nil
}

func (s *natsStore) where() string { return "NATS" }

func (s *natsStore) putModule(ctx context.Context, hash string, wasm []byte) error {
	obj, _, err := s.buckets(ctx)
	if err != nil {
		return err
	}
	name := hash[len("sha256:"):]
	if _, err := obj.GetInfo(ctx, name); err == nil {
		return nil
	}
	if _, err := obj.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(wasm)); err != nil {
		return fmt.Errorf("store module %s: %w", hash, err)
	}
	return nil
}

func (s *natsStore) module(ctx context.Context, hash string) ([]byte, error) {
	obj, _, err := s.buckets(ctx)
	if err != nil {
		return nil, err
	}
	b, err := obj.GetBytes(ctx, hash[len("sha256:"):])
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", hash, err)
	}
	if moduleHash(b) != hash {
		return nil, fmt.Errorf("module %s: the stored object does not have that hash", hash)
	}
	return b, nil
}

func (s *natsStore) load(ctx context.Context) (pluginSet, uint64, error) {
	_, kv, err := s.buckets(ctx)
	if err != nil {
		return pluginSet{}, 0, err
	}
	e, err := kv.Get(ctx, pluginSetKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return pluginSet{}, 0, nil
	}
	if err != nil {
		return pluginSet{}, 0, fmt.Errorf("the plugin set: %w", err)
	}
	var set pluginSet
	if err := json.Unmarshal(e.Value(), &set); err != nil {
		return pluginSet{}, 0, fmt.Errorf("the plugin set in %s_plugin_set: %w", s.prefix, err)
	}
	return set, e.Revision(), nil
}

func (s *natsStore) save(ctx context.Context, set pluginSet, rev uint64) (uint64, error) {
	_, kv, err := s.buckets(ctx)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(set)
	if err != nil {
		return 0, err
	}
	var n uint64
	if rev == 0 {
		n, err = kv.Create(ctx, pluginSetKey, b)
	} else {
		n, err = kv.Update(ctx, pluginSetKey, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
		return 0, errSetChanged
	}
	if err != nil {
		return 0, fmt.Errorf("store the plugin set: %w", err)
	}
	return n, nil
}

// isWrongSequence: a KV Update refused because the key is past the revision given.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// watch waits for the buckets (the engine may still be starting), then calls changed on
// every update of the set until ctx is done. It passes the update's own value: reading the
// key again could be answered by a replica that does not have the update yet.
func (s *natsStore) watch(ctx context.Context, changed func(pluginSet, uint64)) {
	var kv jetstream.KeyValue
	for kv == nil {
		if _, k, err := s.buckets(ctx); err == nil {
			kv = k
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	for ctx.Err() == nil {
		// Not UpdatesOnly: the set stored before the watch began (between the first load
		// and now) comes first.
		w, err := kv.Watch(ctx, pluginSetKey)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var set pluginSet
			if err := json.Unmarshal(e.Value(), &set); err != nil {
				continue // load reports it, where it can be acted on
			}
			changed(set, e.Revision())
		}
		_ = w.Stop()
	}
}
