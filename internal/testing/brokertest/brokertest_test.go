package brokertest_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

var engine brokertest.Engine

func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.EachEngine(m, &engine)) }

// An engine of the table takes Options, and Sub passes over the stream's events.
func TestEngine(t *testing.T) {
	b := engine.Start(t, brokertest.Options{Limits: broker.Limits{MaxMessageBytes: 8}})
	s := brokertest.Subscribe(t, b, broker.SubscribeOptions{Patterns: []string{"a.*"}, Mode: broker.Fanout})
	if _, err := b.Publish("a.b", []byte("too long!"), nil); err == nil {
		t.Fatal("MaxMessageBytes not applied")
	}
	res, err := b.Publish("a.b", []byte("hello"), nil)
	if err != nil || res.Routed != 1 {
		t.Fatalf("publish: %+v, %v", res, err)
	}
	if d := s.Next(t); d.Msg.SystemID != res.SystemID || string(d.Msg.Payload) != "hello" {
		t.Fatalf("delivered %+v", d.Msg)
	}
	s.None(t, 0)
}

// A served engine answers over gRPC; Stop is idempotent and frees the address for another.
func TestServe(t *testing.T) {
	sb := servertest.Start(t, servertest.Options{Engine: engine})
	c := pb.NewBrokerClient(servertest.Dial(t, sb.Addr))
	if _, err := c.Publish(context.Background(), &pb.PublishRequest{Topic: "a"}); err != nil {
		t.Fatal(err)
	}
	if st := sb.Engine.Stats(); st.Published != 1 {
		t.Fatalf("published %d, want 1", st.Published)
	}
	sb.Stop()
	sb.Stop()
	again := servertest.Start(t, servertest.Options{Engine: engine, Addr: sb.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.Patience)
	defer cancel()
	if _, err := pb.NewBrokerClient(servertest.Dial(t, again.Addr)).Publish(ctx, &pb.PublishRequest{Topic: "a"}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	if st := again.Engine.Stats(); st.Published != 1 {
		t.Fatalf("the new engine published %d, want 1", st.Published)
	}
}
