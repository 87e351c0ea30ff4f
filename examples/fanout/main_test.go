package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/internal/testing/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var gotLine = regexp.MustCompile(`(?m)^(\w+)\s+got (orders\.created\.\d+)$`)

func TestRunDeliversEveryOrderToEveryConsumer(t *testing.T) {
	addr := servertest.Start(t, servertest.Options{}).Addr
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
	servertest.FailsWithoutBroker(t, func(ctx context.Context, addr string) error { return run(ctx, addr, &bytes.Buffer{}) })
}
