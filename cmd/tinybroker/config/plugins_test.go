package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/plugins"
)

func TestPluginBlocks(t *testing.T) {
	src := `
plugin_cache_dir = "/tmp/tb-cache"

plugin "tenant-filter" {
  path           = "plugins/tenant.wasm"
  hooks          = ["on_publish"]
  topics         = ["orders.>", "billing.*"]
  config         = { allow = "acme,globex", "max-size" = 10, strict = true }
  memory_limit_mb = 16
  call_timeout   = "50ms"
  pool_size      = 2
  failure_policy = "dead_letter"
  max_emits      = 3
  breaker_failures = 7
  breaker_cooldown = "1m"
  kv_max_bytes     = 1048576
  kv_max_value_bytes = 1024
}

plugin "audit" {
  path         = "/abs/audit.wasm"
  groups       = ["billing"]
  call_timeout = "none"
  tick_interval = "250ms"
  log_topic = "logs.audit"
  log_topic_rate = 20
}
`
	c := mustParse(t, src, "/etc/tinybroker/tb.hcl")
	want := []plugins.Spec{{
		Name: "tenant-filter", Path: filepath.Join("/etc/tinybroker", "plugins/tenant.wasm"), Source: "/etc/tinybroker/tb.hcl:5,20-41",
		Hooks: []string{"on_publish"}, Topics: []string{"orders.>", "billing.*"},
		Config:           map[string]string{"allow": "acme,globex", "max-size": "10", "strict": "true"},
		MemoryLimitBytes: 16 << 20, CallTimeout: 50 * time.Millisecond, PoolSize: 2,
		FailurePolicy: plugins.FailDeadLetter, MaxEmits: 3, BreakerFailures: 7, BreakerCooldown: time.Minute,
		KVMaxBytes: 1 << 20, KVMaxValueBytes: 1024,
	}, {
		Name: "audit", Path: "/abs/audit.wasm", Source: "/etc/tinybroker/tb.hcl:21,18-35", Groups: []string{"billing"}, CallTimeout: plugins.NoCallTimeout,
		TickInterval: 250 * time.Millisecond, LogTopic: "logs.audit", LogTopicRate: 20,
	}}
	if !reflect.DeepEqual(c.Plugins, want) {
		t.Fatalf("plugins\n got %+v\nwant %+v", c.Plugins, want)
	}
	if c.PluginCacheDir != "/tmp/tb-cache" {
		t.Fatalf("plugin_cache_dir %q", c.PluginCacheDir)
	}
}

func TestPluginBlockErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"missing path", "plugin \"p\" {\n  pool_size = 2\n}\n", "t.hcl:1,1-11: Missing plugin path"},
		{"bad hook", "plugin \"p\" {\n  path = \"x.wasm\"\n  hooks = [\"on_connect\"]\n}\n", "t.hcl:3,12-24: Invalid hooks"},
		{"bad topic", "plugin \"p\" {\n  path = \"x.wasm\"\n  topics = [\"a.>.b\"]\n}\n", "t.hcl:3,13-20: Invalid topics"},
		{"not a list", "plugin \"p\" {\n  path = \"x.wasm\"\n  topics = \"a\"\n}\n", "t.hcl:3,12-15: Wrong type for topics"},
		{"bad policy", "plugin \"p\" {\n  path = \"x.wasm\"\n  failure_policy = \"retry\"\n}\n", "fail_open"},
		{"bad timeout", "plugin \"p\" {\n  path = \"x.wasm\"\n  call_timeout = \"0s\"\n}\n", "t.hcl:3,18-22: Invalid call_timeout"},
		{"config not object", "plugin \"p\" {\n  path = \"x.wasm\"\n  config = \"allow=acme\"\n}\n", "t.hcl:3,12-24: Wrong type for config"},
		{"duplicate", "plugin \"p\" {\n  path = \"x.wasm\"\n}\nplugin \"p\" {\n  path = \"y.wasm\"\n}\n", "t.hcl:4,8-11: Duplicate plugin"},
		{"bad name", "plugin \"a b\" {\n  path = \"x.wasm\"\n}\n", "Invalid plugin name"},
		{"unknown setting", "plugin \"p\" {\n  path = \"x.wasm\"\n  color = \"red\"\n}\n", "t.hcl:3,3-8: Unsupported argument"},
		{"no label", "plugin {\n  path = \"x.wasm\"\n}\n", "t.hcl:1,8-9: Missing name for plugin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.src), "t.hcl")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse = %v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

// The example configuration with plugins parses, and names every example plugin.
func TestExamplePluginsConfig(t *testing.T) {
	c, err := Load("../../../examples/config/plugins.hcl")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range c.Plugins {
		names = append(names, p.Name)
		if !strings.HasSuffix(p.Path, "examples/plugins/bin/"+p.Name+".wasm") {
			t.Errorf("plugin %s path %s", p.Name, p.Path)
		}
	}
	if strings.Join(names, ",") != "tenant-filter,content-router,redact,retry-backoff,audit" {
		t.Fatalf("plugins %v", names)
	}
}

// hash pins a plugin's module: the file must have it; a malformed one is refused where it
// is written. memory { state_dir } is made relative to the file's folder.
func TestPluginHashPinAndStateDir(t *testing.T) {
	dir := t.TempDir()
	wasm := filepath.Join(dir, "p.wasm")
	if err := os.WriteFile(wasm, []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("\x00asm\x01\x00\x00\x00"))
	good := "sha256:" + hex.EncodeToString(sum[:])
	file := filepath.Join(dir, "tb.hcl")
	parse := func(hash string) (Config, error) {
		return Parse([]byte("memory {\n  state_dir = \"state\"\n}\nplugin \"p\" {\n  path = \"p.wasm\"\n  hash = \""+hash+"\"\n}\n"), file)
	}
	c, err := parse(good)
	if err != nil || c.Plugins[0].Hash != good || c.StateDir != filepath.Join(dir, "state") {
		t.Fatalf("a good pin: %+v, %v", c, err)
	}
	for hash, want := range map[string]string{
		"sha256:" + strings.Repeat("0", 64): "Plugin hash mismatch",
		"sha256:" + strings.Repeat("A", 64): "is not a content hash",
		"md5:00":                            "is not a content hash",
	} {
		if _, err := parse(hash); err == nil || !strings.Contains(err.Error(), file+":6,10") || !strings.Contains(err.Error(), want) {
			t.Errorf("hash %q: %v; want %q at %s:6,10", hash, err, want, file)
		}
	}
}
