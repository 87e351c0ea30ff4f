package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/msgid"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server/auth"
)

// Issue 25: a publisher that retries after a lost confirmation stored its message twice.
// With a message_id, the retry is answered with the first publish's system_id and
// duplicate set, and nothing more is stored, delivered or shown to the plugins: a consumer
// group and a fanout subscription each get the message once (the marker published after
// the retries is the next message they get).
func TestPublishRetryWithMessageIDIsPublishedOnce(t *testing.T) {
	hooks := &countingHooks{}
	tb := start(t, brokertest.Options{Hooks: hooks})
	group := tb.open(t, balanced("idem", "idem", 100, "idem.>"))
	fan := tb.open(t, fanout("idem-f", "idem.>"))
	ctx := context.Background()

	req := &pb.PublishRequest{Topic: "idem.x", Payload: []byte("once"), MessageId: "order-42"}
	first, err := tb.c.Publish(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.GetDuplicate() || first.GetRouted() != 2 {
		t.Fatalf("first publish: %v; want routed to 2, not a duplicate", first)
	}
	for range 3 {
		again, err := tb.c.Publish(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !again.GetDuplicate() || again.GetSystemId() != first.GetSystemId() || again.GetRouted() != first.GetRouted() {
			t.Fatalf("retry: %v; want duplicate of %v", again, first)
		}
	}
	// The same id through PublishStream, as its own publisher would retry it.
	stream := tb.publishStream(t)
	if err := stream.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{req}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults()[0]; !r.GetDuplicate() || r.GetSystemId() != first.GetSystemId() || r.GetCode() != 0 {
		t.Fatalf("retry by PublishStream: %v; want duplicate of %v", r, first)
	}
	tb.publish(t, "idem.x", "marker")

	for name, s := range map[string]*sub{"group": group, "fanout": fan} {
		if m := s.next(); string(m.GetPayload()) != "once" || m.GetSystemId() != first.GetSystemId() {
			t.Fatalf("%s: first message %s %q, want %s \"once\"", name, m.GetSystemId(), m.GetPayload(), first.GetSystemId())
		}
		if m := s.next(); string(m.GetPayload()) != "marker" {
			t.Fatalf("%s: a retry was delivered again: got %q, want the marker next", name, m.GetPayload())
		}
	}
	if n := hooks.n.Load(); n != 2 { // the message once, the marker
		t.Fatalf("the plugins saw %d publishes, want 2: a duplicate must not run them again", n)
	}
}

// In a PublishStream frame, a message_id given twice is published once (the second is the
// first's duplicate), and one published in an earlier frame is a duplicate; with
// errors_only, a frame of duplicates is not answered (a duplicate is not an error).
func TestPublishStreamMessageIDs(t *testing.T) {
	tb := start(t, brokertest.Options{})
	group := tb.open(t, balanced("idem-s", "idem-s", 100, "ids.>"))
	stream := tb.publishStream(t)
	send := func(seq uint64, errorsOnly bool, msgs ...*pb.PublishRequest) {
		t.Helper()
		if err := stream.Send(&pb.PublishStreamRequest{Sequence: seq, Messages: msgs, ErrorsOnly: errorsOnly}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(seq uint64) []*pb.PublishResult {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetSequence() != seq {
			t.Fatalf("answer to frame %d, want %d", resp.GetSequence(), seq)
		}
		return resp.GetResults()
	}
	msg := func(payload, id string) *pb.PublishRequest {
		return &pb.PublishRequest{Topic: "ids.x", Payload: []byte(payload), MessageId: id}
	}
	send(1, false, msg("a", "a"), msg("a-again", "a"), msg("b", "b"), msg("none", ""))
	r := recv(1)
	if r[0].GetDuplicate() || r[2].GetDuplicate() || r[3].GetDuplicate() {
		t.Fatalf("first publishes marked duplicate: %v", r)
	}
	if !r[1].GetDuplicate() || r[1].GetSystemId() != r[0].GetSystemId() {
		t.Fatalf("id a twice in a frame: %v and %v; want the second a duplicate of the first", r[0], r[1])
	}
	send(2, true, msg("b-again", "b"), msg("a-again", "a")) // not answered: no error
	send(3, false, msg("b-again", "b"), msg("c", "c"))
	r3 := recv(3)
	if !r3[0].GetDuplicate() || r3[0].GetSystemId() != r[2].GetSystemId() || r3[1].GetDuplicate() {
		t.Fatalf("frame 3: %v; want b a duplicate of %v, c new", r3, r[2])
	}
	tooLong := strings.Repeat("x", msgid.MaxBytes+1)
	send(4, false, msg("long", tooLong), msg("d", "d"))
	r4 := recv(4)
	if r4[0].GetCode() != int32(codes.InvalidArgument) || !strings.Contains(r4[0].GetError(), "128") || r4[1].GetCode() != 0 {
		t.Fatalf("a message_id of %d bytes: %v; want INVALID_ARGUMENT naming the limit, the next message published", len(tooLong), r4)
	}
	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "ids.x", MessageId: tooLong})
	wantCode(t, err, codes.InvalidArgument, "the limit is 128 bytes")

	for _, want := range []string{"a", "b", "none", "c", "d"} {
		if m := group.next(); string(m.GetPayload()) != want {
			t.Fatalf("group got %q, want %q (each id once, in order)", m.GetPayload(), want)
		}
	}
}

// Ids are the user's own: the same message_id from two users is two messages, and a user
// cannot suppress another's message by guessing its id.
func TestMessageIDsArePerUser(t *testing.T) {
	all := auth.Rules{Allow: []string{">"}}
	s := startSecure(t, []auth.User{
		{Name: "alice", TokenHash: hash(t, "alice-token"), Publish: all, Subscribe: all, Groups: all},
		{Name: "bob", TokenHash: hash(t, "bob-token"), Publish: all, Subscribe: all, Groups: all},
	}, false, false)
	alice, bob := s.as(t, "alice:alice-token", nil), s.as(t, "bob:bob-token", nil)
	group := s.openAs(t, alice, balanced("users", "users", 100, "users.>"))
	ctx := context.Background()
	var ids []string
	for _, c := range []pb.BrokerClient{alice, bob} {
		resp, err := c.Publish(ctx, &pb.PublishRequest{Topic: "users.x", Payload: []byte("m"), MessageId: "same"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDuplicate() {
			t.Fatalf("bob's message taken for alice's: %v", resp)
		}
		ids = append(ids, resp.GetSystemId())
	}
	if ids[0] == ids[1] {
		t.Fatalf("both users' messages got system_id %s", ids[0])
	}
	for _, want := range ids {
		if m := group.next(); m.GetSystemId() != want {
			t.Fatalf("got %s, want %s", m.GetSystemId(), want)
		}
	}
}

// An id is remembered for the dedupe window, then published again.
func TestMessageIDWindowExpires(t *testing.T) {
	tb := start(t, brokertest.Options{Limits: broker.Limits{DedupeWindow: 200 * time.Millisecond}})
	group := tb.open(t, balanced("win", "win", 100, "win.>"))
	req := &pb.PublishRequest{Topic: "win.x", Payload: []byte("w"), MessageId: "w"}
	first, err := tb.c.Publish(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var again *pb.PublishResponse
	brokertest.Eventually(t, "the id to be forgotten after the window", func() bool {
		if again, err = tb.c.Publish(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		return !again.GetDuplicate()
	})
	if again.GetSystemId() == first.GetSystemId() {
		t.Fatalf("published again with the same system_id %s", first.GetSystemId())
	}
	for _, want := range []string{first.GetSystemId(), again.GetSystemId()} {
		if m := group.next(); m.GetSystemId() != want {
			t.Fatalf("got %s, want %s", m.GetSystemId(), want)
		}
	}
}

// The table of ids is bounded in bytes: past dedupe_max_bytes the oldest ids are forgotten,
// and no publish is refused for it. On the memory engine the table is charged to the memory
// budget.
func TestMessageIDTableBounded(t *testing.T) {
	const maxBytes = 8 << 10
	tb := start(t, brokertest.Options{Limits: broker.Limits{DedupeMaxBytes: maxBytes}})
	ctx := context.Background()
	publish := func(id string) *pb.PublishResponse {
		t.Helper()
		resp, err := tb.c.Publish(ctx, &pb.PublishRequest{Topic: "bound.x", MessageId: id})
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		return resp
	}
	const n = 500 // about 330 bytes each: some 25 fit
	for i := range n {
		if r := publish(fmt.Sprintf("id-%03d", i)); r.GetDuplicate() {
			t.Fatalf("new id %d taken for a duplicate", i)
		}
	}
	if publish(fmt.Sprintf("id-%03d", n-1)).GetDuplicate() == false {
		t.Fatal("the newest id was forgotten")
	}
	if publish("id-000").GetDuplicate() {
		t.Fatal("the oldest id is still remembered past dedupe_max_bytes")
	}
	if engine.MemoryBudget {
		used := tb.stats(t).GetMemoryUsedBytes() // nothing else is held: no subscription
		if used == 0 || used > maxBytes {
			t.Fatalf("memory used %d bytes, want the id table's, within 0..%d", used, maxBytes)
		}
	}
}

// A header of the client named Nats-* is the client's: the JetStream engine never lets
// JetStream act on it (Nats-Msg-Id would deduplicate), and it reaches subscribers as sent.
func TestNatsHeadersAreCarried(t *testing.T) {
	tb := start(t, brokertest.Options{})
	group := tb.open(t, balanced("nh", "nh", 100, "nh.>"))
	fan := tb.open(t, fanout("nh-f", "nh.>"))
	h := map[string]string{"Nats-Msg-Id": "same", "Nats-Expected-Last-Sequence": "1", "Nats-Rollup": "sub"}
	var ids []string
	for _, p := range []string{"one", "two"} {
		ids = append(ids, tb.publishH(t, "nh.x", p, h))
	}
	for name, s := range map[string]*sub{"group": group, "fanout": fan} {
		for i, want := range []string{"one", "two"} {
			m := s.next()
			if string(m.GetPayload()) != want || m.GetSystemId() != ids[i] {
				t.Fatalf("%s: got %s %q, want %s %q: a Nats-* header of the client acted on the message", name, m.GetSystemId(), m.GetPayload(), ids[i], want)
			}
			for k, v := range h {
				if m.GetHeaders()[k] != v {
					t.Fatalf("%s: header %s is %q, want %q", name, k, m.GetHeaders()[k], v)
				}
			}
		}
	}
}
