package conformance

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/plugins"
)

// The plugin block docs/ABI.md shows, with every setting, is what the config file accepts, and
// means what the page says.
func TestABIConfigExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ABI.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```hcl\nplugin \"tenant-filter\" {")
	if !ok {
		t.Fatal(`docs/ABI.md has no hcl block starting plugin "tenant-filter" {`)
	}
	block, _, _ = strings.Cut(block, "```")
	cfg, err := config.Parse([]byte(`plugin "tenant-filter" {`+block), "/etc/tinybroker/tinybroker.hcl")
	if err != nil {
		t.Fatalf("docs/ABI.md's plugin block: %v", err)
	}
	if len(cfg.Plugins) != 1 {
		t.Fatalf("%d plugins", len(cfg.Plugins))
	}
	p := cfg.Plugins[0]
	want := plugins.Spec{Name: "tenant-filter", Path: "/etc/tinybroker/plugins/tenant-filter.wasm",
		Topics: []string{"orders.>"}, Groups: []string{"billing", "shipping"}, Hooks: []string{"on_publish"},
		Config:           map[string]string{"allow": "acme,globex", "max": "3"},
		MemoryLimitBytes: 64 << 20, PoolSize: 4, FailurePolicy: plugins.FailOpen, MaxEmits: 16,
		BreakerFailures: 5, BreakerCooldown: 30 * time.Second, KVMaxBytes: plugins.DefaultKVMaxBytes, KVMaxValueBytes: plugins.DefaultKVMaxValueBytes,
		LogTopicRate: plugins.DefaultLogTopicRate}
	if p.Name != want.Name || p.Path != want.Path || !slices.Equal(p.Topics, want.Topics) || !slices.Equal(p.Groups, want.Groups) ||
		!slices.Equal(p.Hooks, want.Hooks) || !maps.Equal(p.Config, want.Config) || p.MemoryLimitBytes != want.MemoryLimitBytes ||
		p.PoolSize != want.PoolSize || p.CallTimeout != time.Second || p.FailurePolicy != want.FailurePolicy || p.MaxEmits != want.MaxEmits ||
		p.BreakerFailures != want.BreakerFailures || p.BreakerCooldown != want.BreakerCooldown ||
		p.KVMaxBytes != want.KVMaxBytes || p.KVMaxValueBytes != want.KVMaxValueBytes || p.LogTopicRate != want.LogTopicRate {
		t.Errorf("docs/ABI.md's plugin block parses as\n%+v\nwant\n%+v", p, want)
	}
}
