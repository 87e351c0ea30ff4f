package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// A worker of a consumer group and a publisher, against a broker started with `make run`.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Members of the group "resizers" share the jobs; each job goes to one of them.
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{
		ID:          "thumbnails",
		Group:       "resizers",
		Mode:        client.Balanced,
		Patterns:    []string{"jobs.thumb.*"},
		Concurrency: 4,
	}, func(ctx context.Context, m *client.Message) error {
		fmt.Printf("resizing %s (attempt %d)\n", m.Topic, m.Attempt)
		return nil // acks; an error would nack, and the job would be redelivered
	})
	if err != nil {
		log.Fatal(err) // e.g. codes.InvalidArgument for a bad pattern
	}
	defer sub.Close()

	res, err := c.Publish(ctx, "jobs.thumb.1", []byte("cat.jpg"), map[string]string{"size": "128"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published", res.SystemID, "to", res.Routed, "subscriptions")
}

// Pipelined publishing: Publish queues, Flush waits for the broker's confirmations.
func ExamplePublisher() {
	ctx := context.Background()
	c, err := client.Dial(client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p, err := c.NewPublisher(ctx, client.PublisherOptions{MaxPending: 1024})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 10_000 {
		if err := p.Publish(ctx, fmt.Sprintf("orders.created.%d", i), []byte("{}"), nil); err != nil {
			log.Fatal(err) // the publisher is closed or its stream broke
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err) // a *client.PublishError says how many failed, and why the first did
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
}

// Orders are processed in the order they were placed, eight customers at a time: each
// message carries its customer as its key, and the group orders by key.
func ExampleWithKey() {
	ctx := context.Background()
	c, err := client.Dial(client.DefaultAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	sub, err := c.Subscribe(ctx, client.SubscribeOptions{
		Group:       "billing",
		Mode:        client.Balanced,
		Patterns:    []string{"orders.>"},
		Ordering:    client.OrderingKey, // one message of a customer at a time, in order
		Concurrency: 8,                  // eight customers at once
	}, func(ctx context.Context, m *client.Message) error {
		fmt.Printf("billing %s for %s\n", m.Payload, m.Key)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	for _, order := range []string{"created", "paid", "shipped"} {
		if _, err := c.Publish(ctx, "orders.customer", []byte(order), nil, client.WithKey("customer-7")); err != nil {
			log.Fatal(err)
		}
	}
}
