package config

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
)

// The file's structure. To add a setting, add a line to its section; to add a block type,
// add a blockType to the section it may appear in (see sectionBlock for the simple case of
// a block holding more settings).

var rootSection = section{
	attrs: []attribute{
		listenAttr("listen", func(c *Config) *string { return &c.Listen }),
		enumAttr("log_level", names("trace", "debug", "info", "warn", "error"), func(c *Config) *string { return &c.LogLevel }),
		enumAttr("log_format", names("text", "json"), func(c *Config) *string { return &c.LogFormat }),
		durationAttr("shutdown_grace", func(c *Config) *time.Duration { return &c.ShutdownGrace }),
		durationAttr("keepalive_time", func(c *Config) *time.Duration { return &c.KeepaliveTime }),
		durationAttr("keepalive_timeout", func(c *Config) *time.Duration { return &c.KeepaliveTimeout }),
		positiveIntAttr("max_message_bytes", func(c *Config) *int { return &c.Broker.MaxMessageBytes }),
		positiveIntAttr("max_header_bytes", func(c *Config) *int { return &c.Broker.MaxHeaderBytes }),
		positiveIntAttr("max_headers", func(c *Config) *int { return &c.Broker.MaxHeaders }),
		pathAttr("plugin_cache_dir", func(c *Config) *string { return &c.PluginCacheDir }),
		boolAttr("insecure", func(c *Config) *bool { return &c.Insecure }),
	},
	blocks: []blockType{
		{name: "memory", decode: sectionBlock(memorySection)},
		{name: "groups", decode: sectionBlock(groupsSection)},
		{name: "group", labels: []string{"name"}, multiple: true, decode: decodeGroup},
		{name: "fanout", decode: sectionBlock(fanoutSection)},
		{name: "limits", decode: sectionBlock(limitsSection)},
		{name: "plugin", labels: []string{"name"}, multiple: true, decode: decodePlugin},
		{name: "http", decode: decodeHTTP},
		{name: "tls", decode: decodeTLS},
		{name: "user", labels: []string{"name"}, multiple: true, decode: decodeUser},
		{name: "engine", labels: []string{"kind"}, decode: decodeEngine},
	},
}

var groupsSection = section{
	attrs: []attribute{
		positiveIntAttr("max_queued", func(c *Config) *int { return &c.Broker.GroupMaxQueued }),
		sizeAttr("max_queued_bytes", func(c *Config) *int64 { return &c.Broker.GroupMaxQueuedBytes }),
		enumAttr("overflow", overflowChoices, func(c *Config) *broker.Overflow { return &c.Broker.GroupOverflow }),
		durationAttr("ack_deadline", func(c *Config) *time.Duration { return &c.Broker.AckDeadline }),
		durationAttr("max_ack_deadline", func(c *Config) *time.Duration { return &c.Broker.MaxAckDeadline }),
		positiveIntAttr("max_in_flight_cap", func(c *Config) *int { return &c.Broker.MaxInFlightCap }),
		timeoutAttr("expire_after", 0, func(c *Config) *time.Duration { return &c.Broker.GroupExpireAfter }),
		positiveIntAttr("dead_letters_max", func(c *Config) *int { return &c.Broker.GroupDeadLetterMax }),
		sizeAttr("dead_letters_max_bytes", func(c *Config) *int64 { return &c.Broker.GroupDeadLetterMaxBytes }),
		positiveIntAttr("max_deliveries_cap", func(c *Config) *int { return &c.Broker.MaxDeliveriesCap }),
		timeoutAttr("redelivery_delay_min", -1, func(c *Config) *time.Duration { return &c.Broker.GroupRedeliveryDelayMin }),
		durationAttr("redelivery_delay_max", func(c *Config) *time.Duration { return &c.Broker.GroupRedeliveryDelayMax }),
		durationListAttr("redelivery_backoff", func(c *Config) *[]time.Duration { return &c.Broker.GroupRedeliveryBackoff }),
		jitterAttr("redelivery_jitter", func(c *Config) *float64 { return &c.Broker.GroupRedeliveryJitter }),
		durationAttr("max_age", func(c *Config) *time.Duration { return &c.Broker.GroupMaxAge }),
		enumAttr("on_expire", onExpireChoices, func(c *Config) *string { return &c.Broker.GroupOnExpire }),
		positiveIntAttr("dead_letter_breaker", func(c *Config) *int { return &c.Broker.GroupDeadLetterBreaker }),
		durationAttr("dead_letter_breaker_window", func(c *Config) *time.Duration { return &c.Broker.GroupDeadLetterBreakerWindow }),
	},
}

var memorySection = section{
	attrs: []attribute{
		sizeAttr("max_bytes", func(c *Config) *int64 { return &c.Broker.MaxMemoryBytes }),
		pathAttr("state_dir", func(c *Config) *string { return &c.StateDir }),
	},
}

var fanoutSection = section{
	attrs: []attribute{
		positiveIntAttr("buffer_messages", func(c *Config) *int { return &c.Broker.FanoutBufferMessages }),
		positiveIntAttr("buffer_bytes", func(c *Config) *int { return &c.Broker.FanoutBufferBytes }),
		timeoutAttr("publisher_wait", -1, func(c *Config) *time.Duration { return &c.Broker.PublisherWait }),
		enumAttr("slow_consumer", []choice[memory.SlowConsumerPolicy]{
			{"disconnect", memory.SlowConsumerDisconnect},
			{"drop", memory.SlowConsumerDrop},
		}, func(c *Config) *memory.SlowConsumerPolicy { return &c.Broker.SlowConsumer }),
	},
}

var limitsSection = section{
	attrs: []attribute{
		positiveIntAttr("max_connections", func(c *Config) *int { return &c.Limits.MaxConnections }),
		positiveIntAttr("max_streams_per_connection", func(c *Config) *int { return &c.Limits.MaxStreamsPerConnection }),
		durationAttr("handshake_timeout", func(c *Config) *time.Duration { return &c.Limits.HandshakeTimeout }),
		positiveIntAttr("max_publish_batch", func(c *Config) *int { return &c.Limits.MaxPublishBatch }),
		positiveIntAttr("max_subscriptions_per_stream", func(c *Config) *int { return &c.Broker.MaxSubscriptionsPerStream }),
		positiveIntAttr("max_patterns_per_subscription", func(c *Config) *int { return &c.Broker.MaxPatternsPerSubscription }),
		positiveIntAttr("max_groups", func(c *Config) *int { return &c.Broker.MaxGroups }),
		positiveIntAttr("max_plugin_bytes", func(c *Config) *int { return &c.Limits.MaxPluginBytes }),
		durationAttr("dedupe_window", func(c *Config) *time.Duration { return &c.Broker.DedupeWindow }),
		sizeAttr("dedupe_max_bytes", func(c *Config) *int64 { return &c.Broker.DedupeMaxBytes }),
		durationAttr("max_delay", func(c *Config) *time.Duration { return &c.Broker.MaxDelay }),
		positiveIntAttr("max_delayed", func(c *Config) *int { return &c.Broker.MaxDelayed }),
		sizeAttr("max_delayed_bytes", func(c *Config) *int64 { return &c.Broker.MaxDelayedBytes }),
	},
}

// minDedupeWindow is the smallest dedupe_window: JetStream's smallest duplicate window.
const minDedupeWindow = 100 * time.Millisecond

// check reports problems that involve more than one setting, once every setting is decoded.
func (d *decoder) check() hcl.Diagnostics {
	var diags hcl.Diagnostics
	if o := d.cfg.Broker; o.FanoutBufferBytes < o.MaxMessageBytes {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Fanout buffer smaller than a message",
			Detail: fmt.Sprintf("fanout buffer_bytes (%d) is less than max_message_bytes (%d), so a subscriber would be cut off by any message larger than its buffer; raise buffer_bytes or lower max_message_bytes.",
				o.FanoutBufferBytes, o.MaxMessageBytes),
			Subject: d.rangeOf("fanout.buffer_bytes", "max_message_bytes"),
		})
	}
	if n := d.cfg.Limits.MaxStreamsPerConnection; uint64(n) > math.MaxUint32 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid max_streams_per_connection",
			Detail:   fmt.Sprintf("max_streams_per_connection is %d; HTTP/2 allows at most %d.", n, uint32(math.MaxUint32)),
			Subject:  d.rangeOf("limits.max_streams_per_connection"),
		})
	}
	if w := d.cfg.Broker.DedupeWindow; w > 0 && w < minDedupeWindow {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid dedupe_window",
			Detail:   fmt.Sprintf("dedupe_window is %v; the smallest is %v (JetStream's smallest duplicate window). A retry comes later than that: give it minutes, as the default 2m does.", w, minDedupeWindow),
			Subject:  d.rangeOf("limits.dedupe_window"),
		})
	}
	diags = append(diags, d.checkHTTP()...)
	diags = append(diags, d.checkRedelivery()...)
	diags = append(diags, d.checkGroupReplicas()...)
	return diags
}

// checkGroupReplicas holds a declared group's replicas to what its engine can keep: one copy
// on the memory engine, 1 to 5 on JetStream, and no more than a cluster (or one embedded
// node without one) has nodes for.
func (d *decoder) checkGroupReplicas() hcl.Diagnostics {
	var diags hcl.Diagnostics
	j := d.cfg.JetStream
	for _, g := range d.cfg.Groups {
		path := "group." + g.Name + ".replicas"
		var detail string
		switch {
		case g.Replicas <= 1:
			continue
		case d.cfg.Engine != EngineJetStream:
			detail = fmt.Sprintf("group %q: replicas = %d, but the memory engine keeps one copy of a message, in this process; use engine \"jetstream\" in a cluster for more copies, or drop replicas.", g.Name, g.Replicas)
		case g.Replicas > 5:
			detail = fmt.Sprintf("group %q: replicas = %d; JetStream keeps 1 to 5 copies (3 survives the loss of a node).", g.Name, g.Replicas)
		case j.URL == "" && j.ClusterListen == "":
			detail = fmt.Sprintf("group %q: replicas = %d needs a cluster of at least %d nodes: add a cluster block to engine \"jetstream\", or drop replicas.", g.Name, g.Replicas, g.Replicas)
		default:
			continue
		}
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid group replicas", Detail: detail, Subject: d.rangeOf(path)})
	}
	return diags
}

// checkRedelivery holds every declared group's max_deliveries to groups { max_deliveries_cap }
// (which may come later in the file), each redelivery back-off's max to its min, and a
// redelivery_backoff list apart from a min and max of the same block.
func (d *decoder) checkRedelivery() hcl.Diagnostics {
	var diags hcl.Diagnostics
	o := d.cfg.Broker
	backoff := func(l broker.GroupLimits, path string) {
		if l.RedeliveryDelayMin > 0 && l.RedeliveryDelayMax > 0 && l.RedeliveryDelayMax < l.RedeliveryDelayMin {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid redelivery_delay_max",
				Detail:  fmt.Sprintf("redelivery_delay_max (%v) is under redelivery_delay_min (%v): the back-off starts at the min and doubles up to the max; raise the max or lower the min.", l.RedeliveryDelayMax, l.RedeliveryDelayMin),
				Subject: d.rangeOf(path+".redelivery_delay_max", path+".redelivery_delay_min")})
		}
	}
	list := func(path string) { // by what the file sets: the groups block starts with the defaults
		if d.rangeOf(path+".redelivery_backoff") != nil && d.rangeOf(path+".redelivery_delay_min", path+".redelivery_delay_max") != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Conflicting redelivery settings",
				Detail:  "redelivery_backoff replaces the doubling of redelivery_delay_min up to redelivery_delay_max; set the list, or the min and max, not both.",
				Subject: d.rangeOf(path + ".redelivery_backoff")})
		}
	}
	list("groups")
	def := o.WithGroupDefaults(1, 1).GroupLimits()
	backoff(def, "groups")
	cap := broker.Limits{MaxDeliveriesCap: o.MaxDeliveriesCap}.WithDefaults().MaxDeliveriesCap
	for _, g := range d.cfg.Groups {
		path := "group." + g.Name
		if g.MaxDeliveries > cap {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid max_deliveries",
				Detail:  fmt.Sprintf("group %q: max_deliveries %d is over the limit of %d (groups { max_deliveries_cap }); set at most %d, leave it out for no limit, or raise max_deliveries_cap.", g.Name, g.MaxDeliveries, cap, cap),
				Subject: d.rangeOf(path + ".max_deliveries")})
		}
		if g.Limits.RedeliveryDelayMin != 0 || g.Limits.RedeliveryDelayMax != 0 {
			backoff(g.Limits.Or(def), path)
		}
		list(path)
	}
	return diags
}
