package main

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
)

// The groups block reaches the JetStream engine as it reaches the memory engine.
func TestJetStreamOptionsTakeGroupSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(`
engine "jetstream" {
  url     = "nats://127.0.0.1:4222"
  storage = "memory"
  max_bytes = "5MiB"
}
groups {
  max_queued             = 7
  max_queued_bytes       = "3MiB"
  overflow               = "drop_oldest"
  expire_after           = "90s"
  dead_letters_max       = 5
  dead_letters_max_bytes = "1MiB"
}
`), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	o, err := jetStreamOptions(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if o.GroupMaxQueued != 7 || o.GroupMaxQueuedBytes != 3<<20 || o.GroupOverflow != broker.OverflowDropOldest ||
		o.GroupExpireAfter != 90*time.Second || o.GroupDeadLetterMax != 5 || o.GroupDeadLetterMaxBytes != 1<<20 {
		t.Fatalf("groups settings did not reach the JetStream engine: %+v", o)
	}
	if !o.MemoryStorage || o.MaxBytes != 5<<20 {
		t.Fatalf(`storage = "memory" or max_bytes = "5MiB" did not reach the JetStream engine: %v, %d`, o.MemoryStorage, o.MaxBytes)
	}
}

// The embedded server's memory storage holds at most the memory engine's default budget (a
// quarter of GOMEMLIMIT), or max_bytes and 64 MiB for dead letters if that is larger; file
// storage and an external server are left to JetStream.
func TestJetStreamMemoryStoreBound(t *testing.T) {
	for _, tc := range []struct {
		block string
		want  int64
	}{
		{`storage = "memory"` + "\n" + `data_dir = "d"`, memory.DefaultMemoryLimit()},
		{`storage = "memory"` + "\n" + `data_dir = "d"` + "\n" + `max_bytes = "1TiB"`, 1<<40 + 64<<20},
		{`storage = "file"` + "\n" + `data_dir = "d"`, 0},
		{`storage = "memory"` + "\n" + `url = "nats://127.0.0.1:4222"`, 0},
	} {
		cfg, err := config.Parse([]byte("engine \"jetstream\" {\n"+tc.block+"\n}\n"), "test.hcl")
		if err != nil {
			t.Fatal(err)
		}
		o, err := jetStreamOptions(cfg, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if o.Embedded.MaxMemoryStore != tc.want {
			t.Errorf("%s: MaxMemoryStore %d, want %d", tc.block, o.Embedded.MaxMemoryStore, tc.want)
		}
	}
}
