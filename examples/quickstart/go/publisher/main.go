// Command publisher is README's Go quickstart publisher: three orders through a pipelined
// Publisher, confirmed by Flush.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

func main() {
	ctx := context.Background()
	addr := os.Getenv("TINYBROKER_ADDR")
	if addr == "" {
		addr = client.DefaultAddr
	}
	c, err := client.Dial(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	p, err := c.NewPublisher(ctx, client.PublisherOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 1; i <= 3; i++ {
		if err := p.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"id": %d}`, i), nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := p.Flush(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = p.Close()
	fmt.Println("published 3 orders")
}
