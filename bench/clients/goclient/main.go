// Command goclient runs W1 and W2 (shared/bench/WORKLOADS.md) with the Go client library
// (sdk/go/client) as publisher and consumers, in one process, as bench/clients/w12.py does
// with the Python client: `goclient W1|W2 HOST:PORT N` prints one JSON line. Unlike
// `tinybroker bench`, which speaks the wire protocol itself, it measures what an application
// written with the library gets.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 4 {
		return fmt.Errorf("usage: goclient W1|W2 HOST:PORT N")
	}
	workload, addr := os.Args[1], os.Args[2]
	n, err := strconv.Atoi(os.Args[3])
	if err != nil {
		return err
	}
	ctx := context.Background()
	var clients []*client.Client
	for range 5 {
		c, err := client.Dial(addr)
		if err != nil {
			return err
		}
		defer c.Close()
		clients = append(clients, c)
	}
	total := n
	if workload == "W1" {
		total = 4 * n
	}
	var mu sync.Mutex
	got, dup := 0, 0
	seen := map[string]bool{}
	done := make(chan time.Time, 1)
	handle := func(_ context.Context, m *client.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got++
		if workload == "W2" {
			if seen[m.SystemID] || m.Attempt > 1 {
				dup++
			}
			seen[m.SystemID] = true
		}
		if got == total {
			done <- time.Now()
		}
		return nil
	}
	group := fmt.Sprintf("w2-go-%d", time.Now().UnixNano())
	for i := range 4 {
		o := client.SubscribeOptions{Patterns: []string{"bench.w1"}}
		if workload == "W2" {
			o = client.SubscribeOptions{Patterns: []string{"bench.w2"}, Group: group, Mode: client.Balanced, MaxInFlight: 256}
		}
		if _, err := clients[i].Subscribe(ctx, o, handle); err != nil {
			return err
		}
	}
	payload := make([]byte, 256)
	_, _ = rand.Read(payload)
	cpu0 := cpuTime()
	start := time.Now()
	p, err := clients[4].NewPublisher(ctx, client.PublisherOptions{})
	if err != nil {
		return err
	}
	topic := "bench.w1"
	if workload == "W2" {
		topic = "bench.w2"
	}
	for range n {
		if err := p.Publish(ctx, topic, payload, nil); err != nil {
			return err
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	_ = p.Close()
	var last time.Time
	select {
	case last = <-done:
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("%s: got %d of %d in 10 minutes", workload, got, total)
	}
	figure := "delivered_msgs_per_s"
	if workload == "W2" {
		figure = "acked_msgs_per_s"
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"client": "go", "workload": workload,
		figure: int(float64(total) / last.Sub(start).Seconds()), "redelivered": dup,
		"client_cpu_pct": int(100 * (cpuTime() - cpu0).Seconds() / last.Sub(start).Seconds())})
}

// cpuTime is the CPU time this process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
