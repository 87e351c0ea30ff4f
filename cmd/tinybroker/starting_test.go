package main

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
	"github.com/tinybroker/tinybroker/server"
)

// A node whose cluster cannot be reached yet serves NOT_SERVING and refuses calls with
// UNAVAILABLE instead of exiting, keeps trying, and serves once its engine starts: with the
// plugins' hooks installed meanwhile and the declared groups (issue 25, finding 2).
func TestStartingEngineWaitsForTheCluster(t *testing.T) {
	defer func(b time.Duration) { startingBackoff = b }(startingBackoff)
	startingBackoff = 10 * time.Millisecond
	var reachable atomic.Bool
	attempts := atomic.Int32{}
	start := func() (broker.Engine, error) {
		attempts.Add(1)
		if !reachable.Load() {
			return nil, fmt.Errorf("%w: context deadline exceeded", broker.ErrUnavailable)
		}
		return memory.New(memory.Options{}), nil
	}
	declare := func(b broker.Engine) error {
		return b.Declare(broker.GroupConfig{Name: "declared", Patterns: []string{"d.>"}})
	}
	e := newStartingEngine(fmt.Errorf("%w: context deadline exceeded", broker.ErrUnavailable), start, declare, hclog.NewNullLogger())
	hooks := &countingHooks{}
	e.SetHooks(hooks) // as the plugin manager does, before the engine started

	srv := server.New(e, 1<<20, server.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		<-served
	}()
	conn := servertest.Dial(t, lis.Addr().String())
	health := healthpb.NewHealthClient(conn)
	c, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	brokertest.Eventually(t, "a few attempts", func() bool { return attempts.Load() >= 3 })
	if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while the engine has not started: %v, %v, want NOT_SERVING", r, err)
	}
	if _, err := c.Publish(ctx, "d.x", nil, nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("publish before the engine started: %v, want UNAVAILABLE", err)
	}
	_, err = c.Subscribe(ctx, client.SubscribeOptions{Patterns: []string{"d.>"}}, func(context.Context, *client.Message) error { return nil })
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("subscribe before the engine started: %v, want UNAVAILABLE", err)
	}

	reachable.Store(true)
	brokertest.Eventually(t, "SERVING once the engine started", func() bool {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	res, err := c.Publish(ctx, "d.x", []byte("x"), nil)
	if err != nil || res.Routed != 1 {
		t.Fatalf("publish once started: %+v, %v, want routed to the declared group", res, err)
	}
	if hooks.published.Load() == 0 {
		t.Fatal("the hooks installed before the engine started do not run")
	}
}

// countingHooks counts publishes; it wants nothing else.
type countingHooks struct{ published atomic.Int32 }

func (h *countingHooks) OnPublish(*broker.Draft) (broker.PublishVerdict, error) {
	h.published.Add(1)
	return broker.PublishVerdict{}, nil
}

func (h *countingHooks) OnPublishBatch(ds []broker.Draft, vs []broker.PublishVerdict, errs []error) {
	for i := range ds {
		vs[i], errs[i] = h.OnPublish(&ds[i])
	}
}
func (*countingHooks) WantsAck(string) bool                  { return false }
func (*countingHooks) WantsRedeliver(string) bool            { return false }
func (*countingHooks) OnAck(*broker.AckEvent) []broker.Draft { return nil }
func (*countingHooks) OnRedeliver(*broker.RedeliverEvent) broker.RedeliverVerdict {
	return broker.RedeliverVerdict{}
}
