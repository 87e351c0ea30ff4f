package broker

import (
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"
)

// Limits are the rules on what a client may send and make an engine hold that do not depend
// on the engine: every engine checks messages and subscriptions with them, as do the plugin
// test harness and the configuration. Zero values take the defaults (WithDefaults).
type Limits struct {
	MaxMessageBytes int // largest payload accepted
	MaxHeaderBytes  int // largest sum of header keys and values
	// MaxHeaders bounds how many headers a message has: every header costs a map entry to
	// hold and a field to encode for each subscriber, so tens of thousands of tiny headers
	// within MaxHeaderBytes made one message cost milliseconds of CPU.
	MaxHeaders int

	AckDeadline time.Duration // default ack deadline of balanced subscriptions
	// MaxAckDeadline is the longest ack_deadline a member may ask for (12h, as SQS's longest
	// visibility timeout; never under AckDeadline): a member that needs longer touches its
	// messages. On JetStream the group's consumer waits the longest member deadline before
	// it redelivers what a crashed node held, for every member of the group.
	MaxAckDeadline time.Duration
	MaxInFlightCap int // largest max_in_flight a member may ask for
	// MaxDeliveriesCap is the largest max_deliveries a group may have (0, unlimited, is
	// always allowed): a larger one is a mistake for "unlimited", or a poison message kept
	// in circulation for days.
	MaxDeliveriesCap int

	// What one client can make an engine hold (see RATIONALE.md, "Limits").
	MaxSubscriptionsPerStream  int // subscriptions one stream carries at once
	MaxPatternsPerSubscription int // topic_patterns of one subscription
	MaxGroups                  int // consumer groups in all

	// Idempotent publishing (Draft.ID): a message id is remembered for DedupeWindow after
	// its first publish (2m, as JetStream's duplicate window), in a table of at most
	// DedupeMaxBytes (the engine's default: 64 MiB, on the memory engine at most 1/16 of its
	// memory budget);
	// past it the oldest half of the ids is forgotten early, never a publish refused. See RATIONALE.md,
	// "Why does the broker deduplicate message ids itself, and before the plugins?".
	DedupeWindow   time.Duration
	DedupeMaxBytes int64

	// Delayed publish (Draft.DeliverAfter, DeliverAt): a message may be delayed by at most
	// MaxDelay (24h); an engine holds at most MaxDelayed messages (1,000,000) of at most
	// MaxDelayedBytes (the engine's default: on the memory engine 1/8 of its memory budget)
	// for later, and refuses more (ErrLimit) until some fall due. See RATIONALE.md, "Why is
	// a delayed message published at its time?".
	MaxDelay        time.Duration
	MaxDelayed      int
	MaxDelayedBytes int64

	// What a consumer group has when it does not set its own (the configuration's
	// groups { ... }), for every engine: the configuration hands one Limits to whichever
	// engine runs. Zero values take the engine's defaults (WithGroupDefaults: the memory
	// engine's byte bounds follow its memory budget).
	GroupMaxQueued      int      // messages a group holds for its members (100,000)
	GroupMaxQueuedBytes int64    // bytes a group holds: queued, in flight and delayed, by MessageCost
	GroupOverflow       Overflow // what a full group does with a publish (OverflowReject)
	// GroupDeadLetterMax and GroupDeadLetterMaxBytes bound the dead letters one group keeps
	// for the admin API (10,000; 64 MiB).
	GroupDeadLetterMax      int
	GroupDeadLetterMaxBytes int64
	// GroupExpireAfter removes a group (not a declared one) that has had no member this
	// long, with the messages it holds (0: groups live as long as the broker). A group
	// abandoned for good otherwise fills up, and with OverflowReject then refuses every
	// publish to its topics.
	GroupExpireAfter time.Duration
	// GroupRedeliveryDelayMin and GroupRedeliveryDelayMax are the redelivery back-off
	// (100ms doubling up to 10s); a negative min turns it off.
	GroupRedeliveryDelayMin time.Duration
	GroupRedeliveryDelayMax time.Duration
	// GroupRedeliveryBackoff and GroupRedeliveryJitter: GroupLimits.RedeliveryBackoff and
	// RedeliveryJitter (none: the doubling above, no jitter).
	GroupRedeliveryBackoff []time.Duration
	GroupRedeliveryJitter  float64
	// GroupMaxAge and GroupOnExpire: GroupLimits.MaxAge and OnExpire (none; "dead_letter").
	GroupMaxAge   time.Duration
	GroupOnExpire string
	// GroupDeadLetterBreaker and GroupDeadLetterBreakerWindow: GroupLimits' (off; 1m).
	GroupDeadLetterBreaker       int
	GroupDeadLetterBreakerWindow time.Duration
}

// GroupLimits returns the group limits of l, for GroupLimits.Or.
func (d Limits) GroupLimits() GroupLimits {
	return GroupLimits{MaxQueued: d.GroupMaxQueued, MaxQueuedBytes: d.GroupMaxQueuedBytes, Overflow: d.GroupOverflow,
		DeadLetterMax: d.GroupDeadLetterMax, DeadLetterMaxBytes: d.GroupDeadLetterMaxBytes,
		RedeliveryDelayMin: d.GroupRedeliveryDelayMin, RedeliveryDelayMax: d.GroupRedeliveryDelayMax,
		RedeliveryBackoff: d.GroupRedeliveryBackoff, RedeliveryJitter: d.GroupRedeliveryJitter,
		MaxAge: d.GroupMaxAge, OnExpire: d.GroupOnExpire,
		DeadLetterBreaker: d.GroupDeadLetterBreaker, DeadLetterBreakerWindow: d.GroupDeadLetterBreakerWindow}
}

// WithGroupDefaults returns l with every zero value of its Group fields replaced by its
// default, the byte bounds by the engine's: maxQueuedBytes and deadLetterMaxBytes.
func (d Limits) WithGroupDefaults(maxQueuedBytes, deadLetterMaxBytes int64) Limits {
	if d.GroupMaxQueued <= 0 {
		d.GroupMaxQueued = 100_000
	}
	if d.GroupMaxQueuedBytes <= 0 {
		d.GroupMaxQueuedBytes = maxQueuedBytes
	}
	if d.GroupOverflow == 0 {
		d.GroupOverflow = OverflowReject
	}
	if d.GroupDeadLetterMax <= 0 {
		d.GroupDeadLetterMax = 10_000
	}
	if d.GroupDeadLetterMaxBytes <= 0 {
		d.GroupDeadLetterMaxBytes = deadLetterMaxBytes
	}
	// The redelivery back-off: a message taken back from a member for another attempt
	// waits at least min × 2^(attempt-1), at most max, before it is redelivered. See
	// RATIONALE.md, "Why is there a floor on redelivery?".
	if d.GroupRedeliveryDelayMin == 0 {
		d.GroupRedeliveryDelayMin = 100 * time.Millisecond
	}
	if d.GroupRedeliveryDelayMax <= 0 {
		d.GroupRedeliveryDelayMax = 10 * time.Second
	}
	return d
}

// WithDefaults returns l with every zero value replaced by its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxMessageBytes, 1<<20)
	def(&l.MaxHeaderBytes, 64<<10)
	def(&l.MaxHeaders, 1_024)
	def(&l.MaxInFlightCap, 65_536)
	def(&l.MaxSubscriptionsPerStream, 65_536)
	def(&l.MaxPatternsPerSubscription, 1_024)
	def(&l.MaxGroups, 10_000)
	def(&l.MaxDeliveriesCap, 1_000)
	if l.AckDeadline <= 0 {
		l.AckDeadline = 30 * time.Second
	}
	if l.MaxAckDeadline <= 0 {
		l.MaxAckDeadline = 12 * time.Hour
	}
	l.MaxAckDeadline = max(l.MaxAckDeadline, l.AckDeadline)
	if l.DedupeWindow <= 0 {
		l.DedupeWindow = 2 * time.Minute
	}
	if l.MaxDelay <= 0 {
		l.MaxDelay = 24 * time.Hour
	}
	def(&l.MaxDelayed, 1_000_000)
	return l
}

// CheckPayload checks a payload's size; after is set once the plugins have run (the error
// then says so).
func (l Limits) CheckPayload(n int, after bool) error {
	if n <= l.MaxMessageBytes {
		return nil
	}
	if after {
		return fmt.Errorf("%w: after the plugins ran, the payload has %d bytes; the limit is %d", ErrInvalidMessage, n, l.MaxMessageBytes)
	}
	return fmt.Errorf("%w: payload is %d bytes, the limit is %d (max_message_bytes); split the message or raise the limit", ErrInvalidMessage, n, l.MaxMessageBytes)
}

// The header grammar, the same on every engine (README.md, "Headers"): a header's name is
// any non-empty string of valid UTF-8, its value any string of valid UTF-8 (empty included);
// names are case-sensitive and each occurs once in a message; a message has at most
// max_headers of them, their names and values at most max_header_bytes together. Nothing
// else is refused: an engine whose store has a narrower grammar carries every valid header
// anyway (the JetStream engine, RATIONALE.md, "Why may a header be any UTF-8?").

// Check checks one header against the grammar, whatever the limits: the publish path
// (CheckHeaders) and the plugins' host functions, as a plugin writes a header, call it. The
// error wraps ErrInvalidMessage and names the header and the rule it breaks.
func (h Header) Check() error {
	key, value := h.Key, h.Value
	switch {
	case key == "":
		return fmt.Errorf("%w: a header has an empty name (value %.40q); give every header a name", ErrInvalidMessage, value)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: header name %q is not valid UTF-8; header names and values are text", ErrInvalidMessage, key)
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: the value of header %q is not valid UTF-8; header values are text: put bytes in the payload, or encode them (base64)", ErrInvalidMessage, key)
	}
	return nil
}

// TooManyHeaders is the refusal of a message with more than l.MaxHeaders headers (max_headers).
func (l Limits) TooManyHeaders() error {
	max := l.MaxHeaders
	return fmt.Errorf("%w: the message has more than %d headers, the limit (max_headers); put the data in the payload or in fewer headers", ErrInvalidMessage, max)
}

// CheckHeaders checks a message's headers in one pass — how many, sorted with each key once
// (as Headers must be), each by Header.Check, how many bytes — and returns the sum of their
// keys' and values' lengths (Message.HeaderBytes).
func (l Limits) CheckHeaders(h Headers) (headerBytes int, err error) {
	if len(h) > l.MaxHeaders {
		return 0, l.TooManyHeaders()
	}
	for i, x := range h {
		if i > 0 && h[i-1].Key >= x.Key {
			return 0, fmt.Errorf("%w: headers %q and %q are out of order or the same: Headers are sorted by key, each key once (Headers.Sorted)", ErrInvalidMessage, h[i-1].Key, x.Key)
		}
		if err := x.Check(); err != nil {
			return 0, err
		}
		headerBytes += len(x.Key) + len(x.Value)
	}
	if headerBytes > l.MaxHeaderBytes {
		return 0, fmt.Errorf("%w: headers take %d bytes, the limit is %d (max_header_bytes)", ErrInvalidMessage, headerBytes, l.MaxHeaderBytes)
	}
	return headerBytes, nil
}

// CheckMessage checks a message as published, before the plugins see it: its topic, payload
// and headers. It returns the headers' size.
func (l Limits) CheckMessage(topic string, payload []byte, headers Headers) (headerBytes int, err error) {
	if err := ValidateTopic(topic); err != nil {
		return 0, err
	}
	if err := l.CheckPayload(len(payload), false); err != nil {
		return 0, err
	}
	return l.CheckHeaders(headers)
}

// AdmitSubscribe is the first step of every engine's subscribe: refuse while the engine is
// closing, then CheckSubscribe.
func (l Limits) AdmitSubscribe(closing bool, o *SubscribeOptions) ([]string, error) {
	if closing {
		return nil, fmt.Errorf("%w: not accepting subscriptions", ErrShuttingDown)
	}
	return l.CheckSubscribe(o)
}

// CheckSubscribe validates o, fills in its defaults and returns its patterns sorted and
// deduplicated.
func (l Limits) CheckSubscribe(o *SubscribeOptions) ([]string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSubscription, fmt.Sprintf(format, args...))
	}
	if o.Mode != Fanout && o.Mode != Balanced {
		return nil, bad("mode must be DELIVERY_MODE_FANOUT or DELIVERY_MODE_BALANCED")
	}
	if o.Mode == Balanced && o.ID == "" {
		o.ID = o.Group
	}
	if err := checkName("subscription_id", o.ID, o.Mode == Fanout); err != nil {
		return nil, err
	}
	if len(o.Patterns) == 0 {
		return nil, bad("topic_patterns is empty; give at least one, e.g. \"jobs.>\"")
	}
	if n := len(o.Patterns); n > l.MaxPatternsPerSubscription {
		return nil, bad("%d topic_patterns; the limit is %d per subscription (limits { max_patterns_per_subscription }); use wildcards such as \"jobs.*\" or spread them over several subscriptions", n, l.MaxPatternsPerSubscription)
	}
	patterns := slices.Clone(o.Patterns)
	for _, p := range patterns {
		if err := Pattern(p).Validate(); err != nil {
			return nil, err
		}
	}
	slices.Sort(patterns)
	patterns = slices.Compact(patterns)
	if o.Mode == Fanout {
		if o.Group != "" {
			return nil, bad("consumer_group %q is only for DELIVERY_MODE_BALANCED; drop it for fanout or switch the mode", o.Group)
		}
		if o.MaxInFlight != 0 || o.AckDeadline != 0 || o.MaxDeliveries != 0 || o.DeadLetterTopic != "" {
			return nil, bad("max_in_flight, ack_deadline, max_deliveries and dead_letter_topic are for DELIVERY_MODE_BALANCED; fanout deliveries are not acked")
		}
		if o.Dispatch != (Dispatch{}) || o.Priority != 0 {
			return nil, bad("ordering, fair_by, max_priority and priority are for DELIVERY_MODE_BALANCED; a fanout subscription gets every message in publish order already")
		}
		return patterns, nil
	}
	if o.Group == "" {
		return nil, bad("DELIVERY_MODE_BALANCED needs a consumer_group: members that share it share the messages")
	}
	if err := checkName("consumer_group", o.Group, false); err != nil {
		return nil, err
	}
	switch {
	case o.MaxInFlight < 0 || o.MaxInFlight > l.MaxInFlightCap:
		return nil, bad("max_in_flight %d is out of range 1..%d", o.MaxInFlight, l.MaxInFlightCap)
	case o.MaxInFlight == 0:
		o.MaxInFlight = 1
	}
	switch {
	case o.AckDeadline < 0:
		return nil, bad("ack_deadline %v is negative", o.AckDeadline)
	case o.AckDeadline == 0:
		o.AckDeadline = l.AckDeadline
	case o.AckDeadline < time.Millisecond:
		return nil, bad("ack_deadline %v is under the 1ms minimum", o.AckDeadline)
	case o.AckDeadline > l.MaxAckDeadline:
		return nil, bad("ack_deadline %v is over the limit of %v (groups { max_ack_deadline }); set at most %v, and touch a message that needs longer", o.AckDeadline, l.MaxAckDeadline, l.MaxAckDeadline)
	}
	switch {
	case o.MaxDeliveries < 0:
		return nil, bad("max_deliveries %d is negative; 0 means unlimited", o.MaxDeliveries)
	case o.MaxDeliveries > l.MaxDeliveriesCap:
		return nil, bad("max_deliveries %d is over the limit of %d (groups { max_deliveries_cap }); set at most %d, or 0 for no limit (redeliveries back off up to groups { redelivery_delay_max } each)",
			o.MaxDeliveries, l.MaxDeliveriesCap, l.MaxDeliveriesCap)
	}
	if o.DeadLetterTopic != "" {
		if err := ValidateTopic(o.DeadLetterTopic); err != nil {
			return nil, bad("dead_letter_topic: %v", err)
		}
	}
	if o.Priority > maxPriority {
		return nil, bad("priority %d: a member's priority is 0 (the default) to %d, higher first", o.Priority, maxPriority)
	}
	if err := o.Dispatch.Check(); err != nil {
		return nil, err
	}
	return patterns, nil
}

// Check validates a group declaration without creating it. Its max_deliveries
// is not held to a cap here: the configuration checks it against its own
// max_deliveries_cap, and the engine against its.
func (gc GroupConfig) Check() error {
	o := gc.SubscribeOptions()
	l := Limits{MaxDeliveriesCap: math.MaxInt}.WithDefaults()
	_, err := l.CheckSubscribe(&o)
	if err == nil {
		err = gc.Limits.CheckRedelivery()
	}
	if err == nil {
		err = gc.Limits.CheckExpiry()
	}
	if err == nil {
		err = gc.Limits.CheckBreaker()
	}
	return err
}

// checkName validates a subscription_id or consumer_group: letters, digits, '-', '_', '.'.
func checkName(field, v string, optional bool) error {
	if v == "" {
		if optional {
			return nil
		}
		return fmt.Errorf("%w: %s is empty", ErrInvalidSubscription, field)
	}
	if len(v) > 128 {
		return fmt.Errorf("%w: %s is %d bytes long; the limit is 128", ErrInvalidSubscription, field, len(v))
	}
	for _, c := range []byte(v) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: %s %q has %q; use letters, digits, '-', '_' and '.'", ErrInvalidSubscription, field, v, c)
		}
	}
	if v[0] == '.' || v[len(v)-1] == '.' {
		return fmt.Errorf("%w: %s %q may not start or end with '.'", ErrInvalidSubscription, field, v)
	}
	return nil
}

// Or returns l with each zero (or default) value taken from d: a group's own limits, then
// the engine's.
func (l GroupLimits) Or(d GroupLimits) GroupLimits {
	if l.MaxQueued <= 0 {
		l.MaxQueued = d.MaxQueued
	}
	if l.MaxQueuedBytes <= 0 {
		l.MaxQueuedBytes = d.MaxQueuedBytes
	}
	if l.Overflow == 0 {
		l.Overflow = d.Overflow
	}
	if l.DeadLetterMax <= 0 {
		l.DeadLetterMax = d.DeadLetterMax
	}
	if l.DeadLetterMaxBytes <= 0 {
		l.DeadLetterMaxBytes = d.DeadLetterMaxBytes
	}
	if l.RedeliveryDelayMin == 0 && l.RedeliveryDelayMax == 0 && l.RedeliveryBackoff == nil {
		l.RedeliveryBackoff = d.RedeliveryBackoff // the group has no shape of its own
	}
	if l.RedeliveryDelayMin == 0 {
		l.RedeliveryDelayMin = d.RedeliveryDelayMin
	}
	if l.RedeliveryDelayMax <= 0 {
		l.RedeliveryDelayMax = d.RedeliveryDelayMax
	}
	if l.RedeliveryJitter == 0 {
		l.RedeliveryJitter = d.RedeliveryJitter
	}
	if l.MaxAge <= 0 {
		l.MaxAge = d.MaxAge
	}
	if l.OnExpire == "" {
		l.OnExpire = d.OnExpire
	}
	if l.DeadLetterBreaker <= 0 {
		l.DeadLetterBreaker = d.DeadLetterBreaker
	}
	l.DeadLetterBreaker = min(l.DeadLetterBreaker, maxDeadLetterBreaker)
	if l.DeadLetterBreakerWindow <= 0 {
		l.DeadLetterBreakerWindow = d.DeadLetterBreakerWindow
	}
	if l.DeadLetterBreakerWindow <= 0 {
		l.DeadLetterBreakerWindow = time.Minute
	}
	return l
}

// DropExpired reports whether the group drops expired messages instead of dead-lettering
// them.
func (l GroupLimits) DropExpired() bool { return l.OnExpire == "drop" }

// CheckExpiry reports a bad max_age or on_expire.
func (l GroupLimits) CheckExpiry() error {
	switch {
	case l.MaxAge < 0:
		return fmt.Errorf("%w: max_age %v is negative; 0 means no limit", ErrInvalidSubscription, l.MaxAge)
	case l.OnExpire != "" && l.OnExpire != "dead_letter" && l.OnExpire != "drop":
		return fmt.Errorf("%w: on_expire %q: want \"dead_letter\" (the default: to the dead-letter topic with reason \"expired\") or \"drop\" (counted)", ErrInvalidSubscription, l.OnExpire)
	}
	return nil
}

// maxDeadLetterBreaker is the largest DeadLetterBreaker: the breaker keeps the time of that
// many dead letters (8 bytes each) per group. Or holds a broker-wide default to it.
const maxDeadLetterBreaker = 10_000

// CheckBreaker reports a bad dead_letter_breaker or dead_letter_breaker_window.
func (l GroupLimits) CheckBreaker() error {
	switch {
	case l.DeadLetterBreaker < 0 || l.DeadLetterBreaker > maxDeadLetterBreaker:
		return fmt.Errorf("%w: dead_letter_breaker %d is out of range; give 1 to %d dead letters (within dead_letter_breaker_window) that pause the group, or 0 for none", ErrInvalidSubscription, l.DeadLetterBreaker, maxDeadLetterBreaker)
	case l.DeadLetterBreakerWindow < 0:
		return fmt.Errorf("%w: dead_letter_breaker_window %v is negative", ErrInvalidSubscription, l.DeadLetterBreakerWindow)
	}
	return nil
}

// MaxRedeliveryBackoff is the most entries a redelivery_backoff list may have: its last
// entry repeats, so a longer list only spells out a tail that one entry says.
const MaxRedeliveryBackoff = 32

// NoJitter is a RedeliveryJitter that turns off the engine's default jitter for one group.
const NoJitter = -1.0

// CheckRedelivery reports a back-off that cannot be applied: a max under its min, a
// redelivery_backoff list with an entry that is not positive, more than
// MaxRedeliveryBackoff entries or set beside a min or max, a jitter outside [0, 1). l is
// a group's own limits, before Or.
func (l GroupLimits) CheckRedelivery() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSubscription, fmt.Sprintf(format, args...))
	}
	list := l.RedeliveryBackoff
	switch j := l.RedeliveryJitter; {
	case l.RedeliveryDelayMin > 0 && l.RedeliveryDelayMax > 0 && l.RedeliveryDelayMax < l.RedeliveryDelayMin:
		return bad("redelivery_delay_max %v is under redelivery_delay_min %v", l.RedeliveryDelayMax, l.RedeliveryDelayMin)
	case len(list) > MaxRedeliveryBackoff:
		return bad("redelivery_backoff has %d entries; the most is %d (its last entry repeats for every later attempt, so end the list where the delays stop growing)", len(list), MaxRedeliveryBackoff)
	case len(list) > 0 && (l.RedeliveryDelayMin != 0 || l.RedeliveryDelayMax != 0):
		return bad("redelivery_backoff is set beside redelivery_delay_min or redelivery_delay_max; the list replaces the doubling, so set one or the other")
	case j != NoJitter && !(j >= 0 && j < 1): // NaN too
		return bad("redelivery_jitter %v is out of range; give a fraction from 0 up to (not including) 1, e.g. 0.2 to shorten each back-off by up to 20%%", j)
	}
	for i, d := range list {
		if d <= 0 {
			return bad("redelivery_backoff[%d] is %v; every entry must be a delay greater than zero", i, d)
		}
	}
	return nil
}

// RedeliveryDelay is how long a message taken back from a member after its attempt-th
// delivery waits before it is redelivered, when the member (or a plugin) asked for
// requested: at least the back-off, a longer request honoured. The back-off is
// RedeliveryBackoff's entry for the attempt (the last for every later one), or else
// RedeliveryDelayMin × 2^(attempt-1) up to RedeliveryDelayMax; with RedeliveryDelayMin
// negative (off) and no list, there is none. RedeliveryJitter shortens it by up to that
// fraction, drawn from seed (the message's sequence) and attempt: the same message and
// attempt wait the same on every node and after a restart, different messages spread.
func (l GroupLimits) RedeliveryDelay(requested time.Duration, attempt uint32, seed uint64) time.Duration {
	d := l.backoff(attempt)
	if d <= 0 {
		return requested
	}
	if j := l.RedeliveryJitter; j > 0 && j < 1 {
		d -= time.Duration(float64(d) * j * draw(seed, attempt))
	}
	return max(requested, d)
}

// backoff is the policy's delay after the attempt-th delivery, before jitter (0: none).
func (l GroupLimits) backoff(attempt uint32) time.Duration {
	if n := len(l.RedeliveryBackoff); n > 0 {
		return l.RedeliveryBackoff[min(max(int(attempt), 1), n)-1]
	}
	lo, hi := l.RedeliveryDelayMin, max(l.RedeliveryDelayMax, l.RedeliveryDelayMin)
	if lo <= 0 {
		return 0
	}
	floor := lo
	for i := uint32(1); i < attempt && floor < hi; i++ {
		if floor > hi/2 {
			floor = hi
			break
		}
		floor *= 2
	}
	return min(floor, hi)
}

// draw is a number in [0, 1) that seed and attempt determine: splitmix64's finalizer, whose
// outputs for consecutive inputs are as spread as random ones.
func draw(seed uint64, attempt uint32) float64 {
	z := seed + uint64(attempt)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// CheckMember says why a member asking for o (its patterns checked and sorted by
// Limits.CheckSubscribe) may not join the group gc defines (gc.DeadLetterTopic after its
// default), or nil: members share the group's name and patterns, and may leave
// max_deliveries, the dead-letter topic, ordering, fair_by and max_priority unset or repeat
// them, not change them.
func (gc GroupConfig) CheckMember(o *SubscribeOptions, patterns []string) error {
	switch {
	case gc.Name != o.Group:
		return fmt.Errorf("%w: subscription_id %q is consumer group %q, not %q; members must share both", ErrGroupMismatch, o.ID, gc.Name, o.Group)
	case !slices.Equal(gc.Patterns, patterns):
		return fmt.Errorf("%w: consumer group %q subscribes to %q, this member asked for %q; every member must use the same topic_patterns", ErrGroupMismatch, gc.Name, gc.Patterns, patterns)
	case o.MaxDeliveries != 0 && o.MaxDeliveries != gc.MaxDeliveries:
		return fmt.Errorf("%w: consumer group %q has max_deliveries %d, this member asked for %d; leave it 0 to take the group's", ErrGroupMismatch, gc.Name, gc.MaxDeliveries, o.MaxDeliveries)
	case o.DeadLetterTopic != "" && o.DeadLetterTopic != gc.DeadLetterTopic:
		return fmt.Errorf("%w: consumer group %q dead-letters to %q, this member asked for %q; leave it empty to take the group's", ErrGroupMismatch, gc.Name, gc.DeadLetterTopic, o.DeadLetterTopic)
	case o.Dispatch.Ordering != OrderingNone && o.Dispatch.Ordering != gc.Dispatch.Ordering:
		return fmt.Errorf("%w: consumer group %q has ordering %q, this member asked for %q; leave it unset to take the group's", ErrGroupMismatch, gc.Name, gc.Dispatch.Ordering, o.Dispatch.Ordering)
	case o.Dispatch.FairBy != "" && o.Dispatch.FairBy != gc.Dispatch.FairBy:
		return fmt.Errorf("%w: consumer group %q has fair_by %q, this member asked for %q; leave it empty to take the group's", ErrGroupMismatch, gc.Name, gc.Dispatch.FairBy, o.Dispatch.FairBy)
	case o.Dispatch.MaxPriority != 0 && o.Dispatch.MaxPriority != gc.Dispatch.MaxPriority:
		return fmt.Errorf("%w: consumer group %q has max_priority %d, this member asked for %d; leave it 0 to take the group's", ErrGroupMismatch, gc.Name, gc.Dispatch.MaxPriority, o.Dispatch.MaxPriority)
	}
	return nil
}
