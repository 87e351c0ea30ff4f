package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Ordering keys over gRPC (issue 27): a key given on Publish and PublishStream reaches the
// member in Message.key; a group with ordering "key" holds a key's next message until the
// previous is acked; Subscribed and DescribeGroup report the settings; bad keys and settings
// are refused with InvalidArgument, a member asking for other settings with
// FailedPrecondition.
func TestOrderingKeysOverGRPC(t *testing.T) {
	needs(t, engine.Ordering, "ordering keys")
	tb := start(t, brokertest.Options{})
	o := balanced("ord", "ord", 10, "o.>")
	o.Ordering = pb.Ordering_ORDERING_KEY
	m := tb.open(t, o)
	if s := m.subscribed; s.GetOrdering() != pb.Ordering_ORDERING_KEY || s.GetFairBy() != "" {
		t.Fatalf("subscribed %v, want ordering key", s)
	}
	ctx := context.Background()
	if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "o.1", Payload: []byte("a1"), Key: "a"}); err != nil {
		t.Fatal(err)
	}
	ps := tb.publishStream(t)
	if err := ps.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{
		{Topic: "o.1", Payload: []byte("a2"), Key: "a"}, {Topic: "o.1", Payload: []byte("b1"), Key: "b"},
	}}); err != nil {
		t.Fatal(err)
	}
	if r, err := ps.Recv(); err != nil || len(r.GetResults()) != 2 || r.GetResults()[0].GetCode() != 0 {
		t.Fatalf("PublishStream: %v %v", r, err)
	}
	a1, b1 := m.next(), m.next()
	if string(a1.GetPayload()) != "a1" || a1.GetKey() != "a" || string(b1.GetPayload()) != "b1" || b1.GetKey() != "b" {
		t.Fatalf("got %q (key %q) and %q (key %q), want a1 (a) and b1 (b)", a1.GetPayload(), a1.GetKey(), b1.GetPayload(), b1.GetKey())
	}
	m.none(50 * time.Millisecond) // a2 waits for a1
	m.ack(a1.GetSystemId())
	if a2 := m.next(); string(a2.GetPayload()) != "a2" || a2.GetKey() != "a" {
		t.Fatalf("after a1's ack got %q, want a2", a2.GetPayload())
	}

	d, err := tb.admin().DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "ord"})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetSettings().GetOrdering() != "key" || d.GetKeys() != 2 {
		t.Fatalf("described settings %v keys %d, want ordering key and 2 keys (a2, b1 in flight)", d.GetSettings(), d.GetKeys())
	}

	// Refusals.
	_, err = tb.c.Publish(ctx, &pb.PublishRequest{Topic: "o.1", Key: strings.Repeat("k", 257)})
	wantCode(t, err, codes.InvalidArgument, "key is 257 bytes long")
	_, err = tb.c.Publish(ctx, &pb.PublishRequest{Topic: "o.1", Key: "a\nb"})
	wantCode(t, err, codes.InvalidArgument, "control character")
	other := balanced("ord", "ord", 1, "o.>")
	other.Ordering = pb.Ordering_ORDERING_GROUP
	_, err = openOn(t, tb.c, other)
	wantCode(t, err, codes.FailedPrecondition, `has ordering "key"`)
	fo := fanout("f", "o.>")
	fo.FairBy = "key"
	_, err = openOn(t, tb.c, fo)
	wantCode(t, err, codes.InvalidArgument, "ordering, fair_by, max_priority and priority are for DELIVERY_MODE_BALANCED")
	bad := balanced("bad", "bad", 1, "o.>")
	bad.FairBy = "tenant"
	_, err = openOn(t, tb.c, bad)
	wantCode(t, err, codes.InvalidArgument, `fair_by "tenant"`)
	// A later member that leaves the settings unset takes the group's.
	if s := tb.open(t, balanced("ord", "ord", 1, "o.>")).subscribed; s.GetOrdering() != pb.Ordering_ORDERING_KEY {
		t.Fatalf("a second member's subscribed %v, want the group's ordering", s)
	}
}

// A fanout subscription gets the key too, on every engine (on JetStream, through the fanout
// envelope from another publish path: deliverLocal and NATS).
func TestFanoutCarriesKey(t *testing.T) {
	tb := start(t, brokertest.Options{})
	f := tb.open(t, fanout("f", "k.>"))
	if _, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "k.1", Payload: []byte("x"), Key: "acct-9"}); err != nil {
		t.Fatal(err)
	}
	if m := f.next(); m.GetKey() != "acct-9" {
		t.Fatalf("fanout delivery has key %q, want acct-9", m.GetKey())
	}
}

// A dead letter keeps its key on every engine: published to the dead-letter topic with it,
// listed with it, and replayed with it.
func TestDeadLetterKeepsKey(t *testing.T) {
	needs(t, engine.DeadLetterStore, "a dead-letter store")
	tb := start(t, brokertest.Options{})
	o := balanced("dk", "dk", 1, "dk.>")
	o.MaxDeliveries = 1
	m := tb.open(t, o)
	dlq := tb.open(t, fanout("dlq-watch", "dlq.dk"))
	ctx := context.Background()
	if _, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "dk.1", Payload: []byte("x"), Key: "acct-3"}); err != nil {
		t.Fatal(err)
	}
	msg := m.next()
	m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{msg.GetSystemId()}}}})
	if d := dlq.next(); d.GetKey() != "acct-3" {
		t.Fatalf("dead letter published with key %q, want acct-3", d.GetKey())
	}
	a := tb.admin()
	var ls *adminpb.ListDeadLettersResponse
	brokertest.Eventually(t, "the dead letter kept", func() bool {
		var err error
		ls, err = a.ListDeadLetters(ctx, &adminpb.ListDeadLettersRequest{SubscriptionId: "dk"})
		return err == nil && len(ls.GetDeadLetters()) == 1
	})
	if k := ls.GetDeadLetters()[0].GetKey(); k != "acct-3" {
		t.Fatalf("dead letter listed with key %q, want acct-3", k)
	}
	if _, err := a.ReplayDeadLetters(ctx, &adminpb.ReplayDeadLettersRequest{SubscriptionId: "dk", All: true}); err != nil {
		t.Fatal(err)
	}
	if r := m.next(); r.GetKey() != "acct-3" || string(r.GetPayload()) != "x" {
		t.Fatalf("replayed %q with key %q, want x with acct-3", r.GetPayload(), r.GetKey())
	}
}

// A ttl over gRPC, on every engine: a message past it is dead-lettered with reason
// "expired" and never delivered; a negative one is refused with INVALID_ARGUMENT. (The
// test waits for the wall clock: the server's engines have no clock a test could move.)
func TestTTLOverGRPC(t *testing.T) {
	tb := start(t, brokertest.Options{})
	ctx := context.Background()
	_, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "ttl.1", Ttl: durationpb.New(-time.Second)})
	wantCode(t, err, codes.InvalidArgument, "ttl must be a valid duration")
	tb.open(t, balanced("ttl", "ttl", 1, "ttl.>")).close()
	tb.waitMemberless(t, "ttl")
	dlq := tb.open(t, fanout("ttl-dlq", "dlq.ttl"))
	const ttl = 50 * time.Millisecond
	for _, p := range []*pb.PublishRequest{
		{Topic: "ttl.1", Payload: []byte("late"), Ttl: durationpb.New(ttl)},
		{Topic: "ttl.1", Payload: []byte("forever")},
	} {
		if _, err := tb.c.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(ttl) // the broker stamped late before this
	// The memory engine lets go of it at its time; the JetStream engine when a member pulls
	// it: either way, the member that joins after its ttl never gets it.
	time.Sleep(time.Until(past) + 10*time.Millisecond)
	m := tb.open(t, balanced("ttl", "ttl", 1, "ttl.>"))
	if got := m.next(); string(got.GetPayload()) != "forever" {
		t.Fatalf("the member got %q first, want forever (late expired)", got.GetPayload())
	}
	d := dlq.next()
	if string(d.GetPayload()) != "late" || d.GetHeaders()["tb-dead-letter-reason"] != "expired" {
		t.Fatalf("dead letter %q with headers %v, want late with reason expired", d.GetPayload(), d.GetHeaders())
	}
}
