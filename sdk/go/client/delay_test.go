package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// WithDelay and WithDeliverAt, on Publish and on a Publisher: the answer comes at once, the
// message no sooner than its time, under the system_id answered; both at once, or a delay
// past the broker's max_delay, is codes.InvalidArgument.
func TestDelay(t *testing.T) {
	ts := servertest.Start(t, servertest.Options{})
	c := dial(t, ts.Addr)
	type arrival struct {
		payload, id string
		at          time.Time
	}
	var got recorder[arrival]
	subscribe(t, c, client.SubscribeOptions{Patterns: []string{"dl.>"}, Mode: client.Balanced, Group: "dl"}, func(_ context.Context, m *client.Message) error {
		got.add(arrival{string(m.Payload), m.SystemID, time.Now()})
		return nil
	})
	ctx := context.Background()
	for _, opts := range [][]client.PublishOption{
		{client.WithDelay(time.Second), client.WithDeliverAt(time.Now())},
		{client.WithDelay(48 * time.Hour)},
	} {
		if _, err := c.Publish(ctx, "dl.x", nil, nil, opts...); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Publish: %v, want InvalidArgument", err)
		}
	}
	const delay = 200 * time.Millisecond
	sent := time.Now()
	ids := map[string]string{}
	res, err := c.Publish(ctx, "dl.x", []byte("delay"), nil, client.WithDelay(delay))
	if err != nil || res.Routed != 0 {
		t.Fatalf("Publish: %+v, %v; want routed 0", res, err)
	}
	ids["delay"] = res.SystemID
	if res, err = c.Publish(ctx, "dl.x", []byte("at"), nil, client.WithDeliverAt(sent.Add(delay))); err != nil {
		t.Fatal(err)
	}
	ids["at"] = res.SystemID
	p, err := c.NewPublisher(ctx, client.PublisherOptions{OnResult: func(_ string, r client.PublishResult, err error) {
		if err != nil {
			t.Errorf("Publisher: %v", err)
		}
		got.add(arrival{"answered", r.SystemID, time.Now()})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(ctx, "dl.x", []byte("publisher"), nil, client.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, "three delayed messages", func() bool { return got.len() == 4 })
	for _, a := range got.all() {
		switch {
		case a.payload == "answered":
			ids["publisher"] = a.id
		case a.at.Sub(sent) < delay:
			t.Errorf("%s arrived %v after it was sent, before its delay of %v", a.payload, a.at.Sub(sent), delay)
		}
	}
	for _, a := range got.all() {
		if a.payload != "answered" && a.id != ids[a.payload] {
			t.Errorf("%s arrived as %s, its publish answered %s", a.payload, a.id, ids[a.payload])
		}
	}
}
