package plugins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// The lifecycle's seam (issue 30): a plugin may run a second version beside its current one,
// either in shadow (run on the same messages, its results compared with the current
// version's and never applied) or as a canary (run instead of the current version for a share
// of messages, rolled back by itself when it fails too often). Who stores and deploys
// versions (the admin API, cmd/tinybroker) is not this package's business: it gets both
// modules in one Spec and reports what happened in Stats.

// CandidateMode says how a candidate version runs beside the plugin's current one.
type CandidateMode int

const (
	// Shadow runs the candidate on the same messages, acks and redeliveries as the current
	// version; its verdicts, emits, header changes, KV writes and hook decisions are compared
	// with the current version's and counted, never applied.
	Shadow CandidateMode = iota + 1
	// Canary runs the candidate instead of the current version for a share of the published
	// messages (Percent, Keys), applied as the current version's would be, its failures under
	// the plugin's failure policy; over MaxErrorRate it is rolled back: the current version
	// takes everything again. Acks and redeliveries go to the current version only.
	Canary
)

// Candidate is a second version of a plugin (Spec.Candidate). Every Spec setting other than
// the module is the plugin's, shared by both versions.
type Candidate struct {
	Mode CandidateMode
	Wasm []byte // the candidate's module
	Hash string // its content hash ("sha256:<hex>"); computed from Wasm if empty, checked against it if not

	// Canary only. Percent (0-100) is the share of messages sent to the candidate, chosen by a
	// hash of the message's ordering key, or of its message id, or at random when it has
	// neither (so one key always goes the same way); messages whose ordering key is in Keys
	// always go to it.
	Percent float64
	Keys    []string
	// MaxErrorRate (0-1, default 0.05) is the share of failed candidate calls over which the
	// canary is rolled back, judged once it has made MinCalls calls (default 100).
	MaxErrorRate float64
	MinCalls     int
	// OnRollback, if set, is called once when the canary is rolled back, with the reason. It is
	// called from a call in progress, and must not block.
	OnRollback func(reason string)
}

// CandidateStats counts what a plugin's candidate did (PluginStats.Candidate).
type CandidateStats struct {
	Hash  string
	Mode  CandidateMode
	Calls uint64 // calls made to the candidate
	// Failures: the candidate's failed calls (a trap, a timeout, a malformed verdict); a
	// canary's include the messages sent to it while its circuit breaker was open, counted in
	// Calls too.
	Failures uint64
	// Differences (shadow): calls whose results differed from the current version's, in any
	// of the verdict, the message's topic, key, payload or headers, the emits, the KV writes
	// or the hook decision.
	Differences uint64
	RolledBack  bool   // canary: rolled back (the current version takes everything)
	Reason      string // why it was rolled back
}

func (m CandidateMode) String() string {
	switch m {
	case Shadow:
		return "shadow"
	case Canary:
		return "canary"
	}
	return "current"
}

// Defaults of Candidate's rollback rule.
const (
	DefaultMaxErrorRate = 0.05
	DefaultMinCalls     = 100
)

func (c *Candidate) validate(name string) error {
	switch {
	case c.Mode != Shadow && c.Mode != Canary:
		return fmt.Errorf("plugin %q: its candidate has no mode: use Shadow or Canary", name)
	case len(c.Wasm) == 0:
		return fmt.Errorf("plugin %q: its candidate has no module (Candidate.Wasm)", name)
	case c.Percent < 0 || c.Percent > 100:
		return fmt.Errorf("plugin %q: its candidate's percent %g is not between 0 and 100", name, c.Percent)
	case c.MaxErrorRate < 0 || c.MaxErrorRate > 1:
		return fmt.Errorf("plugin %q: its candidate's max error rate %g is not between 0 and 1", name, c.MaxErrorRate)
	case c.MinCalls < 0:
		return fmt.Errorf("plugin %q: its candidate's min calls %d is negative", name, c.MinCalls)
	}
	return nil
}

// moduleHash is the content hash of a module, as Spec.Hash and Candidate.Hash write it.
func moduleHash(bin []byte) string {
	sum := sha256.Sum256(bin)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// candidate is a plugin's second version, loaded as a plugin of its own (its own runtime,
// pool, memory limit and circuit breaker; the current version's settings and store), and
// what it did.
type candidate struct {
	p    *plugin
	mode CandidateMode

	// Canary only.
	threshold    uint64 // a message whose routing hash mod 10000 is under it goes to the candidate
	keys         map[string]bool
	maxErrorRate float64
	minCalls     uint64
	onRollback   func(string)
	reason       atomic.Pointer[string] // set once, when rolled back: every message goes to the current version

	calls, failures, differences atomic.Uint64
}

// loadCandidate loads the candidate of p, which was loaded from spec s.
func (h *Host) loadCandidate(ctx context.Context, p *plugin, s Spec) (*candidate, error) {
	c := *s.Candidate
	if err := c.validate(s.Name); err != nil {
		return nil, s.located(err)
	}
	cs := s
	cs.Path, cs.Wasm, cs.Hash, cs.Candidate = "", c.Wasm, c.Hash, nil
	cp, err := h.load(ctx, cs, c.Mode)
	if err != nil {
		return nil, fmt.Errorf("its candidate: %w", err)
	}
	if c.Mode == Canary && p.has[abi.HookPublish] && !cp.has[abi.HookPublish] {
		return nil, errors.Join(s.located(fmt.Errorf("plugin %q: its canary does not export on_publish, which the current version has", s.Name)), cp.close(ctx))
	}
	cand := &candidate{p: cp, mode: c.Mode, threshold: uint64(c.Percent*100 + 0.5), maxErrorRate: c.MaxErrorRate,
		minCalls: uint64(c.MinCalls), onRollback: c.OnRollback}
	if cand.maxErrorRate == 0 {
		cand.maxErrorRate = DefaultMaxErrorRate
	}
	if cand.minCalls == 0 {
		cand.minCalls = DefaultMinCalls
	}
	if len(c.Keys) > 0 {
		cand.keys = make(map[string]bool, len(c.Keys))
		for _, k := range c.Keys {
			cand.keys[k] = true
		}
	}
	p.log.Info("candidate loaded", "mode", c.Mode.String(), "candidate_hash", cp.spec.Hash, "percent", c.Percent, "keys", len(c.Keys))
	return cand, nil
}

func (c *candidate) stats() *CandidateStats {
	st := &CandidateStats{Hash: c.p.spec.Hash, Mode: c.mode, Calls: c.calls.Load(), Failures: c.failures.Load(),
		Differences: c.differences.Load()}
	if r := c.reason.Load(); r != nil {
		st.RolledBack, st.Reason = true, *r
	}
	return st
}

// takes reports whether a canary takes message d: its ordering key is one of Keys, or a hash
// of its key (else of its message id, else a random number) falls in the canary's share, so
// that one key always goes to the same version (until a rollback).
func (c *candidate) takes(d *broker.Draft) bool {
	if c.reason.Load() != nil {
		return false
	}
	var h uint64
	switch {
	case d.Key != "":
		if c.keys[d.Key] {
			return true
		}
		h = routeHash(d.Key)
	case d.ID != "":
		h = routeHash(d.ID)
	default:
		h = rand.Uint64()
	}
	return h%10000 < c.threshold
}

// routeHash is FNV-1a of s, its bits mixed (splitmix64's finalizer) so that keys that differ
// in their last byte alone spread over every residue: stable across reloads and restarts,
// unlike hash/maphash.
func routeHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// counted counts a call of a canary, and rolls it back once it has failed too often.
func (c *candidate) counted(failed bool, cur *plugin) {
	calls := c.calls.Add(1)
	var fails uint64
	if failed {
		fails = c.failures.Add(1)
	} else {
		fails = c.failures.Load()
	}
	if calls >= c.minCalls && float64(fails) > c.maxErrorRate*float64(calls) {
		c.rollback(fmt.Sprintf("%d of its %d calls failed, over the maximum error rate of %g", fails, calls, c.maxErrorRate), cur)
	}
}

// rollback sends every later message to the current version: once, whatever the number of
// calls that find the error rate over the threshold at once.
func (c *candidate) rollback(reason string, cur *plugin) {
	if !c.reason.CompareAndSwap(nil, &reason) {
		return
	}
	cur.log.Warn("canary rolled back: the current version takes every message again", "candidate_hash", c.p.spec.Hash, "reason", reason)
	if c.onRollback != nil {
		c.onRollback(reason)
	}
}

// publishVersions runs on_publish on d with a plugin that has a candidate, as publish does
// without one. It takes and returns the instances of each call itself, since they come from
// two pools.
//
// Canary: the candidate takes the messages of its share instead of the current version; a
// failed call of it applies the plugin's failure policy, as a failed call of the current
// version would, and counts towards the rollback. A message sent to it while its circuit
// breaker is open counts as a failed call: it was the candidate's, and was not handled.
//
// Shadow: the current version's call is made and applied as without a candidate; the
// candidate is called after it on the same input, before the current's result is applied
// (the message waits for both calls), and its result is compared and dropped (shadow).
func (p *plugin) publishVersions(d *broker.Draft, out *broker.PublishVerdict, owned *bool) (bool, error) {
	c := p.cand
	in := callInput{hook: abi.HookPublish, topic: d.Topic, payload: d.Payload, headers: d.Headers, key: d.Key}
	if c.mode == Canary {
		if !c.takes(d) {
			var inst *instance
			stop, err := p.publish(&inst, d, out, owned)
			if inst != nil {
				p.pool.put(inst)
			}
			return stop, err
		}
		inst, v, err := c.p.call(&in)
		c.counted(err != nil, p)
		if err != nil {
			return c.p.publishFailed(d, err)
		}
		stop, err := c.p.settle(inst.st, v, d, out, owned, nil)
		c.p.pool.put(inst)
		return stop, err
	}
	inst, v, err := p.call(&in)
	p.shadow(&in, inst, v, err)
	if err != nil {
		return p.publishFailed(d, err)
	}
	stop, err := p.settle(inst.st, v, d, out, owned, nil)
	p.pool.put(inst)
	return stop, err
}

// shadow runs p's shadow candidate, if it has one, on the input of a call of hook in.hook that
// the current version made on inst (nil if the call failed with err), and counts whether
// the two results differ. The candidate's results are never applied, and its failures never
// apply the plugin's failure policy. The current version's call state is left as it was.
func (p *plugin) shadow(in *callInput, inst *instance, v uint64, err error) {
	c := p.cand
	if c == nil || c.mode != Shadow || errors.Is(err, errBreakerOpen) || !c.p.has[in.hook] {
		return // no shadow, or the current version was not called: nothing to compare
	}
	var cur outcome
	var before map[string]*string
	if err != nil {
		cur.failed = true
	} else {
		cur = inst.outcome(v)
		before = inst.kvLog.before
	}
	cinst, cv, cerr := c.p.callWith(in, before)
	if errors.Is(cerr, errBreakerOpen) {
		return
	}
	c.calls.Add(1)
	var got outcome
	if cerr != nil {
		c.failures.Add(1)
		got.failed = true
	} else {
		got = cinst.outcome(cv)
		c.p.done(cinst) // its emits and changes dropped with its call state
	}
	if !got.equal(&cur) {
		if c.differences.Add(1) == 1 {
			p.log.Info("shadow candidate's result differs from the current version's (first difference; the rest are counted)",
				"candidate_hash", c.p.spec.Hash, "hook", abi.Names[in.hook], "topic", in.topic)
		}
	}
}

// outcome is what a call decided, as a shadow candidate's is compared with the current
// version's: the verdict and reason, the message as the call leaves it, what it emitted and
// the key-value writes it made.
type outcome struct {
	failed  bool
	verdict uint64
	why     string
	topic   string
	key     string
	payload []byte
	headers broker.Headers
	emits   []broker.Draft
	writes  []kvWrite
}

// outcome reads the outcome of inst's call, verdict v, from its call state, which it leaves
// as it is, and takes the call's key-value writes.
func (inst *instance) outcome(v uint64) outcome {
	st := inst.st
	o := outcome{verdict: v, why: st.why, topic: st.topic, key: st.key, payload: st.payload, headers: st.headers,
		emits: slices.Clone(st.emits)}
	if st.topicSet {
		o.topic = st.newTopic
	}
	if st.keySet {
		o.key = st.newKey
	}
	if st.payloadSet {
		o.payload = st.newPayload
	}
	if len(st.changes) > 0 {
		o.headers = applyHeaders(st.headers, st.changes)
	}
	if inst.kvLog != nil {
		o.writes = slices.Clone(inst.kvLog.writes)
	}
	return o
}

func (o *outcome) equal(x *outcome) bool {
	if o.failed || x.failed {
		return o.failed == x.failed
	}
	return o.verdict == x.verdict && o.why == x.why && o.topic == x.topic && o.key == x.key &&
		bytes.Equal(o.payload, x.payload) && o.headers.Equal(x.headers) &&
		slices.EqualFunc(o.emits, x.emits, func(a, b broker.Draft) bool {
			return a.Topic == b.Topic && a.Key == b.Key && bytes.Equal(a.Payload, b.Payload) && a.Headers.Equal(b.Headers)
		}) &&
		slices.Equal(o.writes, x.writes)
}

// kvWrite is one write a call made to its plugin's store.
type kvWrite struct {
	op              byte // 's' set, 'c' compare-and-set, 'd' delete
	key, old, value string
	ttl             time.Duration
}

// kvLog records the writes of one call, for a plugin with a shadow candidate (both versions):
// reset as each call starts (plugin.call). For the current version it also keeps, in before,
// the value each key written had when the call first wrote it (nil: absent): the shadow
// candidate, called after it, reads the store as the current version's call found it.
type kvLog struct {
	writes []kvWrite
	before map[string]*string
}

func (l *kvLog) add(w kvWrite) { l.writes = append(l.writes, w) }

// kvRecorder is the store of the current version's instances when a shadow candidate runs
// beside it: the plugin's store, whose writes it also records.
type kvRecorder struct {
	KVStore
	log kvLog
}

// saw notes the value key had before the call's first write of it, v if known.
func (r *kvRecorder) saw(ctx context.Context, key []byte, v *string, known bool) error {
	if _, ok := r.log.before[string(key)]; ok {
		return nil
	}
	if !known {
		b, ok, err := r.KVStore.Get(ctx, key)
		if err != nil {
			return err
		}
		if ok {
			s := string(b)
			v = &s
		}
	}
	if r.log.before == nil {
		r.log.before = map[string]*string{}
	}
	r.log.before[string(key)] = v
	return nil
}

func (r *kvRecorder) Set(ctx context.Context, key, value []byte, ttl time.Duration) (int32, error) {
	if err := r.saw(ctx, key, nil, false); err != nil {
		return 0, err
	}
	rc, err := r.KVStore.Set(ctx, key, value, ttl)
	if err == nil && rc == abi.StatusOK {
		r.log.add(kvWrite{op: 's', key: string(key), value: string(value), ttl: ttl})
	}
	return rc, err
}

func (r *kvRecorder) CompareAndSet(ctx context.Context, key, old, value []byte, ttl time.Duration) (int32, error) {
	rc, err := r.KVStore.CompareAndSet(ctx, key, old, value, ttl)
	if err == nil && rc == abi.StatusOK {
		var prev *string // the value it replaced: old, or none
		if len(old) > 0 {
			s := string(old)
			prev = &s
		}
		_ = r.saw(ctx, key, prev, true) // known: no read, no error
		r.log.add(kvWrite{op: 'c', key: string(key), old: string(old), value: string(value), ttl: ttl})
	}
	return rc, err
}

func (r *kvRecorder) Delete(ctx context.Context, key []byte) error {
	if err := r.saw(ctx, key, nil, false); err != nil {
		return err
	}
	if err := r.KVStore.Delete(ctx, key); err != nil {
		return err
	}
	r.log.add(kvWrite{op: 'd', key: string(key)})
	return nil
}

// kvOverlay is the store of a shadow candidate's instances: it reads the plugin's store, and
// keeps the writes of the call in progress over it, where that call reads them back. They
// never reach the store, and are forgotten when the next call starts (plugin.call). The
// store's bound does not apply to them (a write the store would refuse may succeed), nor
// their TTLs within the call.
type kvOverlay struct {
	base KVStore
	log  kvLog
	m    map[string]*string // nil: deleted
}

// resetKV forgets the key-value writes of inst's last call, as a call starts: recorded by
// either version of a plugin with a shadow candidate, and held by the candidate's overlay.
func (inst *instance) resetKV() {
	clear(inst.kvLog.writes)
	inst.kvLog.writes = inst.kvLog.writes[:0]
	clear(inst.kvLog.before)
	if inst.overlay != nil {
		clear(inst.overlay.m)
	}
}

func (o *kvOverlay) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	if v, ok := o.m[string(key)]; ok {
		if v == nil {
			return nil, false, nil
		}
		return []byte(*v), true, nil
	}
	return o.base.Get(ctx, key)
}

func (o *kvOverlay) put(key []byte, value *string) {
	if o.m == nil {
		o.m = map[string]*string{}
	}
	o.m[string(key)] = value
}

func (o *kvOverlay) Set(_ context.Context, key, value []byte, ttl time.Duration) (int32, error) {
	v := string(value)
	o.put(key, &v)
	o.log.add(kvWrite{op: 's', key: string(key), value: v, ttl: ttl})
	return abi.StatusOK, nil
}

func (o *kvOverlay) CompareAndSet(ctx context.Context, key, old, value []byte, ttl time.Duration) (int32, error) {
	cur, ok, err := o.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(old) == 0 && ok || len(old) > 0 && (!ok || string(cur) != string(old)) {
		return abi.StatusConflict, nil
	}
	v := string(value)
	o.put(key, &v)
	o.log.add(kvWrite{op: 'c', key: string(key), old: string(old), value: v, ttl: ttl})
	return abi.StatusOK, nil
}

func (o *kvOverlay) Delete(_ context.Context, key []byte) error {
	o.put(key, nil)
	o.log.add(kvWrite{op: 'd', key: string(key)})
	return nil
}

// SetMaxBytes does nothing: the store's bound is the current version's to set.
func (o *kvOverlay) SetMaxBytes(int64) error { return nil }

// acquireMetrics gives p the metrics its plugin defines: shared by name with every load of
// it, a canary's included (it is live for its share). A shadow candidate's are its own and
// exported nowhere, as nothing else it does is applied.
func (p *plugin) acquireMetrics() {
	if p.role == Shadow {
		p.defined = &definedMetrics{byName: map[string]int32{}}
		return
	}
	p.defined = p.host.acquireMetrics(p.spec.Name)
}

func (p *plugin) releaseMetrics() {
	if p.role != Shadow {
		p.host.releaseMetrics(p.spec.Name)
	}
}

// policy names, for p's log lines, what becomes of a message when p fails on it.
func (p *plugin) policy() string {
	if p.role == Shadow {
		return "none (a shadow's failures are counted, never applied)"
	}
	return p.spec.FailurePolicy.String()
}
