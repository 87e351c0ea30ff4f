// Package config reads tinybroker's configuration file.
//
// The file is HCL. Every setting is optional; anything left out takes the default shown by
// Default, and an attribute or block the package does not know is an error:
//
//	listen            = "127.0.0.1:7878"
//	log_level         = "info"   # trace | debug | info | warn | error
//	log_format        = "text"   # text | json
//	shutdown_grace    = "10s"    # Go duration strings
//	keepalive_time    = "30s"
//	keepalive_timeout = "10s"
//	max_message_bytes = 1048576
//	max_header_bytes  = 65536
//	max_headers       = 1024
//
//	memory {                      # at most one
//	  max_bytes = "4GiB"          # what the broker holds for later, in bytes (default: a quarter of GOMEMLIMIT)
//	}
//
//	groups {                      # at most one
//	  max_queued        = 100000
//	  max_queued_bytes  = "512MiB"  # per group (default: 1/8 of memory.max_bytes)
//	  overflow          = "reject"  # reject | drop_oldest
//	  ack_deadline      = "30s"
//	  max_in_flight_cap = 65536
//	  expire_after      = "none"    # remove a group without members this long ("1h")
//	  dead_letters_max       = 10000    # dead letters each group keeps for the admin API
//	  dead_letters_max_bytes = "64MiB"  # (default: 64 MiB, at most 1/16 of memory.max_bytes)
//	  redelivery_delay_min   = "100ms"  # a redelivery waits min × 2^(attempt-1); "none": no back-off
//	  redelivery_delay_max   = "10s"    # up to this
//	  max_deliveries_cap     = 1000     # the largest max_deliveries a group may have (0: unlimited)
//	  max_age                = "none"   # expire a group's messages this long after their publish ("24h")
//	  on_expire              = "dead_letter" # dead_letter (reason "expired") | drop (counted)
//	}
//
//	fanout {                      # at most one
//	  buffer_messages = 262144
//	  publisher_wait  = "1s"       # pace publishers to a subscriber over half full
//	  buffer_bytes    = 67108864
//	  slow_consumer   = "disconnect" # disconnect | drop
//	}
//
//	group "resizers" {            # any number: consumer groups that exist from start-up
//	  topics            = ["jobs.thumb.*"]   # required
//	  subscription_id   = "resizers"         # default: the group's name
//	  max_deliveries    = 5
//	  dead_letter_topic = "dlq.resizers"
//	  max_queued        = 100000             # these nine default to the groups block's
//	  max_queued_bytes  = "512MiB"
//	  overflow          = "reject"
//	  dead_letters_max       = 10000
//	  dead_letters_max_bytes = "64MiB"
//	  redelivery_delay_min   = "100ms"
//	  redelivery_delay_max   = "10s"
//	  max_age                = "24h"
//	  on_expire              = "drop"
//	  replicas               = 3    # engine "jetstream" only: copies of its messages, in a stream of its own
//	}
//
//	limits {                      # at most one; see RATIONALE.md, "Limits"
//	  max_connections               = 4096
//	  max_streams_per_connection    = 4096
//	  handshake_timeout             = "10s"
//	  max_publish_batch             = 4096     # messages per PublishStream frame
//	  max_subscriptions_per_stream  = 65536
//	  max_patterns_per_subscription = 1024
//	  max_groups                    = 10000
//	  max_plugin_bytes              = 67108864 # largest plugin .wasm file
//	  dedupe_window                 = "2m"     # how long a message_id is remembered
//	  dedupe_max_bytes              = "64MiB"  # the table of message ids (default: 64 MiB, at most 1/16 of memory.max_bytes)
//	  max_delay                     = "24h"    # the longest deliver_after / deliver_at ahead
//	  max_delayed                   = 1000000  # delayed messages held at once
//	  max_delayed_bytes             = "512MiB" # ... and their bytes (default: 1/8 of memory.max_bytes)
//	}
//
//	plugin_cache_dir = "/var/cache/tinybroker"  # compiled plugins, kept across restarts; "none": not kept
//
//	http {                        # at most one; present: the ops HTTP listener is on
//	  listen             = "127.0.0.1:7879"  # metrics, dashboard, pprof
//	  allow_remote       = false   # a non-loopback listen needs this, or users (admins may use it)
//	  metrics_max_groups = 1000    # groups with series of their own; the rest sum as "_other"
//	  stuck_after        = "1m"    # a group with messages queued, members with room and no delivery this long is reported stuck
//
//	insecure = false              # true: serve a non-loopback address without users (logged at every start)
//
//	tls {                         # at most one; files re-read on reload (SIGHUP)
//	  cert_file           = "server.pem"     # relative to this file
//	  key_file            = "server-key.pem"
//	  client_ca_file      = "clients-ca.pem" # accept client certificates signed by these CAs
//	  require_client_cert = false            # true: mTLS, refuse connections without one
//	}
//
//	user "alice" {                # any number; see README.md, "Securing tinybroker"
//	  token_hash  = "$2a$10$..."   # bcrypt, from `tinybroker passwd`; sent as Bearer alice:TOKEN
//	  certificate = "CN=alice"     # or "DNS:...", "URI:...", "EMAIL:..." of a client certificate
//	  admin       = false          # Stats and Reload
//	  publish {                                   # nothing is allowed without an allow
//	    allow = ["orders.>"]
//	    deny  = ["orders.internal.>"]               # overrides allow
//	  }
//	  subscribe { allow = ["orders.>"] }
//	  groups    { allow = ["billing"] }           # consumer groups (subscription_id) to join
//	  limits {
//	    max_connections   = 100
//	    max_streams       = 1000
//	    max_subscriptions = 1000
//	    max_groups        = 10
//	    max_queued_bytes  = "256MiB"             # what the groups the user created hold
//	  }
//	}
//
//	engine "jetstream" {          # at most one; default engine "memory" {}; see engine.go
//	  data_dir = "/var/lib/tinybroker"    # an embedded NATS server (or url = "nats://...")
//	  replicas = 1
//	  storage  = "file"                   # or "memory"
//	  max_bytes = "10GiB"                 # what the consumer groups may hold (default: JetStream's limits)
//	  cluster { name = "tinybroker", listen = "0.0.0.0:6222", routes = ["n2:6222", "n3:6222"] }
//	}
//
//	plugin "tenant-filter" {      # any number, in chain order
//	  path           = "plugins/tenant-filter.wasm"   # relative to this file
//	  hooks          = ["on_publish"]   # default: every hook the module exports
//	  topics         = ["orders.>"]     # on_publish sees these (default [">"])
//	  groups         = ["billing"]      # on_ack/on_redeliver see these groups (default all)
//	  config         = { allow = "acme,globex" }
//	  memory_limit_mb = 64
//	  call_timeout   = "100ms"          # default "1s"; "none": no time limit
//	  pool_size      = 4
//	  failure_policy = "fail_open"      # fail_open | fail_closed | dead_letter
//	  max_emits      = 16
//	  emit_topics    = ["audit.>"]      # topics it may emit to or re-route to (default: any)
//	  breaker_failures = 5
//	  breaker_cooldown = "30s"
//	  kv_max_bytes       = 4194304      # its key-value store (docs/ABI.md, "State"): bytes held
//	  kv_max_value_bytes = 65536        # and the largest value
//	  tick_interval  = "1s"             # call on_tick this often (at least 10ms; default: never)
//	  log_topic      = "logs.audit"     # also publish every line it logs there (default: none)
//	  log_topic_rate = 100              # at most this many lines a second; the rest dropped
//	}
//
// Errors name the file, line and column of the offending text.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/server/auth"
)

// Config is the server's configuration after defaults.
type Config struct {
	Listen           string               // address the gRPC server listens on, host:port ("127.0.0.1:7878")
	LogLevel         string               // trace, debug, info, warn or error ("info")
	LogFormat        string               // text or json ("text")
	ShutdownGrace    time.Duration        // how long a graceful shutdown may take (10s)
	KeepaliveTime    time.Duration        // the server pings a client idle this long (30s)
	KeepaliveTimeout time.Duration        // and drops it if the ping is not answered in this long (10s)
	Broker           memory.Options       // the embedded engine's, its broker.Limits included
	Limits           Limits               // the server's limits; the broker's are in Broker
	Plugins          []plugins.Spec       // in chain order; paths made relative to the file's folder
	Groups           []broker.GroupConfig // consumer groups declared with group blocks
	// PluginCacheDir keeps compiled plugins across restarts ("" : the user cache folder,
	// e.g. ~/.cache/tinybroker/wazero; "none": nowhere, every start compiles them).
	PluginCacheDir string
	// StateDir (memory { state_dir }) keeps the memory engine's deployed plugins across
	// restarts; made relative to the file's folder. Empty: a restart forgets them.
	StateDir string
	// TLS serves TLS from these files (nil: plaintext); paths made relative to the file's
	// folder.
	TLS *auth.TLSFiles
	// Users may call the broker; with none, calls need no authentication and the broker
	// serves only loopback addresses unless Insecure is set.
	Users    []auth.User
	Insecure bool
	HTTP     HTTP // the ops HTTP listener (http.go); off by default
	// Engine is the message engine: EngineMemory (the default) or EngineJetStream,
	// configured by JetStream (engine.go). The memory engine's options are Broker; the
	// JetStream engine takes the limits and fanout settings from Broker too.
	Engine    string
	JetStream JetStream
}

// Limits are the limits of the limits block that the server and the plugin host apply (the
// block's other settings are memory.Options). See RATIONALE.md, "Limits".
type Limits struct {
	MaxConnections          int           // client connections open at once (4,096)
	MaxStreamsPerConnection int           // HTTP/2 streams of one connection at once (4,096)
	HandshakeTimeout        time.Duration // to complete a new connection's HTTP/2 handshake (10s)
	MaxPublishBatch         int           // messages in one PublishStream frame (4,096)
	MaxPluginBytes          int           // largest plugin .wasm file (64 MiB)
}

// Default returns the configuration of an empty file: every field, the broker options
// included, set to its default. Broker.Logger is left nil.
func Default() Config {
	return Config{
		Listen:           "127.0.0.1:7878",
		LogLevel:         "info",
		LogFormat:        "text",
		ShutdownGrace:    10 * time.Second,
		KeepaliveTime:    30 * time.Second,
		KeepaliveTimeout: 10 * time.Second,
		Broker: memory.Options{
			// The group byte bounds stay 0: the engine's own defaults (its memory budget).
			Limits:               broker.Limits{}.WithDefaults().WithGroupDefaults(0, 0),
			FanoutBufferMessages: 262_144,
			PublisherWait:        time.Second,
			FanoutBufferBytes:    64 << 20,
			SlowConsumer:         memory.SlowConsumerDisconnect,
		},
		HTTP:   HTTP{MetricsMaxGroups: 1000},
		Engine: EngineMemory,
		Limits: Limits{
			MaxConnections:          4_096,
			MaxStreamsPerConnection: 4_096,
			HandshakeTimeout:        10 * time.Second,
			MaxPublishBatch:         4_096,
			MaxPluginBytes:          plugins.DefaultMaxPluginBytes,
		},
	}
}

// Load reads the configuration file at path and parses it with Parse.
func Load(path string) (Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading configuration: %w", err)
	}
	return Parse(src, path)
}

// Parse parses a configuration file's contents; filename is used only in error messages.
// Settings the file leaves out take their defaults.
//
// On error the Config is the zero value and the error lists every problem found, one per
// line, each as "FILE:LINE,COL-COL: Summary; Detail". errors.As with an hcl.Diagnostics
// target recovers the diagnostics themselves, e.g. for hcl.NewDiagnosticTextWriter.
func Parse(src []byte, filename string) (Config, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return Config{}, newError(diags, filename)
	}
	d := decoder{cfg: Default(), ranges: make(map[string]hcl.Range), dir: filepath.Dir(filename)}
	diags = append(diags, d.section(file.Body, rootSection, "")...)
	diags = append(diags, d.check()...)
	if diags.HasErrors() {
		return Config{}, newError(diags, filename)
	}
	if d.cfg.StateDir != "" && !filepath.IsAbs(d.cfg.StateDir) {
		d.cfg.StateDir = filepath.Join(d.dir, d.cfg.StateDir)
	}
	return d.cfg, nil
}
