package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/wasmbuild"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(removeModules)) }

// pluginPkgs are the plugins these tests run, by name.
var pluginPkgs = map[string]string{
	"sdkcheck":       "./sdk/go/plugin/internal/e2e/sdkcheck",
	"nohandle":       "./sdk/go/plugin/internal/e2e/nohandle",
	"tenant-filter":  "./examples/plugins/tenant-filter",
	"content-router": "./examples/plugins/content-router",
	"redact":         "./examples/plugins/redact",
	"retry-backoff":  "./examples/plugins/retry-backoff",
	"audit":          "./examples/plugins/audit",
}

var modules struct {
	once sync.Once
	dir  string
	wasm map[string][]byte
	err  error
}

// removeModules is TestMain's cleanup, once the tests are done: it removes the modules'
// directory (with the compilation cache in it), then exits with the tests' code.
func removeModules(code int) {
	os.RemoveAll(modules.dir)
	os.Exit(code)
}

// wasm returns the module of the plugin name, building every plugin the first time. It
// skips the test under -short.
func wasm(t testing.TB, name string) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds Go plugins with GOOS=wasip1 GOARCH=wasm (several seconds); skipped under -short")
	}
	modules.once.Do(func() {
		root, err := wasmbuild.RepoRoot()
		if err != nil {
			modules.err = err
			return
		}
		if modules.dir, modules.err = os.MkdirTemp("", "tinybroker-e2e-"); modules.err != nil {
			return
		}
		if modules.wasm, modules.err = wasmbuild.BuildAll(root, modules.dir, pluginPkgs); modules.err == nil {
			precompile()
		}
	})
	if modules.err != nil {
		t.Fatal(modules.err)
	}
	return modules.wasm[name]
}

// precompile compiles every module into the compilation cache directory the tests' hosts
// share, all at once rather than one by one as the tests first load them: compiling a Go
// plugin takes wazero half a second, and ten times as long under the race detector.
func precompile() {
	var wg sync.WaitGroup
	for name, bin := range modules.wasm {
		wg.Go(func() {
			h, err := plugins.NewHost(plugins.HostOptions{CacheDir: cacheDir()})
			if err != nil {
				return
			}
			defer h.Close(context.Background())
			// Compiling comes first: the load may fail after it (tb_v1_init wants its configuration).
			if c, err := h.Load(context.Background(), []plugins.Spec{{Name: name, Wasm: bin}}); err == nil {
				c.Close(context.Background())
			}
		})
	}
	wg.Wait()
}

func cacheDir() string { return filepath.Join(modules.dir, "wazero-cache") }

// env is a broker with a plugin chain, for one test.
type env struct {
	b     broker.Engine
	chain *plugins.Chain
	log   *brokertest.Log
}

// load loads specs in a new Host, with the broker's default limits. The host's logs go to
// env.log.
func load(t testing.TB, specs ...plugins.Spec) (*plugins.Chain, *brokertest.Log, error) {
	t.Helper()
	logs := &brokertest.Log{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})
	// The modules are compiled once, into the cache directory, and reused by later tests.
	h, err := plugins.NewHost(plugins.HostOptions{Logger: logger, CacheDir: cacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	c, err := h.Load(context.Background(), specs)
	if err != nil {
		return nil, logs, err
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, logs, nil
}

// start loads specs and starts a broker with them installed.
func start(t testing.TB, specs ...plugins.Spec) *env {
	t.Helper()
	c, logs, err := load(t, specs...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{b: brokertest.Start(t, brokertest.Options{Hooks: c}), chain: c, log: logs}
}

func (e *env) subscribe(t testing.TB, o broker.SubscribeOptions) *brokertest.Sub {
	t.Helper()
	return brokertest.Subscribe(t, e.b, o)
}

// fanout subscribes to patterns.
func (e *env) fanout(t testing.TB, patterns ...string) *brokertest.Sub {
	return e.subscribe(t, broker.SubscribeOptions{Patterns: patterns, Mode: broker.Fanout})
}

func (e *env) publish(t testing.TB, topic, payload string, headers map[string]string) broker.PublishResult {
	t.Helper()
	res, err := e.b.Publish(topic, []byte(payload), headers)
	if err != nil {
		t.Fatalf("Publish %s: %v", topic, err)
	}
	return res
}
