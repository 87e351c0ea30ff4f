package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/plugins"
)

// pluginManager owns the plugin host and the chain installed in the broker, and swaps the
// chain on reload. The old chain is closed in the background once calls in progress on it
// have finished.
type pluginManager struct {
	host *plugins.Host
	b    broker.Engine
	log  hclog.Logger

	mu    sync.Mutex // serialises reloads
	chain *plugins.Chain
	wg    sync.WaitGroup // closing old chains
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
	pm := &pluginManager{host: host, b: b, log: log}
	pm.stopping, pm.stop = context.WithCancel(context.Background())
	if len(cfg.Plugins) > 0 {
		if _, err := pm.swap(context.Background(), cfg.Plugins); err != nil {
			_ = host.Close(context.Background())
			return nil, err
		}
	}
	return pm, nil
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

// swap loads specs, warms them up and installs them; on error the running chain stays.
func (pm *pluginManager) swap(ctx context.Context, specs []plugins.Spec) ([]string, error) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	var next *plugins.Chain
	if len(specs) > 0 {
		var err error
		if next, err = pm.host.Load(ctx, specs); err != nil {
			return nil, err
		}
		pm.b.SetHooks(next)
	} else {
		pm.b.SetHooks(nil)
	}
	old := pm.chain
	pm.chain = next
	if old != nil {
		pm.wg.Go(func() {
			ctx, cancel := context.WithTimeout(pm.stopping, 30*time.Second)
			defer cancel()
			_ = old.Close(ctx)
		})
	}
	if next == nil {
		return nil, nil
	}
	return next.Names(), nil
}

// reload installs the plugins of a reloaded configuration file.
func (pm *pluginManager) reload(ctx context.Context, specs []plugins.Spec) ([]string, error) {
	names, err := pm.swap(ctx, specs)
	if err != nil {
		return nil, err
	}
	pm.log.Info("plugins reloaded", "plugins", names)
	return names, nil
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

// close unloads everything; the broker must be shut down first.
// close unloads the plugins: calls still running when ctx is done are stopped, and so are
// those of old chains at once.
// Calls after close fail as the plugins' calls do when unloaded (their failure policies).
// Later calls do nothing.
func (pm *pluginManager) close(ctx context.Context) {
	pm.closed.Do(func() {
		pm.stop()
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
