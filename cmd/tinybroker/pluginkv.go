package main

import (
	"context"
	"sync"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/plugins"
)

// pluginKV is where the plugins' key-value stores are kept on engine b: on the JetStream
// engine, in NATS KV buckets that every node shares (jetstream.PluginStore); on the memory
// engine, nil: the host's default, in this process.
func pluginKV(b broker.Engine) plugins.KVBackend {
	switch e := b.(type) {
	case *jetstream.Engine:
		return jetStreamKV{e}
	case *startingEngine:
		return startingKV{e}
	}
	return nil
}

// jetStreamKV opens the engine's stores. Closing one closes nothing: the bucket is the other
// nodes' too, and is kept across restarts.
type jetStreamKV struct{ e *jetstream.Engine }

func (k jetStreamKV) Open(name string, maxBytes int64) (plugins.KVStore, func(), error) {
	s, err := k.e.PluginStore(name, maxBytes)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

// startingKV is the backend of a node waiting for its cluster (startingEngine): a store opens
// its bucket when first used after the engine started, and until then every call using it
// fails (a plugin whose tb_v1_init uses its store cannot be loaded before).
type startingKV struct{ s *startingEngine }

func (k startingKV) Open(name string, maxBytes int64) (plugins.KVStore, func(), error) {
	if e, ok := k.s.get().(*jetstream.Engine); ok {
		return jetStreamKV{e}.Open(name, maxBytes)
	}
	return &laterStore{s: k.s, name: name, max: maxBytes}, func() {}, nil
}

// laterStore is a store opened before the engine started.
type laterStore struct {
	s    *startingEngine
	name string

	mu  sync.Mutex
	max int64                  // until st is open
	st  *jetstream.PluginStore // nil until the engine started and a call used the store
}

func (l *laterStore) store() (*jetstream.PluginStore, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st != nil {
		return l.st, nil
	}
	e, ok := l.s.get().(*jetstream.Engine)
	if !ok {
		return nil, l.s.unavailable()
	}
	st, err := e.PluginStore(l.name, l.max)
	if err != nil {
		return nil, err
	}
	l.st = st
	return st, nil
}

func (l *laterStore) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	st, err := l.store()
	if err != nil {
		return nil, false, err
	}
	return st.Get(ctx, key)
}

func (l *laterStore) Set(ctx context.Context, key, value []byte, ttl time.Duration) (int32, error) {
	st, err := l.store()
	if err != nil {
		return 0, err
	}
	return st.Set(ctx, key, value, ttl)
}

func (l *laterStore) CompareAndSet(ctx context.Context, key, old, value []byte, ttl time.Duration) (int32, error) {
	st, err := l.store()
	if err != nil {
		return 0, err
	}
	return st.CompareAndSet(ctx, key, old, value, ttl)
}

func (l *laterStore) Delete(ctx context.Context, key []byte) error {
	st, err := l.store()
	if err != nil {
		return err
	}
	return st.Delete(ctx, key)
}

func (l *laterStore) SetMaxBytes(n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st == nil {
		l.max = n
		return nil
	}
	return l.st.SetMaxBytes(n)
}
