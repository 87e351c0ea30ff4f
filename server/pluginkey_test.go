package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// keyChain loads plugins/testdata/keytenant.wasm on orders.>: it sets the key from the
// "tenant" header, notes the key the message came with in "key-was", emits
// audit.published keyed by the tenant, and on_ack emits audit.acked whose payload and key
// are the acked message's key.
func keyChain(t *testing.T) *plugins.Chain {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "plugins", "testdata", "keytenant.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := plugins.NewHost(plugins.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.Load(context.Background(), []plugins.Spec{{Name: "keys", Wasm: wasm, Topics: []string{"orders.>"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		_ = h.Close(context.Background())
	})
	return c
}

// Issue 27: a plugin sets a message's ordering key on publish (v1_msg_set_key); the
// subscribers get it as Message.key, the plugin's emits carry the keys it gave them
// (v1_emit_key), and its on_publish and on_ack read the message's key (v1_msg_key). A key the
// broker would refuse is refused to the plugin, which here rejects the publish.
func TestPluginSetsKeyOverGRPC(t *testing.T) {
	tb := start(t, brokertest.Options{Hooks: keyChain(t)})
	// The emits are taken by a consumer group: keys are for groups (ordering, fair_by).
	audit := tb.open(t, balanced("audit", "audit", 10, "audit.>"))
	workers := tb.open(t, balanced("workers", "workers", 10, "orders.>"))

	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "orders.1", Payload: []byte("x"),
		Headers: map[string]string{"tenant": "acme"}, Key: "publisher-key"})
	if err != nil {
		t.Fatal(err)
	}
	m := workers.next()
	if m.GetKey() != "acme" || m.GetHeaders()["key-was"] != "publisher-key" {
		t.Fatalf("delivered key %q, key-was %q: want the plugin's acme, and publisher-key read in on_publish", m.GetKey(), m.GetHeaders()["key-was"])
	}
	if e := audit.next(); e.GetTopic() != "audit.published" || e.GetKey() != "acme" {
		t.Fatalf("emitted %s with key %q, want audit.published keyed acme", e.GetTopic(), e.GetKey())
	}
	workers.ack(m.GetSystemId())
	if e := audit.next(); e.GetTopic() != "audit.acked" || string(e.GetPayload()) != "acme" || e.GetKey() != "acme" {
		t.Fatalf("on_ack emitted %s %q with key %q, want audit.acked \"acme\" keyed acme", e.GetTopic(), e.GetPayload(), e.GetKey())
	}

	// Without a tenant the publisher's key stays.
	if _, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "orders.2", Key: "own"}); err != nil {
		t.Fatal(err)
	}
	if m := workers.next(); m.GetKey() != "own" {
		t.Fatalf("delivered key %q, want the publisher's own", m.GetKey())
	}

	for tenant, want := range map[string]string{"a\tb": "key refused: ERR_INVALID", strings.Repeat("t", 300): "key refused: ERR_TOO_LARGE"} {
		_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "orders.3", Headers: map[string]string{"tenant": tenant}})
		wantCode(t, err, codes.InvalidArgument, want)
	}
	workers.none(20 * time.Millisecond)
}
