package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// w4Target is the W4 ratio to reach: plugins cost at most a fifth of the throughput.
const w4Target = 0.80

var w4ConfigName = regexp.MustCompile(`^w4-(.+)\.hcl$`)

func (c *Config) w4Defaults() error {
	if len(c.W4Base) == 0 {
		c.W4Base = []string{"W1", "W2"}
	}
	for _, w := range c.W4Base {
		if w != "W1" && w != "W2" {
			return fmt.Errorf("W4 runs W1 and W2, not %q", w)
		}
	}
	if c.W4Lang == "" {
		c.W4Lang = "go"
		if m := w4ConfigName.FindStringSubmatch(filepath.Base(c.W4Config)); m != nil {
			c.W4Lang = m[1]
		}
	}
	if !slices.Contains(c.Workloads, "W4") {
		return nil
	}
	switch {
	case c.Addr != "" && c.W4Addr == "":
		return errors.New("W4 against a broker at -addr needs -w4-addr: a second broker running with the W4 plugins (e.g. tinybroker serve --config bench/w4-go.hcl)")
	case c.Addr != "" && c.W4Config != "":
		return errors.New("W4: -w4-config loads the plugins into an in-process broker, which is no match for the broker at -addr; start `tinybroker serve --config FILE` and pass -w4-addr")
	case c.Addr == "" && c.W4Addr != "":
		return errors.New("W4: -w4-addr needs -addr too (a plain broker to compare with)")
	case c.Addr == "" && c.W4Config == "":
		return errors.New("W4 needs the plugins: -w4-config FILE (e.g. bench/w4-go.hcl, after bench/plugins/build.sh) for in-process brokers, or -addr and -w4-addr")
	}
	return nil
}

// w4 runs W1 and W2 (W4Base) against the plain broker at r.addr and against one with W4's
// plugins, back to back within every repetition, and reports both rates and their ratio.
func (r *runner) w4() error {
	plugAddr := r.cfg.W4Addr
	if plugAddr == "" {
		var stop func() error
		var err error
		fmt.Fprintf(r.stderr, "# W4: loading the plugins of %s into an in-process broker\n", r.cfg.W4Config)
		if plugAddr, stop, err = startPluginBroker(r.ctx, r.cfg.W4Config); err != nil {
			return err
		}
		defer func() { _ = stop() }()
	}
	plain := *r
	plug := *r
	plug.addr = plugAddr
	conn, err := plug.dial(r.ctx)
	if err != nil {
		return fmt.Errorf("the plugin broker: %w", err)
	}
	defer conn.Close()
	api := pb.NewBrokerClient(conn)
	if calls, _, err := pluginCalls(r.ctx, api); err != nil {
		return err
	} else if calls < 0 {
		return fmt.Errorf("the broker at %s has no plugins loaded: start it with a W4 config (bench/w4-<lang>.hcl)", plugAddr)
	}

	for _, base := range r.cfg.W4Base {
		n := r.cfg.N
		if n == 0 {
			n = defaultN[base]
		}
		plain.n, plug.n = n, n
		f, pf, key := plain.w1, plug.w1, "delivered_msgs_per_s"
		if base == "W2" {
			f, pf, key = plain.w2, plug.w2, "acked_msgs_per_s"
		}
		rate := func(ms []metric) float64 {
			for _, m := range ms {
				if m.name == key {
					return m.v
				}
			}
			return 0
		}
		prefix := fmt.Sprintf("W4 tinybroker lang=%s workload=%s", r.cfg.W4Lang, base)
		// measure runs workload w, then reads the plugin broker's counters.
		measure := func(ctx context.Context, w func(context.Context) ([]metric, error), what string) (ms []metric, calls, fails int64, err error) {
			if ms, err = w(ctx); err != nil {
				return nil, 0, 0, fmt.Errorf("%s: %w", what, err)
			}
			calls, fails, err = pluginCalls(ctx, api)
			return ms, calls, fails, err
		}
		err := r.repeat(prefix, func(ctx context.Context) ([]metric, error) {
			a, calls0, fails0, err := measure(ctx, f, "plain")
			if err != nil {
				return nil, err
			}
			b, calls1, fails1, err := measure(ctx, pf, "with plugins")
			if err != nil {
				return nil, err
			}
			if calls1 == calls0 {
				return nil, fmt.Errorf("the plugin broker at %s made no plugin calls: do its plugins' topics cover bench.w1 and bench.w2?", plugAddr)
			}
			plainRate, plugRate := rate(a), rate(b)
			return []metric{{name: "plain", v: plainRate}, {name: "plugins", v: plugRate}, {name: "ratio", v: plugRate / plainRate},
				{name: "target", v: w4Target},
				{name: "plugin_calls_per_msg", v: float64(calls1-calls0) / float64(n)},
				{name: "plugin_failures", v: float64(fails1 - fails0), sum: true}}, nil
		})
		if err != nil {
			return fmt.Errorf("lang=%s workload=%s: %w", r.cfg.W4Lang, base, err)
		}
	}
	return nil
}

// pluginCalls returns the sum of the broker's plugin calls and failures; calls is -1 if the
// broker has no plugins.
func pluginCalls(ctx context.Context, api pb.BrokerClient) (calls, failures int64, err error) {
	st, err := api.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return 0, 0, fmt.Errorf("plugin broker stats: %w", err)
	}
	if len(st.GetPlugins()) == 0 {
		return -1, 0, nil
	}
	for _, p := range st.GetPlugins() {
		calls += int64(p.GetCalls())
		failures += int64(p.GetFailures())
	}
	return calls, failures, nil
}

// startPluginBroker starts an in-process broker like startBroker's, with the plugins of the
// config file at path loaded (only its plugin blocks are used), and returns its address and a
// function that shuts it down and unloads them.
func startPluginBroker(ctx context.Context, path string) (addr string, stop func() error, err error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", nil, fmt.Errorf("W4 config: %w", err)
	}
	if len(cfg.Plugins) == 0 {
		return "", nil, fmt.Errorf("W4 config %s declares no plugins", path)
	}
	host, err := pluginHost(cfg)
	if err != nil {
		return "", nil, err
	}
	chain, err := host.Load(ctx, cfg.Plugins)
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("W4 plugins of %s: %w", path, err), host.Close(ctx))
	}
	unload := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(chain.Close(ctx), host.Close(ctx))
	}
	addr, stopBroker, err := startBrokerWith(chain)
	if err != nil {
		return "", nil, errors.Join(err, unload())
	}
	return addr, func() error { return errors.Join(stopBroker(), unload()) }, nil
}

// pluginHost returns a plugin host that caches compiled plugins on disk where `tinybroker
// serve` does (the config's plugin_cache_dir, else the user cache folder), or in memory if
// that folder cannot be used.
func pluginHost(cfg config.Config) (*plugins.Host, error) {
	dir := cfg.PluginCacheDir
	if base, err := os.UserCacheDir(); dir == "" && err == nil {
		dir = filepath.Join(base, "tinybroker", "wazero")
	}
	opts := plugins.HostOptions{CacheDir: dir, MaxMessageBytes: inProcessOptions.MaxMessageBytes, MaxHeaderBytes: inProcessOptions.MaxHeaderBytes}
	host, err := plugins.NewHost(opts)
	if err != nil && dir != "" {
		opts.CacheDir = ""
		host, err = plugins.NewHost(opts)
	}
	return host, err
}
