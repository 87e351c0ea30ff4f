package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startBroker serves a new broker on a free port for the rest of the test.
func startBroker(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(memory.New(memory.Options{}), 1<<20, server.Options{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

var gotLine = regexp.MustCompile(`(?m)^(\w+)\s+got (orders\.created\.\d+)$`)

func TestRunDeliversEveryOrderToEveryConsumer(t *testing.T) {
	addr := startBroker(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, addr, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	got := map[string][]string{}
	for _, m := range gotLine.FindAllStringSubmatch(out.String(), -1) {
		got[m[1]] = append(got[m[1]], m[2])
	}
	if len(got) != len(consumers) {
		t.Fatalf("consumers that got orders: %d, want %d\n%s", len(got), len(consumers), out.String())
	}
	for _, name := range consumers {
		if len(got[name]) != orders {
			t.Errorf("%s got %d orders, want %d", name, len(got[name]), orders)
			continue
		}
		for i, topic := range got[name] {
			if want := "orders.created." + strconv.Itoa(i+1); topic != want {
				t.Errorf("%s's order %d is %s, want %s", name, i+1, topic, want)
			}
		}
	}
	if !strings.Contains(out.String(), "got all 20 orders, in order") {
		t.Errorf("no summary line in\n%s", out.String())
	}
}

func TestRunFailsWithoutBroker(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, addr, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("run against nothing: %v, want an Unavailable error", err)
	}
}
