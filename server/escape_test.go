package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server/auth"
)

// escapeUsers: alice may create groups alice.*, publish to alice.> but not alice.internal.>;
// bob owns the canary: a balanced group on canary.bal that nothing of alice's may reach.
func escapeUsers(t *testing.T) []auth.User {
	return []auth.User{
		{Name: "alice", TokenHash: hash(t, "a-token"),
			Publish:   auth.Rules{Allow: []string{"alice.>"}, Deny: []string{"alice.internal.>"}},
			Subscribe: auth.Rules{Allow: []string{"alice.>"}},
			Groups:    auth.Rules{Allow: []string{"alice.*"}}},
		{Name: "bob", TokenHash: hash(t, "b-token"),
			Publish:   auth.Rules{Allow: []string{"canary.>"}},
			Subscribe: auth.Rules{Allow: []string{"canary.>"}},
			Groups:    auth.Rules{Allow: []string{"canary.bal", "billing"}}},
	}
}

func withDeadLetters(o *pb.OpenSubscription, topic string, maxDeliveries uint32) *pb.OpenSubscription {
	o.DeadLetterTopic, o.MaxDeliveries = topic, maxDeliveries
	return o
}

// TestDeadLetterTopicNeedsPublishRights (issue 23, finding 2): a dead_letter_topic a client
// names is a topic the broker publishes to on its behalf, so it is refused with
// PERMISSION_DENIED, naming the rule, unless the caller may publish there: outside her
// allow, on her deny list, as the first open of a stream or a later one. Her own topic and
// the default dlq.<subscription_id> are allowed. Bob's canary group on canary.bal receives
// only his own message: nothing of alice's crossed.
func TestDeadLetterTopicNeedsPublishRights(t *testing.T) {
	s := startSecure(t, escapeUsers(t), false, false)
	ctx := context.Background()
	alice, bob := s.as(t, "alice:a-token", nil), s.as(t, "bob:b-token", nil)
	canary := s.openAs(t, bob, balanced("canary.bal", "canary.bal", 16, "canary.bal"))

	// The escape of the finding, and the same to a topic on her deny list.
	_, err := openOn(t, alice, withDeadLetters(balanced("alice.esc", "alice.esc", 1, "alice.esc.>"), "canary.bal", 1))
	wantCode(t, err, codes.PermissionDenied, `may not set dead_letter_topic "canary.bal": no allow pattern covers it (allow ["alice.>"])`)
	wantCode(t, err, codes.PermissionDenied, `user "alice" publish rules`)
	_, err = openOn(t, alice, withDeadLetters(balanced("alice.esc", "alice.esc", 1, "alice.esc.>"), "alice.internal.audit", 1))
	wantCode(t, err, codes.PermissionDenied, `matches deny "alice.internal.>"`)
	// A later open on a stream is refused by a frame.
	own := s.openAs(t, alice, fanout("", "alice.own"))
	own.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: withDeadLetters(balanced("alice.esc", "alice.esc", 1, "alice.esc.>"), "canary.bal", 1)}})
	if ref := (<-own.events).GetRefused(); ref == nil || codes.Code(ref.GetCode()) != codes.PermissionDenied || !contains(ref.GetError(), "dead_letter_topic") {
		t.Fatalf("later open with dead_letter_topic canary.bal answered %v, want refused PERMISSION_DENIED", ref)
	}

	// What she may do: dead-letter to a topic she may publish to, or to the default.
	mine := s.openAs(t, alice, fanout("", "alice.dead"))
	g := s.openAs(t, alice, withDeadLetters(balanced("alice.esc", "alice.esc", 1, "alice.esc.>"), "alice.dead", 1))
	if got := g.subscribed.GetDeadLetterTopic(); got != "alice.dead" {
		t.Fatalf("dead_letter_topic in force %q", got)
	}
	def := s.openAs(t, alice, withDeadLetters(balanced("alice.def", "alice.def", 1, "alice.def.>"), "dlq.alice.def", 1))
	if got := def.subscribed.GetDeadLetterTopic(); got != "dlq.alice.def" {
		t.Fatalf("default dead_letter_topic in force %q", got)
	}
	for _, topic := range []string{"alice.esc.1", "alice.def.1"} {
		if _, err := alice.Publish(ctx, &pb.PublishRequest{Topic: topic, Payload: []byte("alice's payload")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sb := range []*sub{g, def} {
		m := sb.next()
		sb.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{m.GetSystemId()}}}})
	}
	if m := mine.next(); string(m.GetPayload()) != "alice's payload" || m.GetHeaders()[deadletter.HeaderSubscription] != "alice.esc" {
		t.Fatalf("alice's dead letter: %v", m)
	}

	// The canary: its first message is bob's own.
	if _, err := bob.Publish(ctx, &pb.PublishRequest{Topic: "canary.bal", Payload: []byte("bob's")}); err != nil {
		t.Fatal(err)
	}
	if m := canary.next(); string(m.GetPayload()) != "bob's" {
		t.Fatalf("bob's canary group received %q on %s (headers %v): alice's message crossed", m.GetPayload(), m.GetTopic(), m.GetHeaders())
	}
}

// TestConsumerGroupNameNeedsGroupRights (issue 23, audit of finding 2): plugins select the
// groups whose acks and redeliveries they see by consumer_group, and a name belongs to one
// group at a time, so the groups rules cover the consumer_group as well as the
// subscription_id: alice may not run her group under bob's name "billing" (which would make
// a billing workflow plugin emit on her acks, and keep bob's billing group out while she
// holds it). Bob's own billing group opens.
func TestConsumerGroupNameNeedsGroupRights(t *testing.T) {
	s := startSecure(t, escapeUsers(t), false, false)
	alice, bob := s.as(t, "alice:a-token", nil), s.as(t, "bob:b-token", nil)
	_, err := openOn(t, alice, balanced("alice.x", "billing", 1, "alice.x.>"))
	wantCode(t, err, codes.PermissionDenied, `user "alice" may not name consumer_group "billing"`)
	s.openAs(t, bob, balanced("billing", "billing", 1, "canary.billing"))
}

// TestDeadLetterReasonBounded (issue 23, audit): a member's nack reason goes into the dead
// letter's tb-dead-letter-reason header; one larger than max_header_bytes is cut to
// deadletter.MaxReasonBytes, so the dead letter still reaches its topic.
func TestDeadLetterReasonBounded(t *testing.T) {
	tb := start(t, brokertest.Options{})
	dlq := tb.open(t, fanout("", "dlq.jobs"))
	g := tb.open(t, withDeadLetters(balanced("jobs", "jobs", 1, "jobs.>"), "", 1))
	tb.publish(t, "jobs.1", "payload")
	m := g.next()
	reason := strings.Repeat("é", 40_000) // 80 KB, over the 64 KiB max_header_bytes
	g.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{m.GetSystemId()}, Reason: reason}}})
	d := dlq.next()
	got := d.GetHeaders()[deadletter.HeaderReason]
	if len(got) > deadletter.MaxReasonBytes || !strings.HasPrefix(reason, strings.TrimSuffix(got, "…")) {
		t.Fatalf("dead letter reason of %d bytes: %.40q", len(got), got)
	}
}
