// Package servertest serves an engine of brokertest's table over gRPC on loopback for one
// test: the broker that client-side tests (the server's black-box suite, the CLI, the
// examples, the SDKs) talk to.
package servertest

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/server"
)

// Options configure Start. Zero values take the defaults shown.
type Options struct {
	brokertest.Options                   // the engine's settings, plugin hooks included
	Engine             brokertest.Engine // brokertest.Engines[0]
	Server             server.Options    // MaxHeaderBytes and MaxHeaders default to the engine's
	Addr               string            // where to listen: "127.0.0.1:0", any free port
}

// Broker is an engine served by a server.Server.
type Broker struct {
	Addr   string
	Engine broker.Engine
	Server *server.Server

	tb     testing.TB
	served chan error
	once   sync.Once
}

// Start serves a new engine until Stop or the end of the test. A given Addr is retried until
// it is free: the port of a server just stopped may linger.
func Start(tb testing.TB, o Options) *Broker {
	tb.Helper()
	if o.Engine.New == nil {
		o.Engine = brokertest.Engines[0]
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	var lis net.Listener
	brokertest.Eventually(tb, "listening on "+o.Addr, func() bool {
		var err error
		lis, err = net.Listen("tcp", o.Addr)
		return err == nil
	})
	e := o.Engine.Start(tb, o.Options)
	limits := o.Limits.WithDefaults()
	if o.Server.MaxHeaderBytes == 0 {
		o.Server.MaxHeaderBytes = limits.MaxHeaderBytes
	}
	if o.Server.MaxHeaders == 0 {
		o.Server.MaxHeaders = limits.MaxHeaders
	}
	b := &Broker{Addr: lis.Addr().String(), Engine: e, Server: server.New(e, limits.MaxMessageBytes, o.Server),
		tb: tb, served: make(chan error, 1)}
	var serving sync.WaitGroup // Stop receives from b.served: the wait for Serve
	serving.Go(func() { b.served <- b.Server.Serve(lis) })
	tb.Cleanup(b.Stop)
	return b
}

// Stop shuts the server and its engine down, with 5s of grace for in-flight acks, and waits
// for Serve to return; either's error fails the test. Later calls do nothing.
func (b *Broker) Stop() {
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.Server.Shutdown(ctx); err != nil {
			b.tb.Errorf("Shutdown: %v", err)
		}
		if err := <-b.served; err != nil {
			b.tb.Errorf("Serve: %v", err)
		}
	})
}

// Group returns the stats of the consumer group of subscription_id id, zero if there is none.
func (b *Broker) Group(id string) broker.GroupStats {
	g, _ := b.Engine.Group(id)
	return g.GroupStats
}

// Dial returns a client connection to addr, closed when the test ends.
func Dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// ClosedAddr returns a loopback address nothing listens on.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// FailsWithoutBroker runs program, a client program's run (an example's, say), for up to 30s
// against a loopback address nothing listens on, and fails the test unless it returns an
// error that says Unavailable.
func FailsWithoutBroker(tb testing.TB, program func(ctx context.Context, addr string) error) {
	tb.Helper()
	addr := ClosedAddr(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := program(ctx, addr); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		tb.Fatalf("run against nothing: %v, want an Unavailable error", err)
	}
}
