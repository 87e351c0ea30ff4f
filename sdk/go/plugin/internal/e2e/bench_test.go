package e2e_test

import (
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
)

// BenchmarkPublish measures what a Go plugin adds to a publish (with no subscriber, so
// routing costs little): "none" has no plugin; content-router reads one header per message;
// tenant-filter reads one header and is configured; redact reads and rewrites the payload.
func BenchmarkPublish(b *testing.B) {
	cases := []struct {
		name   string
		spec   *plugins.Spec
		topic  string
		header map[string]string
		body   string
	}{
		{"none", nil, "orders.created", map[string]string{"priority": "high", "tenant": "acme"}, "{}"},
		{"content-router", &plugins.Spec{Name: "content-router"}, "orders.created", map[string]string{"priority": "low"}, "{}"},
		{"content-router-reroute", &plugins.Spec{Name: "content-router"}, "orders.created", map[string]string{"priority": "high"}, "{}"},
		{"tenant-filter", &plugins.Spec{Name: "tenant-filter", Config: map[string]string{"allow": "acme"}}, "orders.created", map[string]string{"tenant": "acme"}, "{}"},
		{"redact", &plugins.Spec{Name: "redact", Config: map[string]string{"fields": "password"}}, "users.created", nil, `{"name":"ann","password":"hunter2","age":42}`},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var br broker.Engine
			if c.spec == nil {
				br = brokertest.Start(b, brokertest.Options{})
			} else {
				spec := *c.spec
				spec.Wasm = wasm(b, spec.Name)
				br = start(b, spec).b
			}
			payload := []byte(c.body)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := br.Publish(c.topic, payload, c.header); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
