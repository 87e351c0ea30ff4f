// Command fanout shows tinybroker's fanout delivery, like TinyMQ's exchange: three consumers,
// "email", "audit" and "analytics", each with its own fanout subscription to "orders.>", and
// each receives every order published to "orders.created.<n>", in order.
//
//	make run                     # in one terminal: the broker
//	go run ./examples/fanout     # in another
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

const (
	orders  = 20
	pattern = "orders.>"
	// runHeader tells this run's orders from any another publisher sends meanwhile.
	runHeader = "fanout-example-run"
)

var consumers = []string{"email", "audit", "analytics"}

func main() {
	addr := flag.String("addr", client.DefaultAddr, "broker address (host:port)")
	timeout := flag.Duration("timeout", time.Minute, "give up if the orders have not all arrived by then")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *addr, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// run subscribes the three consumers, publishes the orders and waits until every consumer
// has every order. It fails if a consumer missed an order, got one twice or out of order.
func run(ctx context.Context, addr string, out io.Writer) error {
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	runID := rand.Text()

	var mu sync.Mutex            // guards out and got
	got := map[string][]string{} // consumer → the topics it received, in order
	complete := 0                // consumers with every order
	allDone := make(chan struct{})
	subs := make([]*client.Subscription, 0, len(consumers)) // c.Close closes them on an early return
	for _, name := range consumers {
		sub, err := c.Subscribe(ctx, client.SubscribeOptions{
			ID:       "fanout-example-" + name,
			Patterns: []string{pattern},
		}, func(_ context.Context, m *client.Message) error {
			if m.Headers.Get(runHeader) != runID {
				return nil // someone else's order
			}
			mu.Lock()
			defer mu.Unlock()
			got[name] = append(got[name], m.Topic)
			fmt.Fprintf(out, "%-9s got %s\n", name, m.Topic)
			if len(got[name]) == orders {
				if complete++; complete == len(consumers) {
					close(allDone)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", name, err)
		}
		subs = append(subs, sub)
	}

	for i := 1; i <= orders; i++ { // one at a time: each Publish returns once the broker has it
		body := fmt.Sprintf(`{"order": %d}`, i)
		if _, err := c.Publish(ctx, "orders.created."+strconv.Itoa(i), []byte(body), map[string]string{runHeader: runID}); err != nil {
			return fmt.Errorf("publish order %d: %w", i, err)
		}
	}

	select {
	case <-allDone:
	case <-ctx.Done():
	}
	for _, s := range subs {
		if err := s.Close(); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var problems []string
	for _, name := range consumers {
		list := got[name]
		for i := 1; i <= orders; i++ {
			want := "orders.created." + strconv.Itoa(i)
			if len(list) < i {
				problems = append(problems, fmt.Sprintf("%s got only %d of %d orders", name, len(list), orders))
				break
			}
			if list[i-1] != want {
				problems = append(problems, fmt.Sprintf("%s got %s where %s was due (lost, duplicated or out of order)", name, list[i-1], want))
				break
			}
		}
		if len(list) > orders {
			problems = append(problems, fmt.Sprintf("%s got %d messages for %d orders", name, len(list), orders))
		}
	}
	if len(problems) > 0 {
		if ctx.Err() != nil {
			problems = append(problems, "gave up: "+ctx.Err().Error())
		}
		return fmt.Errorf("fanout went wrong: %s", strings.Join(problems, "; "))
	}
	fmt.Fprintf(out, "each of %s got all %d orders, in order\n", strings.Join(consumers, ", "), orders)
	return nil
}
