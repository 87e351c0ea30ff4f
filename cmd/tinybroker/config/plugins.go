package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

// The plugin block: `plugin "name" { path = "x.wasm" ... }`, any number of them, in chain
// order. Its settings write into the last plugin of Config.Plugins, which decodePlugin has
// just appended.

func lastPlugin(c *Config) *plugins.Spec { return &c.Plugins[len(c.Plugins)-1] }

var pluginSection = section{
	attrs: []attribute{
		pathAttr("path", func(c *Config) *string { return &lastPlugin(c).Path }),
		stringListAttr("hooks", func(s string) string {
			if s == plugins.HookPublish || s == plugins.HookAck || s == plugins.HookRedeliver || s == plugins.HookTick {
				return ""
			}
			return fmt.Sprintf("%q is not a hook; use %q, %q, %q or %q", s, plugins.HookPublish, plugins.HookAck, plugins.HookRedeliver, plugins.HookTick)
		}, func(c *Config) *[]string { return &lastPlugin(c).Hooks }),
		stringListAttr("topics", patternProblem, func(c *Config) *[]string { return &lastPlugin(c).Topics }),
		stringListAttr("groups", func(string) string { return "" }, func(c *Config) *[]string { return &lastPlugin(c).Groups }),
		stringListAttr("emit_topics", patternProblem, func(c *Config) *[]string { return &lastPlugin(c).EmitTopics }),
		stringMapAttr("config", func(c *Config) *map[string]string { return &lastPlugin(c).Config }),
		positiveIntAttr("memory_limit_mb", func(c *Config) *int { return &lastPlugin(c).MemoryLimitBytes }),
		timeoutAttr("call_timeout", plugins.NoCallTimeout, func(c *Config) *time.Duration { return &lastPlugin(c).CallTimeout }),
		positiveIntAttr("pool_size", func(c *Config) *int { return &lastPlugin(c).PoolSize }),
		enumAttr("failure_policy", []choice[plugins.FailurePolicy]{
			{"fail_open", plugins.FailOpen},
			{"fail_closed", plugins.FailClosed},
			{"dead_letter", plugins.FailDeadLetter},
		}, func(c *Config) *plugins.FailurePolicy { return &lastPlugin(c).FailurePolicy }),
		positiveIntAttr("max_emits", func(c *Config) *int { return &lastPlugin(c).MaxEmits }),
		positiveIntAttr("breaker_failures", func(c *Config) *int { return &lastPlugin(c).BreakerFailures }),
		durationAttr("breaker_cooldown", func(c *Config) *time.Duration { return &lastPlugin(c).BreakerCooldown }),
		positiveIntAttr("kv_max_bytes", func(c *Config) *int { return &lastPlugin(c).KVMaxBytes }),
		positiveIntAttr("kv_max_value_bytes", func(c *Config) *int { return &lastPlugin(c).KVMaxValueBytes }),
		hashAttr("hash", func(c *Config) *string { return &lastPlugin(c).Hash }),
		durationAttr("tick_interval", func(c *Config) *time.Duration { return &lastPlugin(c).TickInterval }), // its minimum checked at load
		stringAttr("log_topic", "a topic", func(c *Config) *string { return &lastPlugin(c).LogTopic }),       // checked at load
		positiveIntAttr("log_topic_rate", func(c *Config) *int { return &lastPlugin(c).LogTopicRate }),
	},
}

func decodePlugin(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	name := b.Labels[0]
	if err := plugins.CheckName(name); err != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid plugin name",
			Detail: err.Error() + ".", Subject: b.LabelRanges[0].Ptr()}}
	}
	if diags := declare(&d.cfg.Plugins, plugins.Spec{Name: name}, func(s plugins.Spec) string { return s.Name }, b, "plugin", "plugin"); diags != nil {
		return diags
	}
	diags := d.section(b.Body, pluginSection, path+"."+name)
	p := lastPlugin(&d.cfg)
	if p.Path == "" && !diags.HasErrors() {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing plugin path",
			Detail: fmt.Sprintf("plugin %q needs path = \"file.wasm\" (relative to this file's folder).", name), Subject: b.DefRange.Ptr()})
	}
	if p.Path != "" && !filepath.IsAbs(p.Path) {
		p.Path = filepath.Join(d.dir, p.Path)
	}
	if r := d.rangeOf(path + "." + name + ".path"); r != nil {
		p.Source = r.String() // errors loading the file name where it is declared
	}
	p.MemoryLimitBytes *= 1 << 20
	if p.Hash != "" && p.Path != "" && !diags.HasErrors() {
		diags = append(diags, checkPin(p, d.rangeOf(path+"."+name+".hash"))...)
	}
	return diags
}

// checkPin refuses a plugin whose file's content hash is not the one its hash setting pins
// (at r). The broker reads the file again when it loads it, and checks once more there.
func checkPin(p *plugins.Spec, r *hcl.Range) hcl.Diagnostics {
	f, err := os.Open(p.Path)
	if err != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Pinned plugin unreadable",
			Detail: fmt.Sprintf("plugin %q pins hash %s, and its file cannot be read to check it: %v.", p.Name, p.Hash, err), Subject: r}}
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Pinned plugin unreadable",
			Detail: fmt.Sprintf("plugin %q pins hash %s, and its file cannot be read to check it: %v.", p.Name, p.Hash, err), Subject: r}}
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != p.Hash {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Plugin hash mismatch",
			Detail: fmt.Sprintf("plugin %q pins hash %s, but %s has hash %s: it is not the module pinned (update hash if the new file is meant).", p.Name, p.Hash, p.Path, got), Subject: r}}
	}
	return nil
}

// hashAttr is a module's content hash, "sha256:" and 64 lowercase hex digits.
func hashAttr(name string, field func(*Config) *string) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, `a content hash such as "sha256:9f86d0…"`, expr, &s); diags.HasErrors() {
			return diags
		}
		hexPart, ok := strings.CutPrefix(s, "sha256:")
		if _, err := hex.DecodeString(hexPart); !ok || err != nil || len(hexPart) != 64 || strings.ToLower(hexPart) != hexPart {
			return invalid(expr, "Invalid "+name, `%q is not a content hash: write "sha256:" and the 64 lowercase hex digits of the module's SHA-256 (sha256sum FILE, or tinybroker plugin ls).`, s)
		}
		*field(c) = s
		return nil
	}}
}

// pathAttr is a non-empty string.
func pathAttr(name string, field func(*Config) *string) attribute {
	return stringAttr(name, "a file path in quotes", field)
}

// timeoutAttr is a duration string, or "none" (stored as none) for no limit.
func timeoutAttr(name string, none time.Duration, field func(*Config) *time.Duration) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, `a duration string such as "100ms", or "none"`, expr, &s); diags.HasErrors() {
			return diags
		}
		if s == "none" {
			*field(c) = none
			return nil
		}
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			return invalid(expr, "Invalid "+name, `%q is not a positive Go duration; write e.g. "100ms", or "none" for no limit.`, s)
		}
		*field(c) = v
		return nil
	}}
}

// patternProblem is a stringListAttr check for topic patterns.
func patternProblem(s string) string {
	if err := broker.Pattern(s).Validate(); err != nil {
		return err.Error()
	}
	return ""
}

// stringListAttr is a list of quoted strings, each checked by check ("" if fine).
func stringListAttr(name string, check func(string) string, field func(*Config) *[]string) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		tuple, ok := expr.(*hclsyntax.TupleConsExpr)
		if !ok {
			return invalid(expr, "Wrong type for "+name, `%s must be a list of strings, e.g. ["a", "b"].`, name)
		}
		var out []string
		for _, e := range tuple.Exprs {
			var s string
			if diags := decodeString(name, "a quoted string", e, &s); diags.HasErrors() {
				return diags
			}
			if msg := check(s); msg != "" {
				return invalid(e, "Invalid "+name, "%s.", msg)
			}
			out = append(out, s)
		}
		*field(c) = out
		return nil
	}}
}

// stringMapAttr is an object of string values, e.g. { allow = "acme" }.
func stringMapAttr(name string, field func(*Config) *map[string]string) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		obj, ok := expr.(*hclsyntax.ObjectConsExpr)
		if !ok {
			return invalid(expr, "Wrong type for "+name, `%s must be an object of strings, e.g. { allow = "acme,globex" }.`, name)
		}
		out := make(map[string]string, len(obj.Items))
		for _, item := range obj.Items {
			var key string
			keyExpr := item.KeyExpr
			if k, ok := keyExpr.(*hclsyntax.ObjectConsKeyExpr); ok {
				keyExpr = k.Wrapped
			}
			if kw := hcl.ExprAsKeyword(keyExpr); kw != "" {
				key = kw
			} else if diags := decodeString(name+" key", "a name or a quoted string", keyExpr, &key); diags.HasErrors() {
				return diags
			}
			var v string
			if diags := constant(item.ValueExpr); diags.HasErrors() {
				return diags
			}
			val, diags := item.ValueExpr.Value(nil)
			if diags.HasErrors() {
				return diags
			}
			switch {
			case val.IsNull() || !val.IsWhollyKnown():
				return invalid(item.ValueExpr, "Wrong type for "+name, "%s.%s must be a string.", name, key)
			case val.Type() == cty.String:
				v = val.AsString()
			case val.Type() == cty.Number:
				v = val.AsBigFloat().Text('g', -1)
			case val.Type() == cty.Bool:
				v = fmt.Sprint(val.True())
			default:
				return invalid(item.ValueExpr, "Wrong type for "+name, "%s.%s must be a string.", name, key)
			}
			out[key] = v
		}
		*field(c) = out
		return nil
	}}
}
