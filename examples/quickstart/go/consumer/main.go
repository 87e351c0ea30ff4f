// Command consumer is README's Go quickstart consumer: a member of the consumer group
// "billing" that handles orders.* messages; returning nil acks a message, an error nacks it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.Dial(addr())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Patterns: []string{"orders.*"}, Group: "billing", Mode: client.Balanced},
		func(_ context.Context, m *client.Message) error {
			fmt.Printf("%s: %s\n", m.Topic, m.Payload)
			return nil // ack
		})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("consuming orders.* in group billing")
	<-ctx.Done()
	_ = sub.Close()
}

func addr() string {
	if a := os.Getenv("TINYBROKER_ADDR"); a != "" {
		return a
	}
	return client.DefaultAddr
}
