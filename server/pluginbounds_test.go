package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// loopChain loads plugins/testdata/loop.wasm (on_publish never returns) on loop.>, with the
// default call_timeout, failing closed.
func loopChain(t *testing.T) *plugins.Chain {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "plugins", "testdata", "loop.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := plugins.NewHost(plugins.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.Load(context.Background(), []plugins.Spec{{Name: "loop", Wasm: wasm, Topics: []string{"loop.>"},
		FailurePolicy: plugins.FailClosed}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // stop what still runs
		_ = c.Close(ctx)
		_ = h.Close(context.Background())
	})
	return c
}

// Finding 1 of issue 23: with the defaults, a plugin whose on_publish loops forever costs
// each publish on its topics its call_timeout and then fails it through its policy
// (fail_closed: UNAVAILABLE naming call_timeout); a canary on other topics is served
// throughout. Before, the call never returned and the broker froze.
func TestLoopingPluginAtTheDefaults(t *testing.T) {
	tb := start(t, brokertest.Options{Hooks: loopChain(t)})
	c := newCanary(t, tb)
	for range 2 {
		done := make(chan error, 1)
		go func() {
			_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "loop.x", Payload: []byte("x")})
			done <- err
		}()
		c.check() // while the looping call runs
		err := brokertest.Receive(t, done, "the looping publish to be answered")
		wantCode(t, err, codes.Unavailable, "call_timeout")
		if !strings.Contains(err.Error(), `"loop"`) {
			t.Fatalf("the error does not name the plugin: %v", err)
		}
	}
	c.check()
}
