// Package plugintest tests a tinybroker plugin without a broker: it loads the plugin's
// WebAssembly module into the broker's own plugin host (package plugins) and calls its hooks
// on messages and events you make up, reporting what the broker would do with each.
//
//	func TestTenantFilter(t *testing.T) {
//		wasm := plugintest.Build(t, ".") // GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
//		p := plugintest.Load(t, wasm, map[string]string{"allow": "acme"})
//
//		r := p.Publish(plugintest.Message{Topic: "orders.1", Headers: map[string]string{"tenant": "evil"}})
//		if r.Err != nil || r.Verdict != plugintest.Drop {
//			t.Errorf("tenant evil: %s %v", r.Verdict, r.Err)
//		}
//	}
//
// The hooks run through the very code the broker runs them through (plugins.Host.Load and
// the Chain's OnPublish, OnAck and OnRedeliver), with the same checks, limits and verdict
// handling, so a plugin that passes here behaves the same in the broker. What differs is
// meant to make failures visible: the failure policy is fail_closed unless Options say
// otherwise, a failed call is reported in the result's Err whatever the policy, the
// circuit breaker never opens, and each call has a time limit (10s by default). The plugin
// runs in one instance, one call at a time, so what it keeps in globals carries from one
// call to the next, until a call fails and the instance is replaced; in the broker, several
// instances share the messages.
//
// Plugins built with the Go SDK are tested from a test file of their own package, which go
// test builds and runs natively (only the module Build makes is WebAssembly). The command
// `tinybroker plugin test` does the same for messages read from standard input.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/plugins"
)

// Options configure a plugin under test. Zero values take the defaults shown.
type Options struct {
	// Name is the plugin's name, as a plugin block's label in the broker's configuration:
	// it appears in rejections and logs, and a dead_letter failure policy sends messages to
	// dlq.plugin.<Name>. Default: the file's name without ".wasm".
	Name string
	// FailurePolicy is what becomes of a message when a call fails, as a plugin block's
	// failure_policy says: "fail_closed" (the default here, so that no test mistakes a
	// failure for a pass: a failed publish is refused), "fail_open" (the broker's default:
	// the message continues unchanged) or "dead_letter". Whatever the policy, the result's
	// Err reports the failure.
	FailurePolicy string
	// CallTimeout limits each call (default 10s, so that a plugin that loops fails the call
	// instead of hanging the test; negative: no limit, the broker's default).
	CallTimeout time.Duration
	// MemoryLimitBytes is the largest linear memory of the plugin (64 MiB, the broker's
	// default).
	MemoryLimitBytes int
	// MaxEmits is how many messages one call may emit (16).
	MaxEmits int
	// MaxMessageBytes and MaxHeaderBytes are the broker's limits (broker.DefaultMaxMessageBytes
	// and DefaultMaxHeaderBytes, 1 MiB and 64 KiB): on the messages you publish, and on what
	// the plugin writes.
	MaxMessageBytes int
	MaxHeaderBytes  int
	// CacheDir keeps compiled modules between loads, tests and runs, as the broker's
	// plugin_cache_dir does: compiling a Go plugin takes wazero about half a second (ten
	// times that under the race detector). Default: tinybroker/wazero in the user's cache
	// directory (os.UserCacheDir), which `tinybroker serve` uses too; if that cannot be
	// created, modules are compiled in memory for each load.
	CacheDir string
	// LogLevel is the lowest level of the plugin's log lines that are kept: "trace",
	// "debug" (the default), "info", "warn", "error" or "off".
	LogLevel string
	// LogOutput receives the plugin's log lines as they are logged (default: nowhere; Load
	// logs them with t.Log). Plugin.Logs returns them too.
	LogOutput func(line string)
}

// Plugin is a loaded plugin. Its methods may be called from several goroutines; calls are
// made one at a time.
type Plugin struct {
	name   string
	limits broker.Limits // what the broker checks a message published against
	host   *plugins.Host
	chain  *plugins.Chain
	logs   *sink

	mu     sync.Mutex // one call at a time, so that failures are told apart
	ids    uint64     // system_ids made up for events
	closed bool
}

// New loads the plugin module at path with configuration config (what a plugin block's
// config sets; nil for none), as the broker does: it compiles the module, checks it against
// the ABI, creates an instance and runs its tb_v1_init, so a module the broker would refuse is
// refused here with the broker's reason. Close the Plugin when done.
func New(path string, config map[string]string, opts Options) (*Plugin, error) {
	if opts.Name == "" {
		opts.Name = nameOf(path)
	}
	policy, ok := policies[opts.FailurePolicy]
	if !ok {
		return nil, fmt.Errorf("plugintest: failure policy %q: use fail_closed, fail_open or dead_letter", opts.FailurePolicy)
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 10 * time.Second
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "debug"
	}
	level := hclog.LevelFromString(opts.LogLevel)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("plugintest: log level %q: use trace, debug, info, warn, error or off", opts.LogLevel)
	}
	logs := &sink{level: level, out: opts.LogOutput}
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	logger.RegisterSink(logs)
	limits := broker.Limits{MaxMessageBytes: opts.MaxMessageBytes, MaxHeaderBytes: opts.MaxHeaderBytes}.WithDefaults()
	host, err := newHost(limits, opts.CacheDir, logger)
	if err != nil {
		return nil, err
	}
	chain, err := host.Load(context.Background(), []plugins.Spec{{
		Name:             opts.Name,
		Path:             path,
		Config:           config,
		MemoryLimitBytes: opts.MemoryLimitBytes,
		CallTimeout:      opts.CallTimeout,
		PoolSize:         1, // one instance, as a test expects: its globals persist between calls
		FailurePolicy:    policy,
		MaxEmits:         opts.MaxEmits,
		BreakerFailures:  1<<31 - 1, // never opens: every call reaches the plugin
	}})
	if err != nil {
		_ = host.Close(context.Background())
		return nil, err
	}
	return &Plugin{name: opts.Name, limits: limits, host: host, chain: chain, logs: logs}, nil
}

// policies are the failure policies by their names in the configuration file.
var policies = map[string]plugins.FailurePolicy{
	"":            plugins.FailClosed,
	"fail_closed": plugins.FailClosed,
	"fail_open":   plugins.FailOpen,
	"dead_letter": plugins.FailDeadLetter,
}

// newHost returns a Host with the broker's limits and the cache directory (Options.CacheDir).
func newHost(limits broker.Limits, cacheDir string, logger hclog.Logger) (*plugins.Host, error) {
	ho := plugins.HostOptions{Logger: logger, MaxMessageBytes: limits.MaxMessageBytes, MaxHeaderBytes: limits.MaxHeaderBytes,
		CacheDir: cacheDir, CountHostCalls: true}
	if ho.CacheDir != "" {
		return plugins.NewHost(ho)
	}
	if base, err := os.UserCacheDir(); err == nil {
		ho.CacheDir = filepath.Join(base, "tinybroker", "wazero")
		if h, err := plugins.NewHost(ho); err == nil {
			return h, nil
		}
	}
	ho.CacheDir = "" // compile in memory
	return plugins.NewHost(ho)
}

// nameOf makes a plugin name from a file or package name: its base without ".wasm", with
// any character a name may not have replaced by '-'; "plugin" if nothing is left of it.
func nameOf(path string) string {
	b := []byte(strings.TrimSuffix(filepath.Base(path), ".wasm"))
	named := false
	for i, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			named = true
		} else if c != '-' && c != '_' {
			b[i] = '-'
		}
	}
	if !named {
		return "plugin"
	}
	return string(b)
}

// Load loads the plugin module at path with configuration config, with the default
// Options, for the rest of the test: a load error (a module the broker would refuse, a
// tb_v1_init that refuses config) fails the test, the plugin's log lines go to t.Log, and the
// Plugin is closed when the test ends. To test that a load fails, use New.
func Load(t testing.TB, path string, config map[string]string) *Plugin {
	t.Helper()
	return LoadWith(t, path, config, Options{})
}

// LoadWith is Load with Options. Unless opts.LogOutput is set, the plugin's log lines go to
// t.Log.
func LoadWith(t testing.TB, path string, config map[string]string, opts Options) *Plugin {
	t.Helper()
	if opts.LogOutput == nil {
		opts.LogOutput = func(line string) { t.Log(line) }
	}
	p, err := New(path, config, opts)
	if err != nil {
		t.Fatalf("plugintest: loading %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("plugintest: closing %s: %v", path, err)
		}
	})
	return p
}

// Close unloads the plugin. It is idempotent.
func (p *Plugin) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	ctx := context.Background()
	return errors.Join(p.chain.Close(ctx), p.host.Close(ctx))
}

// Name returns the plugin's name (Options.Name).
func (p *Plugin) Name() string { return p.name }

// Stats returns the plugin's counters: calls made and calls that failed (trapped, ran out
// of time or memory, or returned a malformed verdict).
func (p *Plugin) Stats() plugins.PluginStats { return p.chain.Stats()[0] }

// Logs returns the lines the plugin and its host logged so far, at Options.LogLevel or
// above: what the plugin wrote with plugin.Log (or v1_log) and to stderr, and the host's
// lines about it ("plugin loaded", "plugin call failed", ...).
func (p *Plugin) Logs() []string { return p.logs.lines() }

// Message is a message: what a plugin sees, and what it emits.
type Message struct {
	Topic   string
	Payload []byte
	Headers map[string]string
	// Key is the message's ordering key ("" for none): the publisher's (PublishRequest.key),
	// as a plugin reads it with v1_msg_key and changes it with v1_msg_set_key.
	Key string
}

func (m Message) clone() Message {
	return Message{Topic: m.Topic, Payload: m.Payload, Headers: maps.Clone(m.Headers), Key: m.Key}
}

// Verdict is what the broker does with a published message after the plugin's on_publish.
type Verdict string

// The verdicts of on_publish.
const (
	// Pass: the message is routed, as the plugin changed it.
	Pass Verdict = "pass"
	// Drop: the message is dropped; the publisher sees success, routed to no one.
	Drop Verdict = "drop"
	// Reject: the publish is refused with PublishResult.Code and Reason.
	Reject Verdict = "reject"
	// Failed: the plugin failed on the message and its failure policy is fail_closed, so the
	// publish is refused (UNAVAILABLE, code 14). PublishResult.Err says why.
	Failed Verdict = "failed"
)

// PublishResult is what became of a message passed to on_publish.
type PublishResult struct {
	Verdict Verdict
	// Code is the gRPC status code the publisher gets for Reject (1–16; a plugin's 0 is
	// reported as 3, INVALID_ARGUMENT, as the publisher sees it) and Failed (14).
	Code int
	// Reason is why the message was dropped or rejected (the plugin's v1_set_reason).
	Reason string
	// Message is the message after the plugin: with a Pass, what the broker routes.
	Message
	// Emitted are the messages the plugin emitted, which the broker publishes after the
	// message itself (it publishes none when the publish is refused: Reject or Failed).
	Emitted []Message
	// Err is not nil when the plugin failed on the message (trap, panic, time or memory
	// limit, malformed verdict), whatever its failure policy, or when the broker would have
	// refused the message before any plugin saw it (an invalid topic, a payload or headers
	// over the limits), or when the plugin does not implement on_publish (ErrNoHook).
	Err error
}

// ErrNoHook is the Err of a call to a hook the plugin does not implement (its module does
// not export tb_v1_on_publish, tb_v1_on_ack or tb_v1_on_redeliver; a Go plugin does not call
// onpublish.Handle, onack.Handle or onredeliver.Handle in an init function).
var ErrNoHook = errors.New("the plugin does not implement this hook")

// Publish runs the plugin's on_publish on m, as the broker does before routing a message
// published to m.Topic.
func (p *Plugin) Publish(m Message) PublishResult {
	m = m.clone()
	r := PublishResult{Message: m}
	_, err := p.limits.CheckMessage(m.Topic, m.Payload, broker.MakeHeaders(m.Headers))
	if err == nil {
		err = broker.ValidateKey(m.Key)
	}
	if err != nil {
		r.Err = refused(err)
		return r
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		r.Err = errClosed
		return r
	}
	d := broker.Draft{Topic: m.Topic, Payload: m.Payload, Headers: broker.MakeHeaders(m.Headers), Key: m.Key}
	var v broker.PublishVerdict
	r.Err = p.call(plugins.HookPublish, func() { v, err = p.chain.OnPublish(&d) })
	r.Message = Message{Topic: d.Topic, Payload: d.Payload, Headers: d.Headers.Map(), Key: d.Key}
	var rej *broker.RejectError
	switch {
	case errors.As(err, &rej): // the chain reports a plugin's code 0 as INVALID_ARGUMENT
		r.Verdict, r.Code, r.Reason = Reject, rej.Code, rej.Reason
	case err != nil: // the broker's status for broker.ErrHookFailed
		r.Verdict, r.Code, r.Reason = Failed, int(codes.Unavailable), err.Error()
		if r.Err == nil { // cannot happen: a failure is counted
			r.Err = err
		}
	case v.Drop:
		r.Verdict, r.Reason, r.Emitted = Drop, v.Reason, messages(v.Emit)
	default:
		r.Verdict, r.Emitted = Pass, messages(v.Emit)
	}
	return r
}

var errClosed = errors.New("plugintest: the plugin is closed")

// refused is the error of a message the broker would refuse before any plugin saw it.
func refused(err error) error {
	return fmt.Errorf("plugintest: the broker would refuse this message: %w", err)
}

// call runs fn, a call into the chain for hook, and returns an error if the plugin failed
// in it or was not called at all: it does not implement the hook (ErrNoHook).
func (p *Plugin) call(hook string, fn func()) error {
	before := p.Stats()
	mark := p.logs.markFailure()
	fn()
	after := p.Stats()
	switch {
	case after.Failures > before.Failures:
		why := p.logs.failureSince(mark)
		if why == "" {
			why = "see its log"
		}
		return fmt.Errorf("plugin %q failed in %s: %s", p.name, hook, why)
	case after.Calls == before.Calls:
		return fmt.Errorf("plugin %q: %s: %w", p.name, hook, ErrNoHook)
	}
	return nil
}

func messages(ds []broker.Draft) []Message {
	if len(ds) == 0 {
		return nil
	}
	ms := make([]Message, len(ds))
	for i, d := range ds {
		ms[i] = Message{Topic: d.Topic, Payload: d.Payload, Headers: d.Headers.Map(), Key: d.Key}
	}
	return ms
}

// Event is the delivery an on_ack or on_redeliver call is about. Zero values take the
// defaults shown.
type Event struct {
	// ID is the message's system_id (default: "test-1", "test-2", ..., a new one for each
	// event of the Plugin).
	ID string
	// Group is the consumer group (default "test"); Subscription its subscription_id
	// (default: Group).
	Group        string
	Subscription string
	// Attempt is the delivery attempt acked, or that failed (1 = first; default 1).
	Attempt int
}

// AckEvent is an ack: Message, delivered to a member of Group, was acked InFlight after
// its delivery.
type AckEvent struct {
	Message
	Event
	InFlight time.Duration
}

// AckResult is what on_ack did.
type AckResult struct {
	// Emitted are the messages the plugin emitted, which the broker publishes.
	Emitted []Message
	// Err is not nil when the plugin failed (the ack stands: on_ack cannot undo it), or
	// does not implement on_ack (ErrNoHook).
	Err error
}

// Ack runs the plugin's on_ack on e, as the broker does after a member of e.Group acked
// e.Message.
func (p *Plugin) Ack(e AckEvent) AckResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	ev, err := p.event(e.Message, e.Event)
	if err != nil {
		return AckResult{Err: err}
	}
	var ds []broker.Draft
	err = p.call(plugins.HookAck, func() { ds = p.chain.OnAck(ev.ack(e.InFlight)) })
	return AckResult{Emitted: messages(ds), Err: err}
}

// RedeliverEvent is a failed delivery: Message, delivered to a member of Group, is taken
// back for Reason.
type RedeliverEvent struct {
	Message
	Event
	// Reason is why: "nack" (the default, or the nack's own reason), "ack deadline
	// exceeded" or "member left".
	Reason string
}

// Action is what the broker does with a message taken back from a member, after the
// plugin's on_redeliver.
type Action string

// The actions of on_redeliver.
const (
	// Redeliver: the broker's default, redeliver (after the nack's delay, if it had one)
	// or, past the group's max_deliveries, dead-letter.
	Redeliver Action = "redeliver"
	// Delay: redeliver after RedeliverResult.Delay.
	Delay Action = "delay"
	// DeadLetter: send to the group's dead-letter topic now, with RedeliverResult.Reason.
	DeadLetter Action = "dead_letter"
	// DropMessage: forget the message.
	DropMessage Action = "drop"
)

// RedeliverResult is what on_redeliver decided.
type RedeliverResult struct {
	Action Action
	Delay  time.Duration // for Delay
	// Reason is why the message is dead-lettered or dropped.
	Reason string
	// Headers are the message's headers after the plugin's changes, which the broker keeps
	// on the redelivered or dead-lettered message.
	Headers map[string]string
	// Emitted are the messages the plugin emitted, which the broker publishes.
	Emitted []Message
	// Err is not nil when the plugin failed (the Action is then what its failure policy
	// says: Redeliver for fail_closed and fail_open, DeadLetter for dead_letter), or does not
	// implement on_redeliver (ErrNoHook).
	Err error
}

// Redeliver runs the plugin's on_redeliver on e, as the broker does before redelivering a
// message taken back from a member of e.Group.
func (p *Plugin) Redeliver(e RedeliverEvent) RedeliverResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := RedeliverResult{Action: Redeliver, Headers: maps.Clone(e.Headers)}
	ev, err := p.event(e.Message, e.Event)
	if err != nil {
		r.Err = err
		return r
	}
	var v broker.RedeliverVerdict
	r.Err = p.call(plugins.HookRedeliver, func() { v = p.chain.OnRedeliver(ev.redeliver(e.Reason)) })
	if len(v.SetHeaders) > 0 || len(v.DelHeaders) > 0 {
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		for _, k := range v.DelHeaders { // as the broker applies them: deletions first
			delete(r.Headers, k)
		}
		maps.Copy(r.Headers, v.SetHeaders)
	}
	r.Reason, r.Emitted = v.Reason, messages(v.Emit)
	switch v.Action {
	case broker.RedeliverDelay:
		r.Action, r.Delay = Delay, v.Delay
	case broker.RedeliverDeadLetter:
		r.Action = DeadLetter
	case broker.RedeliverDrop:
		r.Action = DropMessage
	}
	return r
}

// event is an event with its defaults, ready for the chain.
type event struct {
	Event
	msg *broker.Message
}

// ack is the event of an ack, inFlight after the delivery.
func (ev event) ack(inFlight time.Duration) *broker.AckEvent {
	return &broker.AckEvent{Msg: ev.msg, SystemID: ev.ID, SubscriptionID: ev.Subscription,
		Group: ev.Group, Attempt: uint32(ev.Attempt), InFlight: inFlight}
}

// redeliver is the event of a redelivery for reason (default: a nack).
func (ev event) redeliver(reason string) *broker.RedeliverEvent {
	if reason == "" {
		reason = deadletter.ReasonNack
	}
	return &broker.RedeliverEvent{Msg: ev.msg, SystemID: ev.ID, SubscriptionID: ev.Subscription,
		Group: ev.Group, Attempt: uint32(ev.Attempt), Reason: reason}
}

func (p *Plugin) event(m Message, e Event) (event, error) {
	if p.closed {
		return event{}, errClosed
	}
	if err := broker.ValidateTopic(m.Topic); err != nil {
		return event{}, fmt.Errorf("plugintest: the message's topic: %w", err)
	}
	if err := broker.ValidateKey(m.Key); err != nil {
		return event{}, fmt.Errorf("plugintest: the message's key: %w", err)
	}
	if e.Attempt < 0 || e.Attempt > 1<<31-1 {
		return event{}, fmt.Errorf("plugintest: attempt %d: want 1 or more", e.Attempt)
	}
	if e.Attempt == 0 {
		e.Attempt = 1
	}
	if e.Group == "" {
		e.Group = "test"
	}
	if e.Subscription == "" {
		e.Subscription = e.Group
	}
	p.ids++
	if e.ID == "" {
		e.ID = "test-" + strconv.FormatUint(p.ids, 10)
	}
	m = m.clone()
	return event{Event: e, msg: &broker.Message{ID: p.ids, SystemID: e.ID, Topic: m.Topic, Payload: m.Payload,
		Headers: broker.MakeHeaders(m.Headers), Key: m.Key, PublishedAt: time.Now().UnixNano()}}, nil
}
