package server_test

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// takeAll receives one message per entry of want on s, acks each, and fails on a payload
// received twice or not wanted; then it checks that nothing more comes.
func takeAll(t *testing.T, s *sub, want map[string]bool) {
	t.Helper()
	got := map[string]bool{}
	for range len(want) {
		m := s.next()
		p := string(m.GetPayload())
		if !want[p] || got[p] {
			t.Fatalf("got %q (attempt %d): not one of %v, or twice", p, m.GetAttempt(), want)
		}
		got[p] = true
		s.ack(m.GetSystemId())
	}
	s.none(300 * time.Millisecond)
}

// Every member of a group dies holding unacked messages, one by cancelling its stream and
// one by losing its connection: the group's in-flight count returns to 0 within the ack
// deadline, and a member that joins later gets each message once (issue 29).
func TestInFlightReturnsWhenEveryMemberDies(t *testing.T) {
	tb := start(t, brokertest.Options{})
	const deadline = 2 * time.Second
	open := balanced("dies", "dies", 3, "dies.>")
	open.AckDeadline = durationpb.New(deadline)
	a := tb.open(t, open)
	conn := servertest.Dial(t, tb.addr)
	b, err := openOn(t, pb.NewBrokerClient(conn), open)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 6 {
		tb.publish(t, "dies.job", strconv.Itoa(i))
		want[strconv.Itoa(i)] = true
	}
	for _, s := range []*sub{a, b} { // each holds 3, its max_in_flight
		for range 3 {
			s.next()
		}
	}
	brokertest.Eventually(t, "6 in flight", func() bool { return tb.group(t, "dies").GetInFlight() == 6 })

	died := time.Now()
	a.cancel()
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	for g := tb.group(t, "dies"); g.GetInFlight() != 0 || g.GetMembers() != 0; g = tb.group(t, "dies") {
		if time.Since(died) > deadline+500*time.Millisecond {
			t.Fatalf("%v after every member died: %d in flight, %d members; want 0 within the ack deadline (%v)",
				time.Since(died), g.GetInFlight(), g.GetMembers(), deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("in flight back to 0 %v after every member died", time.Since(died))
	brokertest.Eventually(t, "the 6 queued again", func() bool { return tb.group(t, "dies").GetQueued() == 6 })

	takeAll(t, tb.open(t, balanced("dies", "dies", 10, "dies.>")), want)
	brokertest.Eventually(t, "the group settled", func() bool {
		g := tb.group(t, "dies")
		return g.GetInFlight() == 0 && g.GetQueued() == 0 && g.GetAcked() == 6
	})
}

// The scenario that deadlocks RabbitMQ's single-active-consumer queues: every member takes
// messages and lets each time out, again and again. Tinybroker keeps such members (a timeout
// is not a departure) and takes their messages back at each deadline, so when they go and a
// member that acks joins, it gets everything: nothing stuck in flight, nothing lost, nothing
// dead-lettered below max_deliveries (issue 29).
func TestEveryMemberTimesOutThenOneReturns(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("stall", "stall", 2, "stall.>")
	open.AckDeadline = durationpb.New(200 * time.Millisecond)
	open.MaxDeliveries = 50
	a, b := tb.open(t, open), tb.open(t, open)
	want := map[string]bool{}
	for i := range 6 {
		tb.publish(t, "stall.job", strconv.Itoa(i))
		want[strconv.Itoa(i)] = true
	}
	// Neither acks: each must see redeliveries (attempt 3 or more) of what timed out.
	for _, s := range []*sub{a, b} {
		for m := s.next(); m.GetAttempt() < 3; m = s.next() {
		}
	}
	if g := tb.group(t, "stall"); g.GetRedelivered() < 4 || g.GetMembers() != 2 || g.GetDeadLettered() != 0 {
		t.Fatalf("after the timeouts: %d redelivered, %d members, %d dead-lettered; want 4 or more redeliveries, both members kept, none dead",
			g.GetRedelivered(), g.GetMembers(), g.GetDeadLettered())
	}
	a.close()
	b.close()
	tb.waitMemberless(t, "stall")

	takeAll(t, tb.open(t, balanced("stall", "stall", 2, "stall.>")), want)
	brokertest.Eventually(t, "the group settled", func() bool {
		g := tb.group(t, "stall")
		return g.GetInFlight() == 0 && g.GetQueued() == 0 && g.GetAcked() == 6 && g.GetDeadLettered() == 0
	})
}

// One of the members that let everything time out starts acking while the other goes on
// timing out: it drains the group, since what times out on the other comes back to it.
func TestTimingOutMemberStartsAcking(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("mend", "mend", 2, "mend.>")
	open.AckDeadline = durationpb.New(200 * time.Millisecond)
	a := tb.open(t, open)
	tb.open(t, open) // the other member: it never acks
	for i := range 6 {
		tb.publish(t, "mend.job", strconv.Itoa(i))
	}
	for m := a.next(); m.GetAttempt() < 3; m = a.next() {
	}
	acked := map[string]bool{}
	for len(acked) < 6 {
		m := a.next()
		acked[string(m.GetPayload())] = true
		a.ack(m.GetSystemId())
	}
	brokertest.Eventually(t, "the group drained by the member that acks", func() bool {
		g := tb.group(t, "mend")
		return g.GetInFlight() == 0 && g.GetQueued() == 0 && g.GetAcked() >= 6 && g.GetMembers() == 2
	})
}
