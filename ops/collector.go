package ops

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/latency"
	"github.com/tinybroker/tinybroker/plugins"
)

// collector is tinybroker's prometheus.Collector: at each scrape it reads the counters the
// engine, the server and the plugins keep anyway (Engine.Stats, Server.Traffic and
// Connections, Chain.Metrics) and turns them into metrics. Nothing is counted for
// Prometheus on the path of a message. See RATIONALE.md, "Metrics".
//
// Label values come from bounded sets only: gRPC codes (17), hooks (3), failure kinds (5),
// redelivery reasons (3), plugins (those of the config file), and groups, of which at most
// maxGroups get series of their own (the others are summed under group="_other").
type collector struct {
	src       *sources
	maxGroups int
}

type sources struct {
	engine     broker.Admin
	server     Server
	plugins    func() []plugins.PluginMetrics
	stuckAfter time.Duration // Options.StuckAfter
}

// otherGroups labels the sum of the groups past MaxGroupSeries.
const otherGroups = "_other"

func desc(name, help string, labels ...string) *prometheus.Desc {
	builtinNames["tinybroker_"+name] = true
	return prometheus.NewDesc("tinybroker_"+name, help, labels, nil)
}

// builtinNames are the names of collector's metrics, which no plugin's may take
// (definedCollector).
var builtinNames = map[string]bool{}

var (
	dPublished    = desc("published_messages_total", "Messages accepted by the engine (emitted by plugins and dead letters included).")
	dDelivered    = desc("delivered_messages_total", "Deliveries to subscriptions and group members, redeliveries included.")
	dAcked        = desc("acked_messages_total", "Deliveries acked by group members.")
	dRedelivered  = desc("redelivered_messages_total", "Deliveries that were a second or later attempt.")
	dDeadLettered = desc("dead_lettered_messages_total", "Messages groups gave up on and published to their dead-letter topic.")
	dUnrouted     = desc("unrouted_messages_total", "Published messages that matched no subscription or group.")
	dHookDropped  = desc("plugin_dropped_messages_total", "Published messages a plugin's verdict dropped.")
	dPubBytes     = desc("published_bytes_total", "Payload bytes of the messages published through the gRPC server.")
	dDelivBytes   = desc("delivered_bytes_total", "Payload bytes of the messages sent to subscribers by the gRPC server.")
	dPubRefused   = desc("publish_refusals_total", "Publishes refused (a unary Publish, or one message of a PublishStream frame), by gRPC status code.", "code")
	dSubRefused   = desc("subscribe_refusals_total", "Subscriptions refused when opened, by gRPC status code.", "code")
	dDelayed      = desc("delayed_messages", "Messages published with a delay that the engine holds until they fall due.")
	dDelayedBytes = desc("delayed_bytes", "Bytes of the delayed messages held, against limits { max_delayed_bytes }.")
	dDelayedRef   = desc("delayed_refused_total", "Delayed messages that every target they matched refused when due (full consumer groups).")
	dMemUsed      = desc("memory_used_bytes", "Bytes the engine holds for later, counted against its memory budget.")
	dMemBudget    = desc("memory_budget_bytes", "The engine's memory budget (memory { max_bytes }).")
	dConns        = desc("connections", "Client connections open.")
	dConnsRefused = desc("connections_refused_total", "Client connections refused past limits { max_connections }.")
	dStreams      = desc("streams", "gRPC streams open, by kind (publish: PublishStream, subscribe: Subscribe).", "kind")
	dSubs         = desc("subscriptions", "Subscriptions open, by mode (fanout subscriptions, balanced group members).", "mode")
	dGroups       = desc("groups", "Consumer groups.")
	dFanBuffered  = desc("fanout_buffered_messages", "Messages waiting in fanout subscriptions' buffers, all subscriptions together.")
	dAuthFailed   = desc("auth_failures_total", "Calls refused for their credentials: a wrong token, an unknown user or certificate, a certificate refused in the TLS handshake.")
	dDenials      = desc("permission_denials_total", "Calls and messages refused by a user's rules (PERMISSION_DENIED) or per-user limits.")
	dFanDropped   = desc("fanout_dropped_messages_total", "Messages fanout subscriptions lost as slow consumers (fanout { slow_consumer = \"drop\" }), all together. Counts of closed subscriptions are not kept.")

	dGQueued      = desc("group_queued_messages", "Messages waiting for a member with room.", "group")
	dGInFlight    = desc("group_in_flight_messages", "Messages delivered to members and not yet acked.", "group")
	dGDelayed     = desc("group_delayed_messages", "Messages nacked with a delay, waiting for it to end.", "group")
	dGMembers     = desc("group_members", "Members connected.", "group")
	dGHeld        = desc("group_held_bytes", "Bytes the group holds (its queued, in-flight and delayed messages, as counted against groups { max_queued_bytes }).", "group")
	dGOldest      = desc("group_oldest_queued_age_seconds", "Age of the message at the head of the queue (0: nothing queued).", "group")
	dGPaused      = desc("group_paused", "1 while the group is paused (it hands nothing to its members until resumed).", "group")
	dGStuck       = desc("group_stuck", "1 while the group is stuck: messages queued, members with room, nothing delivered for the stuck_after time (1m), not paused.", "group")
	dGBreaker     = desc("group_breaker_trips_total", "Times the group's dead-letter breaker paused it (groups { dead_letter_breaker }; on JetStream, this node's).", "group")
	dGUnacked     = desc("group_oldest_unacked_age_seconds", "Age of the oldest message the group's members hold unacked (0: none; on JetStream, this node's members').", "group")
	dGPublished   = desc("group_published_messages_total", "Messages the group took (on JetStream: stored through this node).", "group")
	dGDelivered   = desc("group_delivered_messages_total", "Deliveries to members, redeliveries included.", "group")
	dGAcked       = desc("group_acked_messages_total", "Deliveries acked.", "group")
	dGRedeliv     = desc("group_redelivered_messages_total", "Deliveries that were a second or later attempt.", "group")
	dGTakenBack   = desc("group_taken_back_messages_total", "Deliveries taken back from members for another attempt or the dead-letter topic, by reason: nack (nacked by the member), ack_deadline (not acked in time), member_left (held by a member that left).", "group", "reason")
	dGDead        = desc("group_dead_lettered_messages_total", "Messages given up on after max_deliveries attempts, by a plugin, or past their ttl or the group's max_age, published to the dead-letter topic.", "group")
	dGDropped     = desc("group_dropped_messages_total", "Messages dropped: the oldest of a full drop_oldest group, forgotten by a plugin, or expired in a group with on_expire = \"drop\".", "group")
	dGExpired     = desc("group_expired_messages_total", "Messages the group let go of past their ttl or its max_age: dead-lettered with reason expired, or dropped with on_expire = \"drop\" (counted in those too).", "group")
	dGRejected    = desc("group_rejected_messages_total", "Publishes the group refused while full (overflow = \"reject\").", "group")
	dGDLKept      = desc("group_dead_letters_kept_messages", "Dead letters the group keeps now for the admin API (until replayed or purged; bounded by groups { dead_letter_max }).", "group")
	dGDLKeptBytes = desc("group_dead_letters_kept_bytes", "Bytes of the dead letters the group keeps now (bounded by groups { dead_letter_max_bytes }).", "group")
	dGDLDiscarded = desc("group_dead_letters_discarded_messages_total", "Dead letters the group's store let go of, oldest first, to stay within its bounds (still published to the dead-letter topic).", "group")
	dGDelivLat    = desc("group_publish_to_delivery_seconds", "Time from a message's publish to its first delivery to a member (handed to the member's stream).", "group")
	dGAckLat      = desc("group_delivery_to_ack_seconds", "Time from a delivery to its ack, for acks of deliveries the member still held.", "group")
	dGKeys        = desc("group_keys", "Keys the group holds messages of now (with fair_by: tenants), in a group with ordering or fair_by.", "group")
	dGKeyHeld     = desc("group_key_held_messages", "Messages a group holds (queued, in flight, delayed) of each of its busiest keys or tenants, at most 5 per group; noisy is \"true\" while one holds over a tenth of what its group holds (and at least 100), as logged.", "group", "key", "noisy")
	dLabelled     = desc("metrics_labelled_groups", "Consumer groups whose series carry their own group label; the others are summed under group=\"_other\" (http { metrics_max_groups }).")

	// Deprecated names, emitted besides their new ones for one release (README.md, "Metric renames").
	dOldGBytes      = deprecated("group_bytes", "group_held_bytes", "group")
	dOldGDelivered  = deprecated("group_delivered_total", "group_delivered_messages_total", "group")
	dOldGAcked      = deprecated("group_acked_total", "group_acked_messages_total", "group")
	dOldGRedeliv    = deprecated("group_redelivered_total", "group_redelivered_messages_total", "group")
	dOldGTakenBack  = deprecated("group_taken_back_total", "group_taken_back_messages_total", "group", "reason")
	dOldGDead       = deprecated("group_dead_lettered_total", "group_dead_lettered_messages_total", "group")
	dOldGDropped    = deprecated("group_dropped_total", "group_dropped_messages_total", "group")
	dOldGRejected   = deprecated("group_rejected_total", "group_rejected_messages_total", "group")
	dOldGroupSeries = deprecated("group_series_groups", "metrics_labelled_groups")

	dPCalls      = desc("plugin_calls_total", "Calls of a plugin's hook.", "plugin", "hook")
	dPFailures   = desc("plugin_failures_total", "Failed calls of a plugin's hook, by kind: timeout, memory_limit, malformed_verdict, no_instance, trap.", "plugin", "hook", "kind")
	dPSkipped    = desc("plugin_skipped_calls_total", "Calls not made because the plugin's circuit breaker was open (its failure policy applied).", "plugin")
	dPTicks      = desc("plugin_skipped_ticks_total", "Ticks of a plugin's on_tick not run because the tick before was still running at their time.", "plugin")
	dPLogDropped = desc("plugin_log_dropped_total", "Lines a plugin with a log_topic logged that were not published there: over its log_topic_rate, or with the queue full.", "plugin")
	dPBreaker    = desc("plugin_breaker_open", "1 while the plugin's circuit breaker is open.", "plugin")
	dPInstances  = desc("plugin_instances", "Instances of the plugin alive (idle, busy or being created).", "plugin")
	dPLatency    = desc("plugin_call_duration_seconds", "Duration of a sample of a hook's calls: the first and one in 64 after it.", "plugin", "hook")
	dPInfo       = desc("plugin_info", "A constant 1 per version of a plugin loaded: its module's content hash, and version current, or the candidate's mode (shadow, canary).", "plugin", "hash", "version")
	dPCandCalls  = desc("plugin_candidate_calls_total", "Calls of the candidate version of a plugin (shadow or canary).", "plugin", "mode")
	dPCandFails  = desc("plugin_candidate_failures_total", "Failed calls of a plugin's candidate version (a canary's messages sent to it while its circuit breaker was open included).", "plugin", "mode")
	dPCandDiffs  = desc("plugin_candidate_differences_total", "Calls of a plugin's shadow candidate whose result differed from the current version's.", "plugin", "mode")
	dPCandRolled = desc("plugin_candidate_rolled_back", "1 once a plugin's canary has been rolled back for its error rate.", "plugin", "mode")
)

var allDescs = []*prometheus.Desc{dPublished, dDelivered, dAcked, dRedelivered, dDeadLettered, dUnrouted,
	dHookDropped, dPubBytes, dDelivBytes, dPubRefused, dSubRefused, dDelayed, dDelayedBytes, dDelayedRef, dMemUsed, dMemBudget, dConns,
	dConnsRefused, dStreams, dSubs, dGroups, dFanBuffered, dFanDropped, dAuthFailed, dDenials, dGQueued, dGInFlight, dGDelayed,
	dGMembers, dGHeld, dGOldest, dGPaused, dGStuck, dGUnacked, dGBreaker, dGPublished, dGDelivered, dGAcked, dGRedeliv, dGTakenBack, dGDead, dGDropped,
	dGExpired, dGRejected, dGDLKept, dGDLKeptBytes, dGDLDiscarded, dGDelivLat, dGAckLat, dGKeys, dGKeyHeld, dLabelled,
	dOldGBytes, dOldGDelivered, dOldGAcked, dOldGRedeliv, dOldGTakenBack, dOldGDead, dOldGDropped, dOldGRejected, dOldGroupSeries,
	dPCalls, dPFailures, dPSkipped, dPTicks, dPLogDropped, dPBreaker, dPInstances, dPLatency, dPInfo, dPCandCalls, dPCandFails, dPCandDiffs, dPCandRolled}

// deprecated describes the old name of the metric now named renamed.
func deprecated(old, renamed string, labels ...string) *prometheus.Desc {
	return desc(old, "Deprecated, renamed to tinybroker_"+renamed+"; this name goes in the next release.", labels...)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := c.src.engine.Stats()
	counter(dPublished, st.Published)
	counter(dDelivered, st.Delivered)
	counter(dAcked, st.Acked)
	counter(dRedelivered, st.Redelivered)
	counter(dDeadLettered, st.DeadLettered)
	counter(dUnrouted, st.Unrouted)
	counter(dHookDropped, st.Dropped)
	gauge(dDelayed, float64(st.Delayed))
	gauge(dDelayedBytes, float64(st.DelayedBytes))
	counter(dDelayedRef, st.DelayedRefused)
	gauge(dMemUsed, float64(st.MemoryUsed))
	gauge(dMemBudget, float64(st.MemoryBudget))
	gauge(dGroups, float64(len(st.Groups)))

	var buffered int
	var fanDropped uint64
	for _, s := range st.Subscriptions {
		buffered += s.Buffered
		fanDropped += s.Dropped
	}
	gauge(dFanBuffered, float64(buffered))
	counter(dFanDropped, fanDropped)

	members := 0
	now := time.Now().UnixNano()
	var other broker.GroupStats
	var otherOldest int64
	for i, g := range st.Groups {
		members += g.Members
		if i >= c.maxGroups {
			other = addGroup(other, g)
			if g.OldestQueued != 0 && (otherOldest == 0 || g.OldestQueued < otherOldest) {
				otherOldest = g.OldestQueued
			}
			continue
		}
		c.group(ch, g.ID, g, g.OldestQueued, now)
	}
	if len(st.Groups) > c.maxGroups {
		c.group(ch, otherGroups, other, otherOldest, now)
	}
	labelled := float64(min(len(st.Groups), c.maxGroups))
	gauge(dLabelled, labelled)
	gauge(dOldGroupSeries, labelled)
	gauge(dSubs, float64(len(st.Subscriptions)), "fanout")
	gauge(dSubs, float64(members), "balanced")

	if s := c.src.server; s != nil {
		t := s.Traffic()
		counter(dPubBytes, t.PublishedBytes)
		counter(dDelivBytes, t.DeliveredBytes)
		for code := range t.Refused {
			if code == 0 {
				continue
			}
			name := codes.Code(code).String()
			counter(dPubRefused, t.Refused[code], name)
			counter(dSubRefused, t.RefusedSubscriptions[code], name)
		}
		open, refused := s.Connections()
		gauge(dConns, float64(open))
		counter(dConnsRefused, refused)
		gauge(dStreams, float64(t.PublishStreams), "publish")
		gauge(dStreams, float64(t.SubscribeStreams), "subscribe")
		counter(dAuthFailed, t.AuthFailures)
		counter(dDenials, t.Denials)
	}

	if c.src.plugins == nil {
		return
	}
	for _, p := range c.src.plugins() {
		counter(dPSkipped, p.Skipped, p.Name)
		gauge(dPBreaker, b2f(p.BreakerOpen), p.Name)
		gauge(dPInstances, float64(p.Instances), p.Name)
		gauge(dPInfo, 1, p.Name, p.Hash, "current")
		if p.LogTopic != "" {
			counter(dPLogDropped, p.LogDropped, p.Name)
		}
		if cd := p.Candidate; cd != nil {
			mode := cd.Mode.String()
			gauge(dPInfo, 1, p.Name, cd.Hash, mode)
			counter(dPCandCalls, cd.Calls, p.Name, mode)
			counter(dPCandFails, cd.Failures, p.Name, mode)
			counter(dPCandDiffs, cd.Differences, p.Name, mode)
			gauge(dPCandRolled, b2f(cd.RolledBack), p.Name, mode)
		}
		for _, h := range p.Hooks {
			if h.Hook == plugins.HookTick {
				counter(dPTicks, p.TicksSkipped, p.Name)
			}
			counter(dPCalls, h.Calls, p.Name, h.Hook)
			for k, n := range h.Failures {
				counter(dPFailures, n, p.Name, h.Hook, plugins.FailureKinds[k])
			}
			buckets := make(map[float64]uint64, len(h.Buckets))
			for i, n := range h.Buckets {
				buckets[plugins.LatencyBounds[i]] = n
			}
			ch <- prometheus.MustNewConstHistogram(dPLatency, h.Count, h.Sum, buckets, p.Name, h.Hook)
		}
	}
}

func (c *collector) group(ch chan<- prometheus.Metric, label string, g broker.GroupStats, oldest, now int64) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{label}, labels...)...)
	}
	// renamedCounter emits a counter under its new name and its deprecated one.
	renamedCounter := func(d, old *prometheus.Desc, v uint64, labels ...string) {
		counter(d, v, labels...)
		counter(old, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	gauge(dGQueued, float64(g.Queued))
	gauge(dGInFlight, float64(g.InFlight))
	gauge(dGDelayed, float64(g.Delayed))
	gauge(dGMembers, float64(g.Members))
	gauge(dGHeld, float64(g.Bytes))
	gauge(dOldGBytes, float64(g.Bytes))
	gauge(dGOldest, ageSeconds(oldest, now))
	gauge(dGPaused, map[bool]float64{true: 1}[g.Paused])
	gauge(dGStuck, map[bool]float64{true: 1}[g.Stuck(now, c.src.stuckAfter)])
	gauge(dGUnacked, ageSeconds(g.OldestUnacked, now))
	counter(dGBreaker, g.BreakerTrips)
	counter(dGPublished, g.Published)
	renamedCounter(dGDelivered, dOldGDelivered, g.Delivered)
	renamedCounter(dGAcked, dOldGAcked, g.Acked)
	renamedCounter(dGRedeliv, dOldGRedeliv, g.Redelivered)
	renamedCounter(dGTakenBack, dOldGTakenBack, g.Nacked, "nack")
	renamedCounter(dGTakenBack, dOldGTakenBack, g.TimedOut, "ack_deadline")
	renamedCounter(dGTakenBack, dOldGTakenBack, g.LeftBehind, "member_left")
	renamedCounter(dGDead, dOldGDead, g.DeadLettered)
	renamedCounter(dGDropped, dOldGDropped, g.Dropped)
	renamedCounter(dGRejected, dOldGRejected, g.Rejected)
	counter(dGExpired, g.Expired)
	gauge(dGDLKept, float64(g.DeadLetters))
	gauge(dGDLKeptBytes, float64(g.DeadLetterBytes))
	counter(dGDLDiscarded, g.DeadLettersDropped)
	ch <- latencyHistogram(dGDelivLat, &g.DeliveryLatency, label)
	ch <- latencyHistogram(dGAckLat, &g.AckLatency, label)
	if g.Keys > 0 || len(g.Busiest) > 0 {
		gauge(dGKeys, float64(g.Keys))
	}
	for _, k := range g.Busiest { // bounded: 5 per group (grouping.BusiestKeys) (none for "_other")
		ch <- prometheus.MustNewConstMetric(dGKeyHeld, prometheus.GaugeValue, float64(k.Held), label, k.Key, strconv.FormatBool(k.Noisy))
	}
}

// latencyHistogram turns an engine's Latency into a histogram of seconds.
func latencyHistogram(d *prometheus.Desc, l *latency.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, latency.NumBounds)
	var n uint64
	for i, b := range latency.Bounds {
		n += l.Counts[i]
		buckets[b.Seconds()] = n
	}
	n += l.Counts[latency.NumBounds]
	return prometheus.MustNewConstHistogram(d, n, l.Sum, buckets, labels...)
}

// addGroup sums b's counts into a.
func addGroup(a, b broker.GroupStats) broker.GroupStats {
	a.Queued += b.Queued
	a.InFlight += b.InFlight
	a.Delayed += b.Delayed
	a.Members += b.Members
	a.Bytes += b.Bytes
	a.Delivered += b.Delivered
	a.Acked += b.Acked
	a.Redelivered += b.Redelivered
	a.Nacked += b.Nacked
	a.TimedOut += b.TimedOut
	a.LeftBehind += b.LeftBehind
	a.DeadLettered += b.DeadLettered
	a.Dropped += b.Dropped
	a.Rejected += b.Rejected
	a.Expired += b.Expired
	a.Published += b.Published
	a.DeadLetters += b.DeadLetters
	a.DeadLetterBytes += b.DeadLetterBytes
	a.DeadLettersDropped += b.DeadLettersDropped
	a.DeliveryLatency.Add(&b.DeliveryLatency)
	a.AckLatency.Add(&b.AckLatency)
	a.Keys += b.Keys // b.Busiest is not summed: its labels are b's keys
	return a
}

func ageSeconds(at, now int64) float64 {
	if at == 0 || now < at {
		return 0
	}
	return float64(now-at) / 1e9
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// buildInfo is tinybroker_build_info, a constant 1 labelled with the binary's version.
func buildInfo(version, revision, goVersion string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tinybroker_build_info",
		Help:        "A constant 1, labelled with the version and revision of tinybroker and the version of Go it was built with.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion}}, func() float64 { return 1 })
}
