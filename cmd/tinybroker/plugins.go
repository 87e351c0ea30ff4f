package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	tbjs "github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/plugins"
)

// pluginManager owns the plugin host and the chain installed in the broker, and swaps the
// chain on reload and on every change of the deployed plugins (lifecycle.go). The chain is
// composed of the config file's plugins and the deployed set (RATIONALE.md, "Why do
// deployed plugins compose with the config file's so?"). The old chain is closed in the
// background once calls in progress on it have finished.
type pluginManager struct {
	host     *plugins.Host
	b        broker.Engine
	log      hclog.Logger
	store    pluginStore
	maxBytes int64 // limits { max_plugin_bytes }

	// mu serialises swaps: a reload, a lifecycle change, a change seen on another node.
	// It is held while the next chain loads, and while the set is stored.
	mu       sync.Mutex
	chain    *plugins.Chain
	cfgSpecs []plugins.Spec // the config file's plugins, as last loaded
	set      pluginSet      // the deployed set the chain runs
	rev      uint64         // its revision in the store
	modules  map[string][]byte

	// wg tracks the goroutines the manager starts: closing old chains, storing a canary's
	// rollback, watching the store. bgMu and closing keep any from starting once close
	// waits for them.
	wg      sync.WaitGroup
	bgMu    sync.Mutex
	closing bool
	// stopping is cancelled by close: old chains still closing stop their calls at once.
	stopping context.Context
	stop     context.CancelFunc
	closed   sync.Once
}

func newPluginManager(cfg config.Config, b broker.Engine, log hclog.Logger) (*pluginManager, error) {
	dir := pluginCacheDir(cfg)
	host, err := plugins.NewHost(plugins.HostOptions{CacheDir: dir, Logger: log,
		MaxMessageBytes: cfg.Broker.MaxMessageBytes, MaxHeaderBytes: cfg.Broker.MaxHeaderBytes, MaxHeaders: cfg.Broker.MaxHeaders,
		MaxPluginBytes: int64(cfg.Limits.MaxPluginBytes), KV: pluginKV(b)})
	if err != nil {
		return nil, err
	}
	store, err := newPluginStoreFor(cfg, b)
	if err != nil {
		_ = host.Close(context.Background())
		return nil, err
	}
	pm := &pluginManager{host: host, b: b, log: log, store: store, maxBytes: int64(cfg.Limits.MaxPluginBytes),
		cfgSpecs: cfg.Plugins, modules: map[string][]byte{}}
	pm.stopping, pm.stop = context.WithCancel(context.Background())
	// NATS may not answer yet (a cluster electing its leaders, an engine still starting):
	// the config's plugins run meanwhile, and the watch below installs the stored set once
	// it can read it, as it does every change.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	set, rev, err := store.load(ctx)
	cancel()
	if err != nil {
		log.Warn("the deployed plugins cannot be read yet: the config file's run until they can", "error", err)
	}
	if err := pm.apply(context.Background(), set, rev); err != nil {
		_ = host.Close(context.Background())
		return nil, err
	}
	// Without state_dir, each deploy warns that a restart forgets it (lifecycle.go).
	if len(set.Plugins) > 0 {
		log.Info("deployed plugins loaded", "from", store.where(), "plugins", len(set.Plugins))
	}
	pm.background(func() { store.watch(pm.stopping, pm.refresh) })
	return pm, nil
}

// newPluginStoreFor chooses where the deployed plugins are kept: NATS on the JetStream
// engine, state_dir (or memory) on the memory engine.
func newPluginStoreFor(cfg config.Config, b broker.Engine) (pluginStore, error) {
	if cfg.Engine != config.EngineJetStream {
		return newLocalStore(cfg.StateDir)
	}
	prefix := cfg.JetStream.Prefix
	if prefix == "" {
		prefix = "tb"
	}
	engine := func() *tbjs.Engine {
		e := b
		if s, ok := b.(*startingEngine); ok {
			e = s.get()
		}
		j, _ := e.(*tbjs.Engine)
		return j
	}
	return &natsStore{engine: engine, prefix: prefix, replicas: max(cfg.JetStream.Replicas, 1)}, nil
}

// background runs f on a goroutine close waits for, and reports whether it did: none
// starts once close has begun.
func (pm *pluginManager) background(f func()) bool {
	pm.bgMu.Lock()
	defer pm.bgMu.Unlock()
	if pm.closing {
		return false
	}
	pm.wg.Go(f)
	return true
}

// pluginCacheDir is where compiled plugins are kept across restarts: plugin_cache_dir, by
// default the user's cache folder (~/.cache/tinybroker/wazero); "none" keeps them nowhere.
func pluginCacheDir(cfg config.Config) string {
	switch cfg.PluginCacheDir {
	case "none":
		return ""
	case "":
		if base, err := os.UserCacheDir(); err == nil {
			return filepath.Join(base, "tinybroker", "wazero")
		}
		return ""
	}
	return cfg.PluginCacheDir
}

// apply loads the chain of the config's plugins and set, and installs it; on error the
// running chain stays.
func (pm *pluginManager) apply(ctx context.Context, set pluginSet, rev uint64) error {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	next, err := pm.load(ctx, pm.cfgSpecs, set)
	if err != nil {
		return err
	}
	pm.install(next, set, rev)
	return nil
}

// load composes and loads the chain of cfgSpecs and set (nil: no plugins).
// pm.mu must be held.
func (pm *pluginManager) load(ctx context.Context, cfgSpecs []plugins.Spec, set pluginSet) (*plugins.Chain, error) {
	specs, err := pm.compose(ctx, cfgSpecs, set)
	if err != nil || len(specs) == 0 {
		return nil, err
	}
	return pm.host.Load(ctx, specs)
}

// install puts next in the broker, and closes the chain it replaces once its calls are done.
// Once close has begun (it cancels stopping before it takes pm.mu) next is closed instead:
// close would not see it. pm.mu must be held.
func (pm *pluginManager) install(next *plugins.Chain, set pluginSet, rev uint64) {
	if pm.stopping.Err() != nil {
		if next != nil {
			_ = next.Close(pm.stopping)
		}
		return
	}
	if next != nil {
		pm.b.SetHooks(next)
	} else {
		pm.b.SetHooks(nil)
	}
	old := pm.chain
	pm.chain, pm.set, pm.rev = next, set, rev
	if old != nil {
		closeOld := func() {
			ctx, cancel := context.WithTimeout(pm.stopping, 30*time.Second)
			defer cancel()
			_ = old.Close(ctx)
		}
		if !pm.background(closeOld) {
			closeOld() // close has begun: stopping is done, so this is quick
		}
	}
}

// reload installs the plugins of a reloaded configuration file, composed with the deployed
// set in force.
func (pm *pluginManager) reload(ctx context.Context, specs []plugins.Spec) ([]string, error) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	next, err := pm.load(ctx, specs, pm.set)
	if err != nil {
		return nil, err
	}
	pm.cfgSpecs = specs
	pm.install(next, pm.set, pm.rev)
	var names []string
	if next != nil {
		names = next.Names()
	}
	pm.log.Info("plugins reloaded", "plugins", names)
	return names, nil
}

// refresh installs the deployed set as stored at revision rev, if it is newer than the one
// running (another node changed it).
func (pm *pluginManager) refresh(set pluginSet, rev uint64) {
	ctx, cancel := context.WithTimeout(pm.stopping, time.Minute)
	defer cancel()
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if rev <= pm.rev {
		return
	}
	next, err := pm.load(ctx, pm.cfgSpecs, set)
	if err != nil {
		pm.log.Error("the deployed plugins changed, and do not load here: the running ones stay", "revision", rev, "error", err)
		return
	}
	pm.install(next, set, rev)
	pm.log.Info("deployed plugins changed elsewhere: installed", "revision", rev)
}

func (pm *pluginManager) stats() []plugins.PluginStats {
	if c := pm.current(); c != nil {
		return c.Stats()
	}
	return nil
}

// current returns the chain installed now (nil: none).
func (pm *pluginManager) current() *plugins.Chain {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return pm.chain
}

// close unloads the plugins: calls still running when ctx is done are stopped, and so are
// those of old chains at once. The broker must be shut down first.
// Calls after close fail as the plugins' calls do when unloaded (their failure policies).
// Later calls do nothing.
func (pm *pluginManager) close(ctx context.Context) {
	pm.closed.Do(func() {
		pm.stop()
		pm.bgMu.Lock()
		pm.closing = true
		pm.bgMu.Unlock()
		pm.mu.Lock()
		c := pm.chain
		pm.chain = nil
		pm.mu.Unlock()
		if c != nil {
			_ = c.Close(ctx)
		}
		pm.wg.Wait()
		_ = pm.host.Close(ctx)
	})
}

// compose returns the chain's specs: the config file's plugins in their order, a deployed
// module replacing the file's where one is current, then the plugins only deployed, in the
// order they were first deployed. Paused plugins are left out.
// pm.mu must be held (it fills pm.modules).
func (pm *pluginManager) compose(ctx context.Context, cfgSpecs []plugins.Spec, set pluginSet) ([]plugins.Spec, error) {
	var specs []plugins.Spec
	inConfig := map[string]bool{}
	for _, s := range cfgSpecs {
		inConfig[s.Name] = true
		sp := set.find(s.Name)
		if sp != nil && sp.Paused {
			continue
		}
		if sp != nil {
			if err := pm.deployed(ctx, &s, sp); err != nil {
				return nil, err
			}
		}
		specs = append(specs, s)
	}
	for i := range set.Plugins {
		sp := &set.Plugins[i]
		if inConfig[sp.Name] || sp.Paused || sp.Current == 0 || sp.Settings == nil {
			// Paused; or the state of a plugin the file declared and no longer does, which
			// has no settings of its own: dormant until the file declares it again.
			continue
		}
		s, err := sp.Settings.spec(sp.Name)
		if err != nil {
			return nil, err
		}
		if err := pm.deployed(ctx, &s, sp); err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// deployed gives s the deployed plugin's current module (if any) and candidate.
func (pm *pluginManager) deployed(ctx context.Context, s *plugins.Spec, sp *storedPlugin) error {
	if sp.Current > 0 {
		hash := sp.version(sp.Current)
		wasm, err := pm.module(ctx, hash)
		if err != nil {
			return fmt.Errorf("plugin %q version %d: %w", sp.Name, sp.Current, err)
		}
		s.Path, s.Wasm, s.Hash, s.Source = "", wasm, hash, ""
	}
	if c := sp.Candidate; c != nil {
		hash := sp.version(c.Version)
		wasm, err := pm.module(ctx, hash)
		if err != nil {
			return fmt.Errorf("plugin %q candidate version %d: %w", sp.Name, c.Version, err)
		}
		mode := plugins.Shadow
		if c.Mode == "canary" {
			mode = plugins.Canary
		}
		s.Candidate = &plugins.Candidate{Mode: mode, Wasm: wasm, Hash: hash, Percent: c.Percent, Keys: c.Keys,
			MaxErrorRate: c.MaxErrorRate, OnRollback: pm.rolledBack(sp.Name, c.Version)}
	}
	return nil
}

// module returns a stored module, kept in memory once read. pm.mu must be held.
func (pm *pluginManager) module(ctx context.Context, hash string) ([]byte, error) {
	if b, ok := pm.modules[hash]; ok {
		return b, nil
	}
	b, err := pm.store.module(ctx, hash)
	if err != nil {
		return nil, err
	}
	pm.modules[hash] = b
	return b, nil
}
