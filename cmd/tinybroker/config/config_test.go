package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
)

func TestDefault(t *testing.T) {
	c := Default()
	want := Config{
		Listen:           "127.0.0.1:7878",
		LogLevel:         "info",
		LogFormat:        "text",
		ShutdownGrace:    10 * time.Second,
		KeepaliveTime:    30 * time.Second,
		KeepaliveTimeout: 10 * time.Second,
		Broker: memory.Options{
			Limits: broker.Limits{
				MaxMessageBytes:            1 << 20,
				MaxHeaderBytes:             64 << 10,
				MaxHeaders:                 1024,
				AckDeadline:                30 * time.Second,
				MaxAckDeadline:             12 * time.Hour,
				MaxInFlightCap:             65536,
				MaxDeliveriesCap:           1000,
				MaxSubscriptionsPerStream:  65536,
				MaxPatternsPerSubscription: 1024,
				MaxGroups:                  10000,
				DedupeWindow:               2 * time.Minute,
				MaxDelay:                   24 * time.Hour,
				MaxDelayed:                 1_000_000,
				GroupMaxQueued:             100000, GroupDeadLetterMax: 10000, GroupOverflow: broker.OverflowReject,
				GroupRedeliveryDelayMin: 100 * time.Millisecond, GroupRedeliveryDelayMax: 10 * time.Second,
			},
			FanoutBufferMessages: 262144,
			PublisherWait:        time.Second,
			FanoutBufferBytes:    64 << 20,
			SlowConsumer:         memory.SlowConsumerDisconnect,
		},
		Limits: Limits{
			MaxConnections:          4096,
			MaxStreamsPerConnection: 4096,
			HandshakeTimeout:        10 * time.Second,
			MaxPublishBatch:         4096,
			MaxPluginBytes:          64 << 20,
		},
		HTTP:   HTTP{MetricsMaxGroups: 1000},
		Engine: EngineMemory,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Default() = %+v\nwant %+v", c, want)
	}
	if c.Broker.Logger != nil {
		t.Errorf("Default().Broker.Logger = %v, want nil", c.Broker.Logger)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, src := range []string{"", "\n", "# just a comment\n", "groups {}\nfanout {\n}\n"} {
		c, err := Parse([]byte(src), "t.hcl")
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", src, c)
		}
	}
}

const fullFile = `
listen            = "[::1]:9000"
log_level         = "debug"
log_format        = "json"
shutdown_grace    = "1m30s"
keepalive_time    = "45s"
keepalive_timeout = "5s"
max_message_bytes = 2048
max_header_bytes  = 512

groups {
  max_queued        = 10
  overflow          = "drop_oldest"
  ack_deadline      = "250ms"
  max_ack_deadline  = "2h"
  max_in_flight_cap = 32
}

fanout {
  buffer_messages = 7
  buffer_bytes    = 4096
  slow_consumer   = "drop"
}

limits {
  max_connections               = 11
  max_streams_per_connection    = 12
  handshake_timeout             = "13s"
  max_publish_batch             = 14
  max_subscriptions_per_stream  = 15
  max_patterns_per_subscription = 16
  max_groups                    = 17
  max_plugin_bytes              = 18
  dedupe_window                 = "19s"
  dedupe_max_bytes              = "20KiB"
  max_delay                     = "21h"
  max_delayed                   = 22
  max_delayed_bytes             = "23KiB"
}
`

func TestParseFull(t *testing.T) {
	c := mustParse(t, fullFile, "full.hcl")
	checks := []struct {
		name      string
		got, want any
	}{
		{"Listen", c.Listen, "[::1]:9000"},
		{"LogLevel", c.LogLevel, "debug"},
		{"LogFormat", c.LogFormat, "json"},
		{"ShutdownGrace", c.ShutdownGrace, 90 * time.Second},
		{"KeepaliveTime", c.KeepaliveTime, 45 * time.Second},
		{"KeepaliveTimeout", c.KeepaliveTimeout, 5 * time.Second},
		{"MaxMessageBytes", c.Broker.MaxMessageBytes, 2048},
		{"MaxHeaderBytes", c.Broker.MaxHeaderBytes, 512},
		{"GroupMaxQueued", c.Broker.GroupMaxQueued, 10},
		{"GroupOverflow", c.Broker.GroupOverflow, broker.OverflowDropOldest},
		{"AckDeadline", c.Broker.AckDeadline, 250 * time.Millisecond},
		{"MaxAckDeadline", c.Broker.MaxAckDeadline, 2 * time.Hour},
		{"MaxInFlightCap", c.Broker.MaxInFlightCap, 32},
		{"FanoutBufferMessages", c.Broker.FanoutBufferMessages, 7},
		{"FanoutBufferBytes", c.Broker.FanoutBufferBytes, 4096},
		{"SlowConsumer", c.Broker.SlowConsumer, memory.SlowConsumerDrop},
		{"Logger", c.Broker.Logger, nil},
		{"MaxConnections", c.Limits.MaxConnections, 11},
		{"MaxStreamsPerConnection", c.Limits.MaxStreamsPerConnection, 12},
		{"HandshakeTimeout", c.Limits.HandshakeTimeout, 13 * time.Second},
		{"MaxPublishBatch", c.Limits.MaxPublishBatch, 14},
		{"MaxSubscriptionsPerStream", c.Broker.MaxSubscriptionsPerStream, 15},
		{"MaxPatternsPerSubscription", c.Broker.MaxPatternsPerSubscription, 16},
		{"MaxGroups", c.Broker.MaxGroups, 17},
		{"MaxPluginBytes", c.Limits.MaxPluginBytes, 18},
		{"DedupeWindow", c.Broker.DedupeWindow, 19 * time.Second},
		{"DedupeMaxBytes", c.Broker.DedupeMaxBytes, int64(20 << 10)},
		{"MaxDelay", c.Broker.MaxDelay, 21 * time.Hour},
		{"MaxDelayed", c.Broker.MaxDelayed, 22},
		{"MaxDelayedBytes", c.Broker.MaxDelayedBytes, int64(23 << 10)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// TestParsePartial checks that settings left out keep their defaults, inside blocks too.
func TestParsePartial(t *testing.T) {
	c := mustParse(t, "log_level = \"warn\"\ngroups {\n  overflow = \"drop_oldest\"\n}\n", "t.hcl")
	want := Default()
	want.LogLevel = "warn"
	want.Broker.GroupOverflow = broker.OverflowDropOldest
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
}

// TestParseExpressions covers the forms of constant HCL allows beyond plain literals.
func TestParseExpressions(t *testing.T) {
	src := `
listen = ":7878"
max_message_bytes = (512 + 512) * 1024
groups {
  max_queued        = 1e3
  max_in_flight_cap = 9223372036854775807
}
fanout {
  buffer_bytes = 64 * 1024 * 1024
}
`
	c := mustParse(t, src, "t.hcl")
	if c.Listen != ":7878" || c.Broker.MaxMessageBytes != 1<<20 || c.Broker.GroupMaxQueued != 1000 ||
		c.Broker.MaxInFlightCap != math.MaxInt64 || c.Broker.FanoutBufferBytes != 64<<20 {
		t.Errorf("got %+v", c)
	}
}

// mustParse parses src as the file filename; an error fails the test.
func mustParse(t *testing.T, src, filename string) Config {
	t.Helper()
	c, err := Parse([]byte(src), filename)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // substrings of the error, after "t.hcl:"
	}{
		{"syntax", "listen = \"a:1\"\nlog_level = = \"info\"\n",
			[]string{"t.hcl:2,13", "Invalid expression"}},
		{"unclosed block", "groups {\n  max_queued = 5\n",
			[]string{"t.hcl:1,8", "Unclosed configuration block"}},
		{"unterminated string", "listen = \"127.0.0.1:7878\n",
			[]string{"t.hcl:1,"}},
		{"multi-paragraph detail", "listen = \"${0A\"\n",
			[]string{"t.hcl:1,", "escape it by starting with"}},
		{"unknown attribute", "log_level = \"info\"\nlistn = \"b:2\"\n",
			[]string{"t.hcl:2,1-6", "Unsupported argument", `Did you mean "listen"?`}},
		{"unknown attribute in block", "fanout {\n  buffer = 5\n}\n",
			[]string{"t.hcl:2,3-9", "Unsupported argument", `"buffer"`}},
		{"unknown block", "grops {\n}\n",
			[]string{"t.hcl:1,1-6", "Unsupported block type", `Did you mean "groups"?`}},
		{"group without a name", "group {\n}\n",
			[]string{"t.hcl:1,", "Missing name for group"}},
		{"group without topics", "group \"g\" {\n}\n",
			[]string{"t.hcl:1,1-10", "Missing group topics"}},
		{"group with a bad pattern", "group \"g\" {\n  topics = [\"a..b\"]\n}\n",
			[]string{"t.hcl:2,", "topics"}},
		{"group with a bad size", "group \"g\" {\n  topics = [\"a\"]\n  max_queued_bytes = \"12 parsecs\"\n}\n",
			[]string{"t.hcl:3,22-34", "is not a size"}},
		{"group with a bad ordering", "group \"g\" {\n  topics = [\"a\"]\n  ordering = \"keys\"\n}\n",
			[]string{"t.hcl:3,14-20", "Invalid ordering", `"keys" is not a valid ordering; use "none", "key" or "group"`}},
		{"group with an unquoted ordering", "group \"g\" {\n  topics = [\"a\"]\n  ordering = 1\n}\n",
			[]string{"t.hcl:3,14-15", "Wrong type for ordering", `one of "none", "key" or "group", in quotes; got a number`}},
		{"group with a max_priority over 9", "group \"g\" {\n  topics = [\"a\"]\n  max_priority = 10\n}\n",
			[]string{"t.hcl:3,18-20", "Invalid max_priority", "max_priority 10: at most 9"}},
		{"group with a max_priority of 0", "group \"g\" {\n  topics = [\"a\"]\n  max_priority = 0\n}\n",
			[]string{"t.hcl:3,18-19", "Invalid max_priority", "greater than zero"}},
		{"group with a bad fair_by", "group \"g\" {\n  topics = [\"a\"]\n  fair_by = \"tenant\"\n}\n",
			[]string{"t.hcl:3,13-21", "Invalid fair_by", `"tenant" is not a valid fair_by; use "key"`, `"header:<name>"`}},
		{"group with fair_by a header without a name", "group \"g\" {\n  topics = [\"a\"]\n  fair_by = \"header:\"\n}\n",
			[]string{"t.hcl:3,13-22", "Invalid fair_by", `"header:" is not a valid fair_by`}},
		{"group with an empty fair_by", "group \"g\" {\n  topics = [\"a\"]\n  fair_by = \"\"\n}\n",
			[]string{"t.hcl:3,13-15", "Invalid fair_by", "leave it out for FIFO"}},
		{"ordering in the groups block", "groups {\n  ordering = \"key\"\n}\n",
			[]string{"t.hcl:2,3-11", "Unsupported argument", `"ordering"`}},
		{"duplicate group", "group \"g\" {\n  topics = [\"a\"]\n}\ngroup \"g\" {\n  topics = [\"b\"]\n}\n",
			[]string{"t.hcl:4,7-10", "Duplicate group"}},
		{"memory size zero", "memory {\n  max_bytes = 0\n}\n",
			[]string{"t.hcl:2,15-16", "greater than zero"}},
		{"block label", "groups \"a\" {\n}\n",
			[]string{"t.hcl:1,8-11", "Extraneous label"}},
		{"attribute as block", "listen {\n}\n",
			[]string{"t.hcl:1,1-7", "Unsupported block type"}},
		{"block as attribute", "groups = 5\n",
			[]string{"t.hcl:1,1-7", "Unsupported argument"}},
		{"redefined attribute", "listen = \"a:1\"\nlisten = \"b:2\"\n",
			[]string{"t.hcl:2,1-7", "Attribute redefined"}},
		{"bad duration", "listen = \"a:1\"\nshutdown_grace = \"10 seconds\"\n",
			[]string{"t.hcl:2,18-30", "Invalid duration", `"10 seconds" is not a Go duration`, `"10s"`}},
		{"duration without unit", "groups {\n  ack_deadline = 30\n}\n",
			[]string{"t.hcl:2,18-20", `ack_deadline must be a duration string such as "30s", in quotes; got a number`}},
		{"dedupe window too short", "limits {\n  dedupe_window = \"10ms\"\n}\n",
			[]string{"t.hcl:2", "Invalid dedupe_window", "the smallest is 100ms"}},
		{"zero duration", "keepalive_time = \"0s\"\n",
			[]string{"t.hcl:1,18-22", "keepalive_time must be greater than zero"}},
		{"negative duration", "keepalive_timeout = \"-5s\"\n",
			[]string{"t.hcl:1,21-26", "keepalive_timeout must be greater than zero"}},
		{"bad enum", "groups {\n  overflow = \"drop\"\n}\n",
			[]string{"t.hcl:2,14-20", "Invalid overflow", `"drop" is not a valid overflow`, `use "reject" or "drop_oldest"`}},
		{"bad log level", "log_level = \"verbose\"\n",
			[]string{"t.hcl:1,13-22", `use "trace", "debug", "info", "warn" or "error"`}},
		{"bad log format", "log_format = \"JSON\"\n",
			[]string{"t.hcl:1,14-20", `use "text" or "json"`}},
		{"bad slow consumer", "fanout {\n  slow_consumer = \"block\"\n}\n",
			[]string{"t.hcl:2,19-26", `use "disconnect" or "drop"`}},
		{"negative number", "max_header_bytes = -5\n",
			[]string{"t.hcl:1,20-22", "max_header_bytes must be greater than zero; got -5"}},
		{"zero number", "fanout {\n  buffer_messages = 0\n}\n",
			[]string{"t.hcl:2,21-22", "buffer_messages must be greater than zero"}},
		{"fraction", "max_message_bytes = 1.5\n",
			[]string{"t.hcl:1,21-24", "Invalid max_message_bytes", "must be a whole number; got 1.5"}},
		{"huge number", "max_message_bytes = 1e40\n",
			[]string{"t.hcl:1,21-25", "Number out of range", "less than 2^64"}},
		{"just too large", "groups {\n  max_in_flight_cap = 9223372036854775808\n}\n",
			[]string{"t.hcl:2,23-42", "max_in_flight_cap is too large", "the most is 9223372036854775807"}},
		{"max_deliveries over the cap", "group \"g\" {\n  topics = [\"a\"]\n  max_deliveries = 4294967295\n}\n",
			[]string{"t.hcl:3,20-30", "Invalid max_deliveries", "over the limit of 1000 (groups { max_deliveries_cap })"}},
		{"max_deliveries over a cap set later", "group \"g\" {\n  topics = [\"a\"]\n  max_deliveries = 11\n}\ngroups {\n  max_deliveries_cap = 10\n}\n",
			[]string{"t.hcl:3,20-22", "over the limit of 10"}},
		{"redelivery max under min", "groups {\n  redelivery_delay_min = \"1s\"\n  redelivery_delay_max = \"10ms\"\n}\n",
			[]string{"t.hcl:3,26-32", "redelivery_delay_max (10ms) is under redelivery_delay_min (1s)"}},
		{"group redelivery max under the groups min", "groups {\n  redelivery_delay_min = \"1s\"\n}\ngroup \"g\" {\n  topics = [\"a\"]\n  redelivery_delay_max = \"10ms\"\n}\n",
			[]string{"t.hcl:6,26-32", "is under redelivery_delay_min"}},
		{"empty backoff list", "groups {\n  redelivery_backoff = []\n}\n",
			[]string{"t.hcl:2,24-26", "Empty redelivery_backoff", "give at least one delay"}},
		{"backoff list too long", "groups {\n  redelivery_backoff = [\"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\"]\n}\n",
			[]string{"t.hcl:2,24-", "redelivery_backoff has 33 entries; the most is 32"}},
		{"backoff entry zero", "group \"g\" {\n  topics = [\"a\"]\n  redelivery_backoff = [\"1s\", \"0s\"]\n}\n",
			[]string{"t.hcl:3,31-35", `entry 2 of redelivery_backoff, "0s", is not a Go duration greater than zero`}},
		{"backoff entry not a duration", "groups {\n  redelivery_backoff = [\"soon\"]\n}\n",
			[]string{"t.hcl:2,25-31", `"soon", is not a Go duration`}},
		{"backoff not a list", "groups {\n  redelivery_backoff = \"1s\"\n}\n",
			[]string{"t.hcl:2,24-28", "must be a list of durations"}},
		{"jitter of 1", "groups {\n  redelivery_jitter = 1\n}\n",
			[]string{"t.hcl:2,23-24", "Invalid redelivery_jitter", "from 0 up to (not including) 1", "got 1"}},
		{"negative jitter", "group \"g\" {\n  topics = [\"a\"]\n  redelivery_jitter = -0.5\n}\n",
			[]string{"t.hcl:3,23-27", "got -0.5"}},
		{"backoff list beside a min", "groups {\n  redelivery_delay_min = \"1s\"\n  redelivery_backoff = [\"1s\"]\n}\n",
			[]string{"t.hcl:3,24-30", "Conflicting redelivery settings", "set the list, or the min and max, not both"}},
		{"group's backoff list beside its max", "group \"g\" {\n  topics = [\"a\"]\n  redelivery_delay_max = \"5s\"\n  redelivery_backoff = [\"1s\"]\n}\n",
			[]string{"t.hcl:1,1-10", "redelivery_backoff is set beside redelivery_delay_min or redelivery_delay_max"}},
		{"bad on_expire", "groups {\n  on_expire = \"discard\"\n}\n",
			[]string{"t.hcl:2,15-24", `"discard" is not a valid on_expire; use "dead_letter" or "drop"`}},
		{"bad group max_age", "group \"g\" {\n  topics = [\"a\"]\n  max_age = \"0s\"\n}\n",
			[]string{"t.hcl:3,13-17", "max_age must be greater than zero"}},
		{"group max_age not a duration", "group \"g\" {\n  topics = [\"a\"]\n  max_age = \"a day\"\n}\n",
			[]string{"t.hcl:3,13-20", `"a day" is not a Go duration`}},
		{"wrong type", "groups {\n  max_queued = \"many\"\n}\n",
			[]string{"t.hcl:2,16-22", "Wrong type for max_queued", "must be a whole number greater than zero, written without quotes; got a string"}},
		{"quoted number", "max_header_bytes = \"100\"\n",
			[]string{"t.hcl:1,20-25", "without quotes"}},
		{"number for string", "listen = 7878\n",
			[]string{"t.hcl:1,10-14", "Wrong type for listen", "in quotes; got a number"}},
		{"bool for string", "log_format = true\n",
			[]string{"t.hcl:1,14-18", "in quotes; got a bool"}},
		{"bool for number", "max_header_bytes = true\n",
			[]string{"t.hcl:1,20-24", "got a bool"}},
		{"list for string", "listen = [\"a:1\"]\n",
			[]string{"t.hcl:1,10-17", "Not a constant"}},
		{"null for number", "max_header_bytes = null\n",
			[]string{"t.hcl:1,20-24", "Wrong type for max_header_bytes", "got null"}},
		{"heredoc keeps its newline", "listen = <<EOT\n:7878\nEOT\n",
			[]string{"t.hcl:1,10-3,4", `port "7878\n"`}},
		{"unquoted string", "log_level = debug\n",
			[]string{"t.hcl:1,13-18", "Unquoted string", `write "debug" rather than debug`}},
		{"interpolation", "listen = \"${\"a\"}:1\"\n",
			[]string{"t.hcl:1,13-16", "Interpolation not allowed", "Write $${ or %%{"}},
		{"template directive", "listen = \"%{if true}a:1%{endif}\"\n",
			[]string{"t.hcl:1,11", "Interpolation not allowed"}},
		{"number in interpolation", "listen = \"${1e999999999}\"\n",
			[]string{"t.hcl:1,13-24", "Interpolation not allowed"}},
		{"for expression", "listen = [for x in [1]: x]\n",
			[]string{"t.hcl:1,10-27", "Not a constant"}},
		{"conditional", "max_header_bytes = true ? 1 : 2\n",
			[]string{"t.hcl:1,20-32", "Not a constant"}},
		{"bad arithmetic", "max_header_bytes = 1 + \"x\"\n",
			[]string{"t.hcl:1,"}},
		{"modulo", "max_header_bytes = 1e300000000 % 1e-300000000\n",
			[]string{"t.hcl:1,20-46", "Not a constant"}},
		{"logical not", "max_header_bytes = !true\n",
			[]string{"t.hcl:1,20-25", "Not a constant"}},
		{"comparison", "max_header_bytes = 1 == 1\n",
			[]string{"t.hcl:1,20-26", "Not a constant"}},
		{"infinity", "max_header_bytes = 1e19 / 0\n",
			[]string{"t.hcl:1,20-28", "max_header_bytes is too large; the most is 9223372036854775807"}},
		{"slow arithmetic", "max_header_bytes = 1e300000000 + 1e-300000000\n",
			[]string{"t.hcl:1,20-31", "Number out of range"}},
		{"division by zero", "max_header_bytes = 1 / 0\n",
			[]string{"t.hcl:1,"}},
		{"huge exponent", "max_message_bytes = 1e999999999\n",
			[]string{"t.hcl:1,21-32", "Number out of range"}},
		{"very large", "max_message_bytes = " + strings.Repeat("1e19 * ", 17) + "1\n",
			[]string{"t.hcl:1,21-141", "max_message_bytes is too large; got a number with more than 300 digits"}},
		{"tiny fraction", "max_message_bytes = 1e-999999999\n",
			[]string{"t.hcl:1,21-33", "must be greater than zero; got 0."}},
		{"very small", "max_message_bytes = " + strings.Repeat("1e-19 * ", 17) + "1\n",
			[]string{"t.hcl:1,21-158", "must be a whole number; got a number too close to zero to show"}},
		{"huge exponent for a duration", "shutdown_grace = 1e999999999\n",
			[]string{"t.hcl:1,18-29", "Number out of range"}},
		{"null", "log_level = null\n",
			[]string{"t.hcl:1,13-17", "Wrong type for log_level", "got null"}},
		{"variable", "listen = var.addr\n",
			[]string{"t.hcl:1,10-18", "Not a constant"}},
		{"function call", "listen = upper(\"a:1\")\n",
			[]string{"t.hcl:1,10-22", "Not a constant"}},
		{"bad listen address", "listen = \"localhost\"\n",
			[]string{"t.hcl:1,10-21", "Invalid listen address", `"localhost" is not host:port`, "missing port"}},
		{"bad listen port", "listen = \"localhost:http\"\n",
			[]string{"t.hcl:1,10-26", "Invalid listen address", `port "http"`, "0 to 65535"}},
		{"listen port out of range", "listen = \":70000\"\n",
			[]string{"t.hcl:1,10-18", "0 to 65535"}},
		{"two groups blocks", "groups {\n  max_queued = 1\n}\ngroups {\n  max_queued = 2\n}\n",
			[]string{"t.hcl:4,1-7", "Duplicate groups block", "first one, at t.hcl:1,1-7"}},
		{"two fanout blocks", "fanout {}\nfanout {}\n",
			[]string{"t.hcl:2,1-7", "Duplicate fanout block"}},
		{"fanout buffer smaller than a message", "max_message_bytes = 4096\nfanout {\n  buffer_bytes = 1024\n}\n",
			[]string{"t.hcl:3,18-22", "buffer_bytes (1024) is less than max_message_bytes (4096)"}},
		{"message larger than default buffer", "max_message_bytes = 100000000\n",
			[]string{"t.hcl:1,21-30", "less than max_message_bytes (100000000)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.src), "t.hcl")
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Errorf("Parse returned a non-zero Config with its error: %+v", c)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\ndoes not contain %q", msg, w)
				}
			}
			checkEveryLineHasPosition(t, msg, "t.hcl")
		})
	}
}

func checkEveryLineHasPosition(t *testing.T, msg, filename string) {
	t.Helper()
	for _, line := range strings.Split(msg, "\n") {
		if !strings.HasPrefix(line, filename+":") {
			t.Errorf("error line %q does not start with %s:LINE,COL", line, filename)
		}
	}
}

// TestParseManyErrors checks that every problem is reported, in file order, one per line.
func TestParseManyErrors(t *testing.T) {
	src := "log_level = \"loud\"\nlistn = \"x\"\ngroups {\n  max_queued = -1\n  overflow = \"nope\"\n}\n"
	_, err := Parse([]byte(src), "t.hcl")
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"t.hcl:1,13", "t.hcl:2,1", "t.hcl:4,16", "t.hcl:5,14"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want prefix %q", i+1, lines[i], w)
		}
	}
	var diags hcl.Diagnostics
	if !errors.As(err, &diags) || len(diags) != len(want) {
		t.Errorf("errors.As(err, *hcl.Diagnostics) = %v", diags)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tb.hcl")
	if err := os.WriteFile(path, []byte(fullFile), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "[::1]:9000" {
		t.Errorf("Listen = %q", c.Listen)
	}

	if err := os.WriteFile(path, []byte("listen = \"nope\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path+":1,10-16") {
		t.Errorf("Load of a bad file: error %v does not name %s:1,10-16", err, path)
	}
}

func TestLoadMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.hcl")
	c, err := Load(path)
	if err == nil {
		t.Fatalf("Load of a missing file succeeded: %+v", c)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v is not os.ErrNotExist", err)
	}
}

// TestExampleFile checks that the example configuration parses and shows the defaults.
func TestExampleFile(t *testing.T) {
	c, err := Load("../../../examples/config/tinybroker.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("example file = %+v\nDefault()  = %+v", c, Default())
	}
}

func FuzzConfig(f *testing.F) {
	f.Add([]byte(fullFile))
	if src, err := os.ReadFile("../../../examples/config/tinybroker.hcl"); err == nil {
		f.Add(src)
	}
	for _, s := range []string{
		"",
		"listen = \"localhost\"\n",
		"log_level = = \"info\"\n",
		"shutdown_grace = \"10 seconds\"\n",
		"groups {\n  max_queued = \"many\"\n  overflow = \"drop\"\n}\ngroups {}\n",
		"fanout \"x\" {\n  buffer_bytes = -1\n}\n",
		"max_message_bytes = 1e40\nlisten = upper(x)\n",
		"listen = [for v in [1, 2]: v]\n",
		"listen = \"${1e999}\"\nmax_header_bytes = 1e999 % 7\n",
		"groups {\n  max_queued = 5\n",
		"x = \"${\"\n",
		"A=\"0\"\nA=\"0${0A",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := Parse(src, "fuzz.hcl")
		if err != nil {
			msg := err.Error()
			if msg == "" {
				t.Fatal("empty error message")
			}
			checkEveryLineHasPosition(t, msg, "fuzz.hcl")
			return
		}
		if c.Listen == "" || c.ShutdownGrace <= 0 || c.KeepaliveTime <= 0 || c.KeepaliveTimeout <= 0 ||
			c.Broker.MaxMessageBytes <= 0 || c.Broker.MaxHeaderBytes <= 0 || c.Broker.GroupMaxQueued <= 0 ||
			c.Broker.AckDeadline <= 0 || c.Broker.MaxInFlightCap <= 0 || c.Broker.FanoutBufferMessages <= 0 ||
			c.Broker.FanoutBufferBytes < c.Broker.MaxMessageBytes {
			t.Fatalf("Parse accepted an invalid configuration: %+v", c)
		}
	})
}

func TestGroupsAndMemory(t *testing.T) {
	src := `
memory {
  max_bytes = "2GiB"
}
groups {
  max_queued_bytes = 1048576
}
group "resizers" {
  topics            = ["jobs.thumb.*", "jobs.resize.>"]
  max_deliveries    = 5
  max_queued_bytes  = "64MiB"
  overflow          = "drop_oldest"
  ordering          = "key"
  fair_by           = "header:tenant"
}
group "billing" {
  subscription_id   = "billing-v2"
  topics            = ["pay.>"]
  dead_letter_topic = "dlq.pay"
  fair_by           = "key"
}
group "single" {
  topics   = ["one.>"]
  ordering = "group"
}
group "plain" {
  topics   = ["plain.>"]
  ordering = "none"
}
`
	c := mustParse(t, src, "t.hcl")
	if c.Broker.MaxMemoryBytes != 2<<30 || c.Broker.GroupMaxQueuedBytes != 1<<20 {
		t.Fatalf("memory %d, group bytes %d", c.Broker.MaxMemoryBytes, c.Broker.GroupMaxQueuedBytes)
	}
	want := []broker.GroupConfig{
		{ID: "resizers", Name: "resizers", Patterns: []string{"jobs.thumb.*", "jobs.resize.>"}, MaxDeliveries: 5,
			Limits:   broker.GroupLimits{MaxQueuedBytes: 64 << 20, Overflow: broker.OverflowDropOldest},
			Dispatch: broker.Dispatch{Ordering: broker.OrderingKey, FairBy: "header:tenant"}},
		{ID: "billing-v2", Name: "billing", Patterns: []string{"pay.>"}, DeadLetterTopic: "dlq.pay", Dispatch: broker.Dispatch{FairBy: "key"}},
		{ID: "single", Name: "single", Patterns: []string{"one.>"}, Dispatch: broker.Dispatch{Ordering: broker.OrderingGroup}},
		{ID: "plain", Name: "plain", Patterns: []string{"plain.>"}},
	}
	if !reflect.DeepEqual(c.Groups, want) {
		t.Fatalf("groups\n%+v\nwant\n%+v", c.Groups, want)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1": 1, "512MiB": 512 << 20, "2 GiB": 2 << 30, "64MB": 64e6, "10KiB": 10 << 10, "7B": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1MiB", "1.5GiB", "MiB", "1 parsec", "99999999999TiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}

// The redelivery settings (issue 23, finding 6): the groups block's, a declared group's own,
// "none" turning the back-off off, and a max_deliveries cap that a declared group may reach.
func TestRedeliverySettings(t *testing.T) {
	c := mustParse(t, `groups {
  redelivery_delay_min = "none"
  redelivery_delay_max = "1m"
  max_deliveries_cap   = 5000
}
group "g" {
  topics               = ["a"]
  max_deliveries       = 5000
  redelivery_delay_min = "2s"
}
`, "t.hcl")
	if o := c.Broker; o.GroupRedeliveryDelayMin != -1 || o.GroupRedeliveryDelayMax != time.Minute || o.MaxDeliveriesCap != 5000 {
		t.Errorf("groups: %+v", o.Limits)
	}
	if l := c.Groups[0].Limits; l.RedeliveryDelayMin != 2*time.Second || c.Groups[0].MaxDeliveries != 5000 {
		t.Errorf("group: %+v", c.Groups[0])
	}
}

// The back-off policy (issue 28): an explicit list and a jitter, in the groups block and a
// declared group's own; a group's jitter of 0 turns off the groups block's.
func TestRedeliveryBackoffSettings(t *testing.T) {
	c := mustParse(t, `groups {
  redelivery_backoff = ["1s", "5s", "30s"]
  redelivery_jitter  = 0.2
}
group "g" {
  topics             = ["a"]
  redelivery_backoff = ["250ms"]
  redelivery_jitter  = 0
}
`, "t.hcl")
	s := time.Second
	if o := c.Broker; !slices.Equal(o.GroupRedeliveryBackoff, []time.Duration{s, 5 * s, 30 * s}) || o.GroupRedeliveryJitter != 0.2 {
		t.Errorf("groups: %v %v", o.GroupRedeliveryBackoff, o.GroupRedeliveryJitter)
	}
	l := c.Groups[0].Limits
	if !slices.Equal(l.RedeliveryBackoff, []time.Duration{250 * time.Millisecond}) || l.RedeliveryJitter != broker.NoJitter {
		t.Errorf("group: %v %v", l.RedeliveryBackoff, l.RedeliveryJitter)
	}
	if got := l.Or(c.Broker.WithGroupDefaults(1, 1).GroupLimits()).RedeliveryDelay(0, 7, 1); got != 250*time.Millisecond {
		t.Errorf("the group's policy in force: %v", got)
	}
}

// Message expiry (issue 28): max_age and on_expire in the groups block, the broker-wide
// defaults, and in a declared group's own.
func TestExpirySettings(t *testing.T) {
	c := mustParse(t, `groups {
  max_age   = "24h"
  on_expire = "drop"
}
group "g" {
  topics    = ["a"]
  max_age   = "90s"
  on_expire = "dead_letter"
}
`, "t.hcl")
	if o := c.Broker; o.GroupMaxAge != 24*time.Hour || o.GroupOnExpire != "drop" {
		t.Errorf("groups: max_age %v on_expire %q", o.GroupMaxAge, o.GroupOnExpire)
	}
	if l := c.Groups[0].Limits; l.MaxAge != 90*time.Second || l.OnExpire != "dead_letter" {
		t.Errorf("group: max_age %v on_expire %q", l.MaxAge, l.OnExpire)
	}
}

// The dead-letter breaker (issue 29): broker-wide in groups, per group in group, and one
// past its bound refused with the file's position.
func TestBreakerSettings(t *testing.T) {
	c := mustParse(t, `groups {
  dead_letter_breaker        = 100
  dead_letter_breaker_window = "30s"
}
group "g" {
  topics              = ["a"]
  dead_letter_breaker = 5
}
`, "t.hcl")
	if o := c.Broker; o.GroupDeadLetterBreaker != 100 || o.GroupDeadLetterBreakerWindow != 30*time.Second {
		t.Errorf("groups: dead_letter_breaker %d within %v", o.GroupDeadLetterBreaker, o.GroupDeadLetterBreakerWindow)
	}
	if l := c.Groups[0].Limits; l.DeadLetterBreaker != 5 {
		t.Errorf("group: dead_letter_breaker %d", l.DeadLetterBreaker)
	}
	_, err := Parse([]byte("group \"g\" {\n  topics = [\"a\"]\n  dead_letter_breaker = 20000\n}\n"), "t.hcl")
	if err == nil || !strings.Contains(err.Error(), "dead_letter_breaker 20000 is out of range") || !strings.Contains(err.Error(), "t.hcl:") {
		t.Errorf("a breaker past its bound: %v", err)
	}
}
