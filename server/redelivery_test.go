package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// TestMaxDeliveriesOverTheCap (issue 23, finding 6): max_deliveries above groups {
// max_deliveries_cap } is refused with INVALID_ARGUMENT naming the limit; 0 (unlimited) and
// the cap itself open.
func TestMaxDeliveriesOverTheCap(t *testing.T) {
	tb := start(t, brokertest.Options{})
	o := balanced("capped", "capped", 1, "capped.>")
	o.MaxDeliveries = 4294967295
	_, err := openOn(t, tb.c, o)
	wantCode(t, err, codes.InvalidArgument, "max_deliveries 4294967295 is over the limit of 1000 (groups { max_deliveries_cap })")
	capN := (broker.Limits{}).WithDefaults().MaxDeliveriesCap
	o.MaxDeliveries = uint32(capN)
	if got := tb.open(t, o).subscribed.GetMaxDeliveries(); int(got) != capN {
		t.Fatalf("max_deliveries in force %d", got)
	}
}

// An ack_deadline over groups { max_ack_deadline } (12h) is refused with INVALID_ARGUMENT
// naming the limit, before any group is made; the limit itself opens. On JetStream the group's
// consumer would otherwise wait that long before redelivering what a crashed node held, for
// every member.
func TestAckDeadlineOverTheLimit(t *testing.T) {
	tb := start(t, brokertest.Options{})
	o := balanced("slow", "slow", 1, "slow.>")
	o.AckDeadline = durationpb.New(100 * 365 * 24 * time.Hour)
	_, err := openOn(t, tb.c, o)
	wantCode(t, err, codes.InvalidArgument, "(groups { max_ack_deadline }); set at most 12h0m0s")
	if g := tb.group(t, "slow"); g.GetSubscriptionId() != "" {
		t.Fatalf("a refused open made group %v", g)
	}
	o.AckDeadline = durationpb.New(12 * time.Hour)
	if got := tb.open(t, o).subscribed.GetAckDeadline().AsDuration(); got != 12*time.Hour {
		t.Fatalf("ack_deadline in force %v, want 12h", got)
	}
}

// TestZeroDelayNackLoopIsBounded (issue 23, finding 6): a member that nacks every delivery
// at once, with max_deliveries unlimited, beside another group whose first deliveries keep
// flowing. Counted, not timed: the other group gets every one of its messages, and the
// looping group's deliveries stay within what the back-off allows in the time that took
// (each message at most once per redelivery_delay_min, here 1s, and fewer as it doubles),
// where without a floor they were thousands a second.
func TestZeroDelayNackLoopIsBounded(t *testing.T) {
	const loopMsgs, otherMsgs = 20, 500
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupRedeliveryDelayMin: time.Second}})
	loop := tb.open(t, balanced("loop", "loop", loopMsgs, "loop.>"))
	other := tb.open(t, balanced("other", "other", 16, "other.>"))
	begin := time.Now()
	for i := range loopMsgs {
		tb.publish(t, "loop.x", fmt.Sprint(i))
	}
	looped := make(chan int, 1)
	ctx, stop := context.WithCancel(context.Background())
	go func() { // the consumer with a bug: nack at once, every time
		n := 0
		defer func() { looped <- n }()
		for {
			select {
			case m := <-loop.msgs:
				n++
				if err := loop.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{m.GetSystemId()}}}}); err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for i := range otherMsgs {
		tb.publish(t, "other.x", fmt.Sprint(i))
	}
	for i := range otherMsgs {
		m := other.next()
		if m.GetAttempt() != 1 {
			t.Fatalf("the other group's message %d came with attempt %d", i, m.GetAttempt())
		}
		other.ack(m.GetSystemId())
	}
	stop()
	n := <-looped
	elapsed := time.Since(begin)
	bound := loopMsgs * (2 + int(elapsed/time.Second))
	t.Logf("%d first deliveries to the other group; the looping group's %d messages delivered %d times in %v (bound %d)", otherMsgs, loopMsgs, n, elapsed.Round(time.Millisecond), bound)
	if n < loopMsgs || n > bound {
		t.Fatalf("the looping group's %d messages were delivered %d times in %v; the back-off allows %d at most", loopMsgs, n, elapsed, bound)
	}
}

// TestBackoffPolicyOverGRPC (issue 28), on each engine, in real time: the broker-wide
// redelivery_backoff list is what a group made by its first member takes; a nack without a
// delay over the stream comes back at the list's entry (±300ms: real time and -race), the
// last entry repeating; DescribeGroup echoes the policy in force — the list, or a declared
// group's own doubling with its jitter — and leaves min and max unset beside a list.
func TestBackoffPolicyOverGRPC(t *testing.T) {
	const tolerance = 300 * time.Millisecond
	list := []time.Duration{time.Second, 1600 * time.Millisecond}
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupRedeliveryBackoff: list}})
	if err := tb.b.Declare(broker.GroupConfig{Name: "own", Patterns: []string{"own.>"},
		Limits: broker.GroupLimits{RedeliveryDelayMin: 2 * time.Second, RedeliveryDelayMax: time.Minute, RedeliveryJitter: 0.25}}); err != nil {
		t.Fatal(err)
	}
	m := tb.open(t, balanced("listed", "listed", 1, "listed.>"))
	tb.publish(t, "listed.x", "1")
	msg := m.next()
	for attempt, want := range []time.Duration{list[0], list[1], list[1]} {
		start := time.Now()
		m.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{msg.GetSystemId()}}}})
		msg = m.next()
		took := time.Since(start)
		if took < want-tolerance || took > want+tolerance || int(msg.GetAttempt()) != attempt+2 {
			t.Fatalf("attempt %d: redelivered after %v as attempt %d, want %v ± %v", attempt+1, took, msg.GetAttempt(), want, tolerance)
		}
	}

	ctx := context.Background()
	d, err := tb.admin().DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "listed"})
	if err != nil {
		t.Fatal(err)
	}
	s := d.GetSettings()
	var got []time.Duration
	for _, x := range s.GetRedeliveryBackoff() {
		got = append(got, x.AsDuration())
	}
	if !slices.Equal(got, list) || s.GetRedeliveryDelayMin() != nil || s.GetRedeliveryDelayMax() != nil || s.GetRedeliveryJitter() != 0 {
		t.Fatalf("described listed: %v", s)
	}
	if d, err = tb.admin().DescribeGroup(ctx, &adminpb.DescribeGroupRequest{SubscriptionId: "own"}); err != nil {
		t.Fatal(err)
	}
	s = d.GetSettings()
	if s.GetRedeliveryBackoff() != nil || s.GetRedeliveryDelayMin().AsDuration() != 2*time.Second || s.GetRedeliveryDelayMax().AsDuration() != time.Minute || s.GetRedeliveryJitter() != 0.25 {
		t.Fatalf("described own: %v", s)
	}
}
