package config

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/tinybroker/tinybroker/broker"
)

// The group block: `group "name" { topics = [...] ... }` declares a consumer group that
// exists from start-up (broker.GroupConfig). Its settings write into the last group of
// Config.Groups, which decodeGroup has just appended.

func lastGroup(c *Config) *broker.GroupConfig { return &c.Groups[len(c.Groups)-1] }

var groupSection = section{
	attrs: []attribute{
		stringAttr("subscription_id", "a string", func(c *Config) *string { return &lastGroup(c).ID }),
		stringListAttr("topics", patternProblem, func(c *Config) *[]string { return &lastGroup(c).Patterns }),
		positiveIntAttr("max_deliveries", func(c *Config) *int { return &lastGroup(c).MaxDeliveries }),
		stringAttr("dead_letter_topic", "a topic in quotes", func(c *Config) *string { return &lastGroup(c).DeadLetterTopic }),
		positiveIntAttr("max_queued", func(c *Config) *int { return &lastGroup(c).Limits.MaxQueued }),
		sizeAttr("max_queued_bytes", func(c *Config) *int64 { return &lastGroup(c).Limits.MaxQueuedBytes }),
		enumAttr("overflow", overflowChoices, func(c *Config) *broker.Overflow { return &lastGroup(c).Limits.Overflow }),
		positiveIntAttr("dead_letters_max", func(c *Config) *int { return &lastGroup(c).Limits.DeadLetterMax }),
		sizeAttr("dead_letters_max_bytes", func(c *Config) *int64 { return &lastGroup(c).Limits.DeadLetterMaxBytes }),
		timeoutAttr("redelivery_delay_min", -1, func(c *Config) *time.Duration { return &lastGroup(c).Limits.RedeliveryDelayMin }),
		durationAttr("redelivery_delay_max", func(c *Config) *time.Duration { return &lastGroup(c).Limits.RedeliveryDelayMax }),
		durationListAttr("redelivery_backoff", func(c *Config) *[]time.Duration { return &lastGroup(c).Limits.RedeliveryBackoff }),
		jitterAttr("redelivery_jitter", func(c *Config) *float64 { return &lastGroup(c).Limits.RedeliveryJitter }),
		durationAttr("max_age", func(c *Config) *time.Duration { return &lastGroup(c).Limits.MaxAge }),
		enumAttr("on_expire", onExpireChoices, func(c *Config) *string { return &lastGroup(c).Limits.OnExpire }),
		positiveIntAttr("dead_letter_breaker", func(c *Config) *int { return &lastGroup(c).Limits.DeadLetterBreaker }),
		durationAttr("dead_letter_breaker_window", func(c *Config) *time.Duration { return &lastGroup(c).Limits.DeadLetterBreakerWindow }),
		positiveIntAttr("replicas", func(c *Config) *int { return &lastGroup(c).Replicas }),
		enumAttr("ordering", orderingChoices, func(c *Config) *broker.Ordering { return &lastGroup(c).Dispatch.Ordering }),
		fairByAttr("fair_by", func(c *Config) *string { return &lastGroup(c).Dispatch.FairBy }),
		maxPriorityAttr("max_priority", func(c *Config) *uint8 { return &lastGroup(c).Dispatch.MaxPriority }),
	},
}

// maxPriorityAttr is a group's max_priority: 1 to broker.MaxPriority.
func maxPriorityAttr(name string, field func(*Config) *uint8) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var n int
		p := positiveIntAttr(name, func(*Config) *int { return &n })
		if diags := p.decode(c, name, expr); diags.HasErrors() {
			return diags
		}
		if err := (broker.Dispatch{MaxPriority: uint8(min(n, 255))}).Check(); err != nil {
			return invalid(expr, "Invalid "+name, "%s.", strings.TrimPrefix(err.Error(), broker.ErrInvalidSubscription.Error()+": "))
		}
		*field(c) = uint8(n)
		return nil
	}}
}

var orderingChoices = []choice[broker.Ordering]{
	{"none", broker.OrderingNone},
	{"key", broker.OrderingKey},
	{"group", broker.OrderingGroup},
}

// fairByAttr is a group's fair_by: "key", or "header:<name>" with a valid header name
// (broker.Dispatch.Check).
func fairByAttr(name string, field func(*Config) *string) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, `"key" or "header:<name>"`, expr, &s); diags.HasErrors() {
			return diags
		}
		if err := (broker.Dispatch{FairBy: s}).Check(); err != nil || s == "" {
			return invalid(expr, "Invalid "+name, `%q is not a valid %s; use "key" (take turns across message keys) or "header:<name>" (across that header's values, e.g. "header:tenant"), or leave it out for FIFO.`, s, name)
		}
		*field(c) = s
		return nil
	}}
}

// onExpireChoices: what becomes of a message past its ttl or its group's max_age
// (broker.GroupLimits.OnExpire).
var onExpireChoices = names("dead_letter", "drop")

var overflowChoices = []choice[broker.Overflow]{
	{"reject", broker.OverflowReject},
	{"drop_oldest", broker.OverflowDropOldest},
}

func decodeGroup(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	name := b.Labels[0]
	if diags := declare(&d.cfg.Groups, broker.GroupConfig{Name: name}, func(g broker.GroupConfig) string { return g.Name }, b, "group", "consumer group"); diags != nil {
		return diags
	}
	diags := d.section(b.Body, groupSection, path+"."+name)
	g := lastGroup(&d.cfg)
	if g.ID == "" {
		g.ID = name
	}
	if diags.HasErrors() {
		return diags
	}
	if len(g.Patterns) == 0 {
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing group topics",
			Detail: fmt.Sprintf("group %q needs topics = [\"pattern\", ...]: the topic patterns its members subscribe to.", name), Subject: b.DefRange.Ptr()})
	}
	if err := (*g).Check(); err != nil {
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid group",
			Detail: err.Error() + ".", Subject: b.DefRange.Ptr()})
	}
	for _, other := range d.cfg.Groups[:len(d.cfg.Groups)-1] {
		if other.ID == g.ID {
			return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate subscription_id",
				Detail: fmt.Sprintf("groups %q and %q both use subscription_id %q; each group needs its own.", other.Name, name, g.ID), Subject: b.DefRange.Ptr()})
		}
	}
	return diags
}

// durationListAttr is a redelivery_backoff: a list of 1 to broker.MaxRedeliveryBackoff Go
// duration strings, each greater than zero.
func durationListAttr(name string, field func(*Config) *[]time.Duration) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		tuple, ok := expr.(*hclsyntax.TupleConsExpr)
		if !ok {
			return invalid(expr, "Wrong type for "+name, `%s must be a list of durations, e.g. ["1s", "5s", "30s"].`, name)
		}
		switch n := len(tuple.Exprs); {
		case n == 0:
			return invalid(expr, "Empty "+name, `%s is empty; give at least one delay, e.g. ["1s", "5s", "30s"], or leave it out for the doubling of redelivery_delay_min.`, name)
		case n > broker.MaxRedeliveryBackoff:
			return invalid(expr, "Invalid "+name, "%s has %d entries; the most is %d. Its last entry repeats for every later attempt, so end the list where the delays stop growing.", name, n, broker.MaxRedeliveryBackoff)
		}
		out := make([]time.Duration, len(tuple.Exprs))
		for i, e := range tuple.Exprs {
			var s string
			if diags := decodeString(name, `a list of duration strings such as ["1s", "5s"]`, e, &s); diags.HasErrors() {
				return diags
			}
			v, err := time.ParseDuration(s)
			if err != nil || v <= 0 {
				return invalid(e, "Invalid "+name, `entry %d of %s, %q, is not a Go duration greater than zero; write e.g. "1s" or "1m30s".`, i+1, name, s)
			}
			out[i] = v
		}
		*field(c) = out
		return nil
	}}
}

// jitterAttr is a redelivery_jitter: a fraction from 0 up to (not including) 1. 0 is kept
// as broker.NoJitter, so that a group's own 0 turns off the groups block's jitter.
func jitterAttr(name string, field func(*Config) *float64) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var f big.Float
		if diags := decodeNumber(name, "a fraction from 0 up to 1, such as 0.2", expr, &f); diags.HasErrors() {
			return diags
		}
		v, _ := f.Float64()
		if !(v >= 0 && v < 1) {
			return invalid(expr, "Invalid "+name, "%s must be a fraction from 0 up to (not including) 1, e.g. 0.2 to shorten each back-off by up to 20%%; got %s.", name, show(&f))
		}
		if v == 0 {
			v = broker.NoJitter
		}
		*field(c) = v
		return nil
	}}
}

// stringAttr is a non-empty string; want says what is expected, for errors.
func stringAttr(name, want string, field func(*Config) *string) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, want, expr, &s); diags.HasErrors() {
			return diags
		}
		if s == "" {
			return invalid(expr, "Empty "+name, "%s may not be empty.", name)
		}
		*field(c) = s
		return nil
	}}
}

// sizeAttr is a size in bytes greater than zero: a whole number, or a string with a unit
// such as "512MiB", "2GiB", "64MB" or "1024KiB".
func sizeAttr(name string, field func(*Config) *int64) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		if diags := constant(expr); diags.HasErrors() {
			return diags
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			return diags
		}
		if v.Type() == cty.Number && v.IsKnown() && !v.IsNull() {
			f := v.AsBigFloat()
			if !f.IsInt() || f.Sign() <= 0 || f.Cmp(big.NewFloat(math.MaxInt64)) >= 0 {
				return invalid(expr, "Invalid "+name, "%s must be a whole number of bytes greater than zero, or a string such as \"512MiB\"; got %s.", name, show(f))
			}
			n, _ := f.Int64()
			*field(c) = n
			return nil
		}
		var s string
		if diags := decodeString(name, `a size such as "512MiB" or a number of bytes`, expr, &s); diags.HasErrors() {
			return diags
		}
		n, err := ParseSize(s)
		if err != nil {
			return invalid(expr, "Invalid "+name, "%s: %v.", name, err)
		}
		*field(c) = n
		return nil
	}}
}

// ParseSize parses a size in bytes: a whole number with an optional unit B, KB, MB, GB, TB
// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(num, "%d", &n); err != nil || fmt.Sprint(n) != num || n <= 0 {
		return 0, fmt.Errorf("%q is not a size; write a whole number greater than zero with an optional unit, e.g. \"512MiB\" or \"2GiB\"", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}
