// Package plugins is tinybroker's WebAssembly plugin host: it loads plugins with wazero,
// checks them against ABI v1 (docs/ABI.md), and runs them as a broker.Hooks chain. The
// broker knows nothing of Wasm; it calls the chain through broker.Hooks.
package plugins

import (
	"fmt"
	"slices"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// FailurePolicy says what becomes of a message when a plugin fails on it.
type FailurePolicy int

const (
	// FailOpen: the message continues as if the plugin were not there.
	FailOpen FailurePolicy = iota
	// FailClosed: the publish is refused (UNAVAILABLE); a redelivery is treated as a nack.
	FailClosed
	// FailDeadLetter: the message goes to the dead-letter topic (dlq.plugin.<name> for a
	// publish, the group's for a redelivery).
	FailDeadLetter
)

// Hook names, as in the config file.
const (
	HookPublish   = abi.NamePublish
	HookAck       = abi.NameAck
	HookRedeliver = abi.NameRedeliver
	HookTick      = abi.NameTick
)

// MinTickInterval is the shortest tick_interval: a tick is a pooled call with its own
// goroutine and timer, not a busy loop.
const MinTickInterval = 10 * time.Millisecond

// Spec declares one plugin, as the config file's plugin block does. Zero values take the
// defaults shown.
type Spec struct {
	Name string // letters, digits, '-', '_'; names the logger and the dead-letter topic
	Path string // the .wasm file
	Wasm []byte // the module itself, instead of Path
	// Source is where the plugin is declared, "FILE:LINE,COL-COL" of its path in the config
	// file (set by the config package): errors loading it start with it.
	Source string
	Hooks  []string
	Topics []string // patterns whose messages on_publish sees (">": every message)
	Groups []string // consumer groups whose acks and redeliveries it sees (all)
	Config map[string]string
	// EmitTopics, if not empty, are the patterns of the topics the plugin may write to:
	// v1_emit and v1_msg_set_topic to any other topic fail with ERR_NOT_ALLOWED. Empty: any
	// topic (plugins are the operator's code; see RATIONALE.md, "Security").
	EmitTopics []string

	MemoryLimitBytes int           // largest linear memory of one instance (64 MiB)
	CallTimeout      time.Duration // time limit per call (DefaultCallTimeout); NoCallTimeout: none (bounds.go)
	PoolSize         int           // instances, i.e. concurrent calls (4)
	FailurePolicy    FailurePolicy // FailOpen
	MaxEmits         int           // messages one call may emit (16)
	BreakerFailures  int           // failures in a row that open the circuit breaker (5)
	BreakerCooldown  time.Duration // how long it stays open (30s)
	// The bounds of the plugin's key-value store (kv.go): the bytes it holds, keys and values
	// and 64 per entry (DefaultKVMaxBytes, 4 MiB), and the largest value (DefaultKVMaxValueBytes,
	// 64 KiB).
	KVMaxBytes      int
	KVMaxValueBytes int
	// TickInterval is how often the broker calls the plugin's on_tick hook (tick.go), at
	// least MinTickInterval; 0 (the default): never, even if the module exports it.
	TickInterval time.Duration
	// LogTopic, if set, is a topic to which every line the plugin logs is also published,
	// with the headers plugin, hash and level (logtopic.go); at most LogTopicRate lines a
	// second (DefaultLogTopicRate), the rest dropped and counted.
	LogTopic     string
	LogTopicRate int

	// Hash is the module's content hash, "sha256:<hex>", computed by Load if empty; if not,
	// a pin: Load refuses a module with another hash. Every log line and metric about the
	// plugin carries it.
	Hash string
	// Candidate, if set, is a second version of the plugin run beside this one (candidate.go).
	Candidate *Candidate
}

func (s *Spec) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.MemoryLimitBytes, 64<<20)
	def(&s.PoolSize, 4)
	def(&s.MaxEmits, 16)
	def(&s.BreakerFailures, 5)
	def(&s.KVMaxBytes, DefaultKVMaxBytes)
	def(&s.KVMaxValueBytes, DefaultKVMaxValueBytes)
	def(&s.LogTopicRate, DefaultLogTopicRate)
	if s.CallTimeout == 0 {
		s.CallTimeout = DefaultCallTimeout
	}
	if s.BreakerCooldown <= 0 {
		s.BreakerCooldown = 30 * time.Second
	}
	if len(s.Topics) == 0 {
		s.Topics = []string{">"}
	}
}

// CheckName reports whether name can name a plugin: letters, digits, '-' and '_' (it names
// the plugin's logger and its dead-letter topic).
func CheckName(name string) error {
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("plugin name %q: use letters, digits, '-' and '_'", name)
		}
	}
	return nil
}

func (s *Spec) validate() error {
	if s.Name == "" {
		return fmt.Errorf("a plugin needs a name")
	}
	if err := CheckName(s.Name); err != nil {
		return err
	}
	if s.Path == "" && s.Wasm == nil {
		return fmt.Errorf("plugin %q: path to the .wasm file is missing", s.Name)
	}
	for _, h := range s.Hooks {
		if h != HookPublish && h != HookAck && h != HookRedeliver && h != HookTick {
			return fmt.Errorf("plugin %q: unknown hook %q; use %s, %s, %s or %s", s.Name, h, HookPublish, HookAck, HookRedeliver, HookTick)
		}
	}
	for _, t := range s.Topics {
		if err := broker.Pattern(t).Validate(); err != nil {
			return fmt.Errorf("plugin %q: topics: %w", s.Name, err)
		}
	}
	for _, t := range s.EmitTopics {
		if err := broker.Pattern(t).Validate(); err != nil {
			return fmt.Errorf("plugin %q: emit_topics: %w", s.Name, err)
		}
	}
	if s.LogTopic != "" {
		if err := broker.ValidateTopic(s.LogTopic); err != nil {
			return fmt.Errorf("plugin %q: log_topic: %w", s.Name, err)
		}
	}
	if s.KVMaxValueBytes > 1<<30 {
		return fmt.Errorf("plugin %q: kv_max_value_bytes %d is over its limit of 1 GiB (a length v1_kv_get returns must fit an i32)", s.Name, s.KVMaxValueBytes)
	}
	if s.KVMaxValueBytes > s.KVMaxBytes {
		return fmt.Errorf("plugin %q: kv_max_value_bytes %d is over kv_max_bytes %d: no such value could be stored", s.Name, s.KVMaxValueBytes, s.KVMaxBytes)
	}
	if s.TickInterval < 0 || s.TickInterval > 0 && s.TickInterval < MinTickInterval {
		return fmt.Errorf("plugin %q: tick_interval %v is under its minimum of %v (0: no ticks)", s.Name, s.TickInterval, MinTickInterval)
	}
	if s.TickInterval == 0 && slices.Contains(s.Hooks, HookTick) {
		return fmt.Errorf("plugin %q: hooks lists %s but tick_interval is not set: say how often it runs", s.Name, HookTick)
	}
	if s.MemoryLimitBytes < 64<<10 {
		return fmt.Errorf("plugin %q: memory limit %d is under one 64 KiB page", s.Name, s.MemoryLimitBytes)
	}
	return nil
}

// located prefixes err with where the plugin is declared, if known.
func (s *Spec) located(err error) error {
	if s.Source == "" {
		return err
	}
	return fmt.Errorf("%s: %w", s.Source, err)
}

// mayEmit reports whether the plugin may write a message to topic (EmitTopics).
func (s *Spec) mayEmit(topic string) bool {
	if len(s.EmitTopics) == 0 {
		return true
	}
	for _, p := range s.EmitTopics {
		if broker.Pattern(p).Match(topic) {
			return true
		}
	}
	return false
}
