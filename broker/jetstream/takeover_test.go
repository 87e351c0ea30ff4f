package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker"
)

// A node that takes an ordered group's pin from another that still holds a message of a key
// hands out nothing until that message is back: "another node" here pulls k/0 with the pin
// and goes away without settling it; the member here gets the pin once it lapses (5 s), then
// k/0 again (redelivered after the consumer's AckWait) before k/1, which it had pulled
// first. Without the takeover check it would hand out k/1 at once.
func TestOrderedTakeoverWaitsForAnotherNodesMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the pin's TTL and the consumer's AckWait")
	}
	o := Options{}
	o.AckDeadline = time.Second // AckWait 6 s
	e := newEngine(t, o)
	if err := e.Declare(broker.GroupConfig{Name: "o", Patterns: []string{"o"}, Dispatch: broker.Dispatch{Ordering: broker.OrderingKey}}); err != nil {
		t.Fatal(err)
	}
	frame := []broker.Draft{{Topic: "o", Key: "k", Payload: []byte("k/0")}, {Topic: "o", Key: "k", Payload: []byte("k/1")}}
	res, errs := make([]broker.PublishResult, 2), make([]error, 2)
	e.PublishBatch(frame, res, errs)
	for i, err := range errs {
		if err != nil || res[i].Routed != 1 {
			t.Fatalf("publish %d: %+v %v", i, res[i], err)
		}
	}
	e.mu.Lock()
	g := e.groups["o"]
	e.mu.Unlock()

	// The other node: one message, with the pin JetStream gives it, never settled.
	inbox := nats.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+g.stream+"."+g.consumer, inbox,
		[]byte(`{"batch":1,"expires":2000000000,"group":"tinybroker"}`)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || string(m.Data) != "k/0" || m.Header.Get(hdrPin) == "" {
		t.Fatalf("the other node's pull: %v %v", m, err)
	}
	_ = sub.Unsubscribe()

	st := e.NewStream(nil)
	defer st.Close()
	s, err := st.Subscribe(broker.SubscribeOptions{ID: "o", Group: "o", Mode: broker.Balanced, Patterns: []string{"o"}, MaxInFlight: 10, AckDeadline: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	next := func() broker.Delivery { t.Helper(); return nextOn(t, st) }
	d := next()
	if string(d.Msg.Payload) != "k/0" || d.Attempt != 2 {
		t.Fatalf("first delivery here: %s attempt %d, want k/0 attempt 2", d.Msg.Payload, d.Attempt)
	}
	s.Ack([]string{d.Msg.SystemID})
	if d = next(); string(d.Msg.Payload) != "k/1" {
		t.Fatalf("then: %s", d.Msg.Payload)
	}
	s.Ack([]string{d.Msg.SystemID})
}
