package jetstream_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
)

// A unary ack, or a subscribe, naming a subscription_id the engine does not know makes it
// read JetStream for the group (another node may have made it). Here that read goes unanswered for the whole
// RequestTimeout, as on a slow or leaderless cluster: the engine's NATS user may not ask for
// a consumer's info. Meanwhile the fanout subscriptions keep getting what is published to
// new topics, which need the engine's routing table as the fanout dispatch does: the read
// holds no lock they need. It held Engine.mu before, and one client acking or subscribing
// with made-up ids stalled routing and fanout for everyone on the node.
func TestUnknownGroupReadDoesNotStallFanout(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*natsserver.User{{Username: "tb", Password: "tb", Permissions: &natsserver.Permissions{
			Publish: &natsserver.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.INFO.>"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	const wait = time.Second
	e := start(t, jetstream.Options{URL: srv.ClientURL(), RequestTimeout: wait,
		NATSOptions: []nats.Option{nats.UserInfo("tb", "tb"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}})
	defer stop(t, e)
	fan := e.NewStream(nil)
	defer fan.Close()
	if _, err := fan.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{"f.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"an ack", func() error { return e.Ack("made-up", "x") }},
		{"a subscribe", func() error {
			st := e.NewStream(nil)
			defer st.Close()
			_, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "made-up", Patterns: []string{"m"}, MaxInFlight: 1})
			return err
		}},
	} {
		done := make(chan error, 1)
		began := time.Now()
		go func() { done <- c.call() }()
		delivered := 0
		for i := 0; ; i++ {
			select {
			case err := <-done:
				took := time.Since(began)
				if !errors.Is(err, broker.ErrUnavailable) || took < wait {
					t.Fatalf("%s naming a made-up subscription_id whose read goes unanswered: %v after %v, want ErrUnavailable after %v", c.name, err, took, wait)
				}
				// Thousands when nothing holds them up; a handful at most (those before
				// the read began) when the read held the lock.
				if delivered < 100 {
					t.Fatalf("%s: %d fanout messages delivered in the %v its read waited, want at least 100", c.name, delivered, took)
				}
				t.Logf("%s: %d fanout messages delivered in the %v its read waited", c.name, delivered, took)
			default:
				topic := "f." + strings.Fields(c.name)[1] + "." + strconv.Itoa(i) // new each time: routed afresh, not from the cache
				if _, err := e.Publish(topic, nil, nil); err != nil {
					t.Fatal(err)
				}
				if d := receive(t, fan); d.Msg.Topic != topic {
					t.Fatalf("got %s, want %s", d.Msg.Topic, topic)
				}
				delivered++
				continue
			}
			break
		}
	}
}
