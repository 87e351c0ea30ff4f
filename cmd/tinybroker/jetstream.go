package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
)

// jetStreamOptions maps the configuration onto the JetStream engine's options: its engine
// block, and the limits and fanout settings the engines share.
func jetStreamOptions(cfg config.Config, log hclog.Logger) (jetstream.Options, error) {
	j := cfg.JetStream
	o := jetstream.Options{
		Limits:               cfg.Broker.Limits,
		URL:                  j.URL,
		Replicas:             j.Replicas,
		MemoryStorage:        j.MemoryStorage,
		MaxBytes:             j.MaxBytes,
		Prefix:               j.Prefix,
		Stream:               j.Stream,
		FanoutBufferMessages: cfg.Broker.FanoutBufferMessages,
		FanoutBufferBytes:    cfg.Broker.FanoutBufferBytes,
		DropSlowConsumers:    cfg.Broker.SlowConsumer == memory.SlowConsumerDrop,
		Logger:               log,
		Embedded: jetstream.EmbeddedOptions{DataDir: j.DataDir, Name: j.ServerName, ClusterName: j.ClusterName,
			ClusterListen: j.ClusterListen, Routes: j.Routes, Listen: j.NATSListen},
	}
	if j.MemoryStorage && j.URL == "" {
		// What the embedded server keeps in memory storage is held as the memory engine's
		// budget is: by default a quarter of GOMEMLIMIT (its heap is twice what it holds),
		// not JetStream's default of 3/4 of the machine. A larger max_bytes is the operator's
		// choice; the dead letters then get 64 MiB beside it.
		o.Embedded.MaxMemoryStore = max(memory.DefaultMemoryLimit(), j.MaxBytes+64<<20)
	}
	if j.Credentials != "" {
		o.NATSOptions = append(o.NATSOptions, nats.UserCredentials(j.Credentials))
	}
	if j.TLSCAFile != "" {
		o.NATSOptions = append(o.NATSOptions, nats.RootCAs(j.TLSCAFile))
	}
	if j.TLSCertFile != "" {
		o.NATSOptions = append(o.NATSOptions, nats.ClientCert(j.TLSCertFile, j.TLSKeyFile))
	}
	return o, nil
}
