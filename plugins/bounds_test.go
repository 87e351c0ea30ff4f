package plugins

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// callInBackground runs c.OnPublish in a goroutine and returns where its error will come.
func callInBackground(c *Chain, topic string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.OnPublish(&broker.Draft{Topic: topic, Payload: []byte("x")})
		done <- err
	}()
	return done
}

// With the config's defaults, a looping plugin's call is stopped after DefaultCallTimeout
// and fails as a timeout (its failure policy applies), and the instance is thrown away.
// Before, the default was no limit: the call never returned.
func TestLoopStoppedByDefault(t *testing.T) {
	h := newHost(t)
	c := load(t, h, Spec{Name: "loop", Wasm: fixture(t, "loop"), FailurePolicy: FailClosed})
	err := brokertest.Receive(t, callInBackground(c, "a"), "the looping call to be stopped")
	if want := (timeoutError{DefaultCallTimeout}).Error(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("looping call: %v, want %q", err, want)
	}
	if kinds := c.Metrics()[0].Hooks[0].Failures; kinds[FailTimeout] != 1 {
		t.Fatalf("failures by kind %v, want one timeout", kinds)
	}
}

// With call_timeout = "none", a looping call is still stopped when its plugin is closed (a
// reload, shutdown), once the caller's grace period is over: Close returns.
func TestLoopStoppedOnClose(t *testing.T) {
	h := newHost(t)
	c, err := h.Load(context.Background(), []Spec{{Name: "loop", Wasm: fixture(t, "loop"), CallTimeout: NoCallTimeout, FailurePolicy: FailClosed}})
	if err != nil {
		t.Fatal(err)
	}
	done := callInBackground(c, "a")
	brokertest.Eventually(t, "the call to start", func() bool { return h.cores.busy.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- c.Close(ctx) }()
	brokertest.Receive(t, closed, "Close to return")
	if err := brokertest.Receive(t, done, "the looping call to be stopped"); err == nil || !strings.Contains(err.Error(), errUnloading.Error()) {
		t.Fatalf("looping call: %v, want %v", err, errUnloading)
	}
}

// Guest code never runs on more goroutines at once than the broker allows plugins
// (GOMAXPROCS-1, at least 1): with call_timeout = "none" and more looping calls than that,
// the others wait for a core, then fail with a busy error, through the plugin's failure
// policy, while the looping ones keep theirs.
func TestCoresBoundPluginCalls(t *testing.T) {
	h := newHost(t)
	h.cores = &cores{max: 2} // whatever the machine's cores
	c := load(t, h, Spec{Name: "loop", Wasm: fixture(t, "loop"), CallTimeout: NoCallTimeout, PoolSize: 4, BreakerFailures: 100, FailurePolicy: FailClosed})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			_, err := c.OnPublish(&broker.Draft{Topic: "a"})
			errs <- err
		})
	}
	for range 2 {
		want := (busyError{2, noLimitWait}).Error()
		if err := brokertest.Receive(t, errs, "a call to find no core"); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("call beyond the cores: %v, want %q", err, want)
		}
	}
	if n := h.cores.busy.Load(); n != 2 {
		t.Fatalf("%d calls run guest code, want 2", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.Close(ctx) // stops the two looping calls
	wg.Wait()
	if n := h.cores.busy.Load(); n != 0 {
		t.Fatalf("%d cores still taken after the calls ended", n)
	}
}

// A plugin whose header changes leave a message over max_headers fails its call: its
// failure policy applies (and its breaker counts it), and the error names the plugin and
// the limit. Before, the publish failed INVALID_ARGUMENT, blamed on the publisher.
func TestHeaderChangesPastTheLimitsFailThePlugin(t *testing.T) {
	h, err := NewHost(HostOptions{MaxHeaders: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	for _, policy := range []FailurePolicy{FailClosed, FailOpen} {
		c := load(t, h, Spec{Name: "tag", Wasm: fixture(t, "tag"), Config: map[string]string{"tag": "x"}, FailurePolicy: policy})
		d := broker.Draft{Topic: "a", Headers: broker.Headers{{Key: "tenant", Value: "acme"}}}
		v, err := c.OnPublish(&d)
		switch policy {
		case FailClosed:
			if err == nil || !strings.Contains(err.Error(), `"tag"`) || !strings.Contains(err.Error(), "max_headers") || !errors.Is(err, broker.ErrHookFailed) {
				t.Fatalf("fail_closed: %v, want the plugin's failure naming max_headers", err)
			}
		case FailOpen:
			if err != nil || v.Drop || len(d.Headers) != 1 {
				t.Fatalf("fail_open: %v %+v, headers %v: want the message unchanged", err, v, d.Headers)
			}
		}
		if st := c.Stats()[0]; st.Failures != 1 {
			t.Fatalf("%s: failures %d, want 1", policy, st.Failures)
		}
	}
}
