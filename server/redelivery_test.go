package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
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
