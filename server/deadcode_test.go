package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// verdictHooks answers every on_redeliver of every group with v; nothing else is hooked.
type verdictHooks struct{ v broker.RedeliverVerdict }

func (verdictHooks) OnPublish(*broker.Draft) (broker.PublishVerdict, error) {
	return broker.PublishVerdict{}, nil
}
func (verdictHooks) OnPublishBatch([]broker.Draft, []broker.PublishVerdict, []error) {}
func (verdictHooks) WantsAck(string) bool                                            { return false }
func (verdictHooks) WantsRedeliver(string) bool                                      { return true }
func (verdictHooks) OnAck(*broker.AckEvent) []broker.Draft                           { return nil }
func (h verdictHooks) OnRedeliver(*broker.RedeliverEvent) broker.RedeliverVerdict    { return h.v }

// Every path that dead-letters sets exactly one tb-dead-letter-code, the same on the message
// published to the dead-letter topic and on the letter the admin API lists, beside the
// free-text reason: attempts exhausted after a nack, a passed ack deadline or a member
// leaving (max_deliveries), a ttl passed (expired), an on_redeliver verdict (rejected) and a
// plugin that failed with failure_policy "dead_letter" (plugin_error; the plugin chain's own
// test checks that a failing plugin gives that verdict).
func TestDeadLetterCodes(t *testing.T) {
	needs(t, engine.DeadLetterStore, "dead-letter store for the admin API")
	needs(t, engine.Ordering, "ordering keys")
	for _, tc := range []struct {
		name   string
		hooks  broker.Hooks
		open   func(o *pb.OpenSubscription)
		fail   func(t *testing.T, m *sub, id string) // makes the delivered message id fail
		code   string
		reason string
	}{
		{name: "nack", open: maxDeliveries(1), fail: nack("cannot parse"),
			code: deadletter.CodeMaxDeliveries, reason: "cannot parse"},
		{name: "ack deadline", open: func(o *pb.OpenSubscription) {
			o.MaxDeliveries, o.AckDeadline = 1, durationpb.New(50*time.Millisecond)
		}, fail: func(*testing.T, *sub, string) {}, code: deadletter.CodeMaxDeliveries, reason: deadletter.ReasonAckDeadline},
		{name: "member left", open: maxDeliveries(1), fail: func(_ *testing.T, m *sub, _ string) { m.close() },
			code: deadletter.CodeMaxDeliveries, reason: deadletter.ReasonMemberLeft},
		{name: "expired", open: maxDeliveries(5), fail: func(t *testing.T, m *sub, id string) {
			time.Sleep(codeTTL + 10*time.Millisecond) // past its ttl (codeTTL) while the member holds it
			nack("too late")(t, m, id)
		}, code: deadletter.CodeExpired, reason: deadletter.ReasonExpired},
		{name: "nack, ordered", open: ordered(maxDeliveries(1)), fail: nack("cannot parse"),
			code: deadletter.CodeMaxDeliveries, reason: "cannot parse"},
		{name: "expired, ordered", open: ordered(maxDeliveries(5)), fail: func(t *testing.T, m *sub, id string) {
			time.Sleep(codeTTL + 10*time.Millisecond)
			nack("too late")(t, m, id)
		}, code: deadletter.CodeExpired, reason: deadletter.ReasonExpired},
		{name: "rejected", hooks: verdictHooks{broker.RedeliverVerdict{Action: broker.RedeliverDeadLetter, Reason: "poison"}},
			open: maxDeliveries(5), fail: nack("flaky"), code: deadletter.CodeRejected, reason: "poison"},
		{name: "rejected, the nack's reason", hooks: verdictHooks{broker.RedeliverVerdict{Action: broker.RedeliverDeadLetter}},
			open: maxDeliveries(5), fail: nack("flaky"), code: deadletter.CodeRejected, reason: "flaky"},
		{name: "plugin error", hooks: verdictHooks{broker.RedeliverVerdict{Action: broker.RedeliverDeadLetter,
			Code: deadletter.CodePluginError, Reason: "plugin judge failed: trap"}},
			open: maxDeliveries(5), fail: nack("flaky"), code: deadletter.CodePluginError, reason: "plugin judge failed: trap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := start(t, brokertest.Options{Hooks: tc.hooks})
			dlq := tb.open(t, fanout("watch", "dlq.>"))
			o := balanced("work", "work", 1, "jobs.>")
			tc.open(o)
			m := tb.open(t, o)
			p := &pb.PublishRequest{Topic: "jobs.a", Payload: []byte("x"), Key: "k"}
			if tc.code == deadletter.CodeExpired {
				p.Ttl = durationpb.New(codeTTL)
			}
			r, err := tb.c.Publish(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			got := m.next()
			if got.GetSystemId() != r.GetSystemId() {
				t.Fatalf("delivered %s, want %s", got.GetSystemId(), r.GetSystemId())
			}
			tc.fail(t, m, got.GetSystemId())

			d := dlq.next()
			if h := d.GetHeaders(); h[deadletter.HeaderCode] != tc.code || h[deadletter.HeaderReason] != tc.reason ||
				h[deadletter.HeaderSystemID] != got.GetSystemId() {
				t.Fatalf("dead letter headers %v, want code %q and reason %q", h, tc.code, tc.reason)
			}
			// The JetStream engine keeps the letter just after it published it.
			var ls *adminpb.ListDeadLettersResponse
			brokertest.Eventually(t, "the dead letter kept", func() bool {
				var err error
				ls, err = tb.admin().ListDeadLetters(context.Background(), &adminpb.ListDeadLettersRequest{SubscriptionId: "work"})
				if err != nil {
					t.Fatal(err)
				}
				return len(ls.GetDeadLetters()) == 1
			})
			if dl := ls.GetDeadLetters()[0]; dl.GetCode() != tc.code || dl.GetReason() != tc.reason ||
				dl.GetHeaders()[deadletter.HeaderCode] != tc.code || dl.GetSystemId() != got.GetSystemId() {
				t.Fatalf("listed %v, want code %q and reason %q", dl, tc.code, tc.reason)
			}
			dls, _, err := tb.b.DeadLetters("work", "", 10)
			if err != nil || len(dls) != 1 || dls[0].Code != tc.code {
				t.Fatalf("engine's DeadLetters: %+v %v, want code %q", dls, err, tc.code)
			}
		})
	}
}

// codeTTL is the ttl of the message that TestDeadLetterCodes's "expired" case publishes:
// long enough for the member to get it first.
const codeTTL = 200 * time.Millisecond

func maxDeliveries(n uint32) func(*pb.OpenSubscription) {
	return func(o *pb.OpenSubscription) { o.MaxDeliveries = n }
}

// ordered makes the group's open, as with, an ordered one (ordering "key").
func ordered(with func(*pb.OpenSubscription)) func(*pb.OpenSubscription) {
	return func(o *pb.OpenSubscription) {
		with(o)
		o.Ordering = pb.Ordering_ORDERING_KEY
	}
}

func nack(reason string) func(*testing.T, *sub, string) {
	return func(_ *testing.T, m *sub, id string) {
		m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{id}, Reason: reason}}})
	}
}
