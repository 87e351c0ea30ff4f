package server_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// The seed's scenario: three workers in group "image-resizer", fifty thumbnail jobs, each job
// goes to exactly one worker, acked with the unary Ack, none processed twice.
func TestSeedImageResizer(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("image-resizer-group", "image-resizer", 0, "jobs.thumb.*")
	var workers []*sub
	for range 3 {
		workers = append(workers, tb.open(t, open))
	}
	if got := workers[0].subscribed.GetMaxInFlight(); got != 1 {
		t.Fatalf("default max_in_flight = %d, want 1", got)
	}
	for i := 1; i <= 50; i++ {
		tb.publish(t, "jobs.thumb."+strconv.Itoa(i), "image "+strconv.Itoa(i))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	perWorker := make([]int, 3)
	var wg sync.WaitGroup
	total := make(chan struct{}, 50)
	stop := make(chan struct{})
	for w, s := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-s.msgs:
					mu.Lock()
					seen[m.GetTopic()]++
					perWorker[w]++
					mu.Unlock()
					if _, err := tb.c.Ack(context.Background(), &pb.Ack{SubscriptionId: "image-resizer-group", SystemId: m.GetSystemId()}); err != nil {
						t.Errorf("ack: %v", err)
					}
					total <- struct{}{}
				case <-stop:
					return
				}
			}
		}()
	}
	for range 50 {
		select {
		case <-total:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d jobs processed", len(seen))
		}
	}
	close(stop)
	wg.Wait()
	if len(seen) != 50 {
		t.Fatalf("%d distinct jobs processed, want 50", len(seen))
	}
	for topic, n := range seen {
		if n != 1 {
			t.Errorf("%s processed %d times", topic, n)
		}
	}
	for w, n := range perWorker {
		if n == 0 {
			t.Errorf("worker %d got no job: round-robin should spread them", w)
		}
	}
	brokertest.Eventually(t, "50 acks counted", func() bool { return tb.group(t, "image-resizer-group").GetAcked() == 50 })
	if g := tb.group(t, "image-resizer-group"); g.GetRedelivered() != 0 || g.GetInFlight() != 0 {
		t.Fatalf("group stats %v: want no redelivery, nothing in flight", g)
	}
}

// Round-robin among members with room: with max_in_flight 1 and no acks, each member holds one
// message and the rest wait in the group's queue; an ack releases the next.
func TestBalancedRoundRobinAndMaxInFlight(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("rr", "rr", 1, "q")
	a, b := tb.open(t, open), tb.open(t, open)
	for i := range 4 {
		tb.publish(t, "q", strconv.Itoa(i))
	}
	ma, mb := a.next(), b.next()
	if string(ma.GetPayload()) != "0" || string(mb.GetPayload()) != "1" {
		t.Fatalf("a got %q, b got %q; want 0 and 1 in join order", ma.GetPayload(), mb.GetPayload())
	}
	a.none(50 * time.Millisecond)
	if g := tb.group(t, "rr"); g.GetQueued() != 2 || g.GetInFlight() != 2 {
		t.Fatalf("queued %d in flight %d, want 2 and 2", g.GetQueued(), g.GetInFlight())
	}
	b.ack(mb.GetSystemId())
	if m := b.next(); string(m.GetPayload()) != "2" {
		t.Fatalf("after b's ack b got %q, want 2", m.GetPayload())
	}
	a.ack(ma.GetSystemId())
	if m := a.next(); string(m.GetPayload()) != "3" {
		t.Fatalf("after a's ack a got %q, want 3", m.GetPayload())
	}
}

// A fanout subscription gets every matching message once, in publish order, even when
// several of its patterns match; several subscriptions each get their own copy.
func TestFanout(t *testing.T) {
	tb := start(t, brokertest.Options{})
	all := tb.open(t, fanout("all", ">"))
	orders := tb.open(t, fanout("orders", "orders.*", "orders.>")) // overlapping patterns
	eu := tb.open(t, fanout("", "orders.eu.*"))                    // id chosen by the broker
	if eu.subscribed.GetSubscriptionId() == "" {
		t.Fatal("broker did not name an anonymous fanout subscription")
	}
	group := tb.open(t, balanced("g", "g", 100, "orders.>"))
	topics := []string{"orders.eu.1", "orders.us.2", "orders.created", "users.1", "orders"}
	for i, topic := range topics {
		resp, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Payload: []byte(strconv.Itoa(i)), Headers: map[string]string{"n": strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]uint32{"orders.eu.1": 4, "orders.us.2": 3, "orders.created": 3, "users.1": 1, "orders": 1}[topic]
		if resp.GetRouted() != want {
			t.Errorf("%s routed to %d, want %d", topic, resp.GetRouted(), want)
		}
	}
	expect := func(s *sub, want ...string) {
		t.Helper()
		for i, topic := range want {
			m := s.next()
			if m.GetTopic() != topic {
				t.Fatalf("%s message %d: got %s, want %s", s.subscribed.GetSubscriptionId(), i, m.GetTopic(), topic)
			}
			if m.GetAttempt() != 1 || m.GetRedelivered() || m.GetHeaders()["n"] == "" || m.GetPublishTimeUnixNano() == 0 {
				t.Fatalf("message fields not set: %v", m)
			}
		}
		s.none(30 * time.Millisecond)
	}
	expect(all, topics...)
	expect(orders, "orders.eu.1", "orders.us.2", "orders.created")
	expect(eu, "orders.eu.1")
	expect(group, "orders.eu.1", "orders.us.2", "orders.created")
}

// Publish order is kept per publisher under load, for every fanout subscriber.
func TestFanoutOrderPerPublisher(t *testing.T) {
	tb := start(t, brokertest.Options{})
	subs := []*sub{tb.open(t, fanout("a", "load.>")), tb.open(t, fanout("b", "load.*"))}
	const publishers, n = 4, 300
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if _, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: fmt.Sprintf("load.p%d", p), Payload: []byte(strconv.Itoa(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range subs {
		next := make([]int, publishers)
		for range publishers * n {
			m := s.next()
			var p int
			fmt.Sscanf(m.GetTopic(), "load.p%d", &p)
			i, _ := strconv.Atoi(string(m.GetPayload()))
			if i != next[p] {
				t.Fatalf("%s: publisher %d message %d arrived when %d was due", s.subscribed.GetSubscriptionId(), p, i, next[p])
			}
			next[p]++
		}
	}
}

// A member that disconnects without acking: its messages go at once to the others, marked
// redelivered with their attempt count, oldest first.
func TestRedistributeOnDisconnect(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("work", "workers", 10, "work.>")
	a := tb.open(t, open)
	for i := range 6 {
		tb.publish(t, "work.item", strconv.Itoa(i))
	}
	var held []string
	for range 6 {
		held = append(held, string(a.next().GetPayload()))
	}
	b := tb.open(t, open)
	b.none(30 * time.Millisecond) // a holds all six; nothing is waiting
	a.close()
	for i := range 6 {
		m := b.next()
		if string(m.GetPayload()) != held[i] || m.GetAttempt() != 2 || !m.GetRedelivered() {
			t.Fatalf("redelivery %d: got %q attempt %d redelivered %v, want %q attempt 2", i, m.GetPayload(), m.GetAttempt(), m.GetRedelivered(), held[i])
		}
	}
	brokertest.Eventually(t, "redelivery counted", func() bool {
		g := tb.group(t, "work")
		return g.GetRedelivered() == 6 && g.GetMembers() == 1
	})
}

// A broken transport (the client's connection closes) counts as a disconnect too.
func TestRedistributeOnBrokenConnection(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("conn", "conn", 1, "c")
	other := servertest.Dial(t, tb.addr)
	a, err := openOn(t, pb.NewBrokerClient(other), open)
	if err != nil {
		t.Fatal(err)
	}
	b := tb.open(t, open)
	tb.publish(t, "c", "x")
	var m *pb.Message
	select {
	case m = <-a.msgs:
		other.Close() // a had it: drop a's whole connection
	case <-b.msgs:
		t.Skip("round-robin gave the message to b; covered by TestRedistributeOnDisconnect")
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	if got := b.next(); got.GetSystemId() != m.GetSystemId() || got.GetAttempt() != 2 {
		t.Fatalf("b got %v, want %s attempt 2", got, m.GetSystemId())
	}
}

// With no member left, unacked messages wait at the head of the queue for the next member,
// before messages published in the meantime.
func TestLastMemberLeaves(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("solo", "solo", 2, "s")
	a := tb.open(t, open)
	tb.publish(t, "s", "1")
	tb.publish(t, "s", "2")
	a.next()
	a.next()
	a.close()
	tb.waitMemberless(t, "solo")
	tb.publish(t, "s", "3")
	if g := tb.group(t, "solo"); g.GetQueued() != 3 {
		t.Fatalf("queued %d, want 3", g.GetQueued())
	}
	b := tb.open(t, balanced("solo", "solo", 3, "s"))
	for _, want := range []struct {
		payload string
		attempt uint32
	}{{"1", 2}, {"2", 2}, {"3", 1}} {
		m := b.next()
		if string(m.GetPayload()) != want.payload || m.GetAttempt() != want.attempt {
			t.Fatalf("got %q attempt %d, want %q attempt %d", m.GetPayload(), m.GetAttempt(), want.payload, want.attempt)
		}
	}
}

// What is not acked within the ack deadline is redelivered; a touch extends the deadline.
func TestAckDeadlineAndTouch(t *testing.T) {
	tb := start(t, brokertest.Options{})
	open := balanced("slow", "slow", 1, "t")
	open.AckDeadline = durationpb.New(150 * time.Millisecond)
	a := tb.open(t, open)
	tb.publish(t, "t", "x")
	first := a.next()
	again := a.next() // not acked: the deadline passes and it comes back
	if again.GetSystemId() != first.GetSystemId() || again.GetAttempt() != 2 || !again.GetRedelivered() {
		t.Fatalf("got %v, want %s again with attempt 2", again, first.GetSystemId())
	}
	a.ack(again.GetSystemId())

	// Touch every 50ms for 2.5 deadlines of 1s: no redelivery. (The margin is wide so that a
	// loaded machine delaying a touch frame does not fail the test.)
	touchy := balanced("touchy", "touchy", 1, "u")
	touchy.AckDeadline = durationpb.New(time.Second)
	b := tb.open(t, touchy)
	tb.publish(t, "u", "y")
	m := b.next()
	until := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(until) {
		b.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Touch{Touch: &pb.TouchBatch{SystemIds: []string{m.GetSystemId()}}}})
		b.none(50 * time.Millisecond)
	}
	b.ack(m.GetSystemId())
	brokertest.Eventually(t, "ack", func() bool { return tb.group(t, "touchy").GetAcked() == 1 })
	if g := tb.group(t, "touchy"); g.GetRedelivered() != 0 {
		t.Fatalf("redelivered %d, want 0 (touches must hold the deadline off)", g.GetRedelivered())
	}
}

// Nack with a delay holds the message back that long; without one it comes back at once.
func TestNack(t *testing.T) {
	tb := start(t, brokertest.Options{})
	a := tb.open(t, balanced("n", "n", 1, "n"))
	id := tb.publish(t, "n", "x")
	a.next()
	const delay = 300 * time.Millisecond
	sent := time.Now()
	a.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{id}, Delay: durationpb.New(delay)}}})
	m := a.next()
	if waited := time.Since(sent); waited < delay {
		t.Fatalf("redelivered after %v, before the %v delay", waited, delay)
	}
	if m.GetSystemId() != id || m.GetAttempt() != 2 {
		t.Fatalf("got %v, want %s attempt 2", m, id)
	}
	if _, err := tb.c.Nack(context.Background(), &pb.Nack{SubscriptionId: "n", SystemId: id}); err != nil {
		t.Fatal(err)
	}
	if m := a.next(); m.GetAttempt() != 3 {
		t.Fatalf("after unary nack: attempt %d, want 3", m.GetAttempt())
	}
}

// After max_deliveries attempts a failing message goes to the dead-letter topic, as an
// ordinary message whose headers say where it came from, how often it was tried and why.
func TestDeadLetter(t *testing.T) {
	tb := start(t, brokertest.Options{})
	dlq := tb.open(t, fanout("dlq-watch", "dlq.>"))
	open := balanced("pay", "payments", 1, "pay.*")
	open.MaxDeliveries = 2
	a := tb.open(t, open)
	if a.subscribed.GetDeadLetterTopic() != "dlq.pay" || a.subscribed.GetMaxDeliveries() != 2 {
		t.Fatalf("subscribed %v: want dead_letter_topic dlq.pay, max_deliveries 2", a.subscribed)
	}
	id := tb.publishH(t, "pay.card", "charge", map[string]string{"tenant": "acme"})
	for attempt := uint32(1); attempt <= 2; attempt++ {
		m := a.next()
		if m.GetAttempt() != attempt {
			t.Fatalf("attempt %d, want %d", m.GetAttempt(), attempt)
		}
		a.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{id}, Reason: "card declined"}}})
	}
	d := dlq.next()
	h := d.GetHeaders()
	if d.GetTopic() != "dlq.pay" || string(d.GetPayload()) != "charge" || h["tenant"] != "acme" ||
		h[deadletter.HeaderReason] != "card declined" || h[deadletter.HeaderAttempts] != "2" ||
		h[deadletter.HeaderTopic] != "pay.card" || h[deadletter.HeaderSystemID] != id ||
		h[deadletter.HeaderGroup] != "payments" || h[deadletter.HeaderSubscription] != "pay" {
		t.Fatalf("dead letter %v", d)
	}
	a.none(50 * time.Millisecond)
	// On JetStream the in-flight count settles when the consumer has processed the term that
	// follows the dead letter's publish (as after a drop, TestOverflowDropOldest): poll.
	brokertest.Eventually(t, "dead-lettered 1, nothing in flight or queued", func() bool {
		g := tb.group(t, "pay")
		return g.GetDeadLettered() == 1 && g.GetInFlight() == 0 && g.GetQueued() == 0
	})
}

// A timed-out message dead-letters too, with the ack-deadline reason.
func TestDeadLetterOnAckDeadline(t *testing.T) {
	tb := start(t, brokertest.Options{})
	dlq := tb.open(t, fanout("", "failed.jobs"))
	open := balanced("dl2", "dl2", 1, "j")
	open.MaxDeliveries, open.DeadLetterTopic = 1, "failed.jobs"
	open.AckDeadline = durationpb.New(50 * time.Millisecond)
	a := tb.open(t, open)
	tb.publish(t, "j", "x")
	a.next()
	if d := dlq.next(); d.GetHeaders()[deadletter.HeaderReason] != deadletter.ReasonAckDeadline {
		t.Fatalf("dead letter headers %v", d.GetHeaders())
	}
}

// A group without members accumulates up to its bound; "reject" then refuses what is
// published to it, but only for itself: the publish still reaches every other matching
// subscription (isolation). A publish that every matching target refused gets
// RESOURCE_EXHAUSTED naming the group and the limit.
func TestOverflowReject(t *testing.T) {
	needsGroupBounds(t)
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupMaxQueued: 3}})
	watcher := tb.open(t, fanout("w", "o.*"))
	tb.memberless(t, "full", "o.*")
	for i := range 3 {
		tb.publish(t, "o.a", strconv.Itoa(i))
	}
	r, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "o.a", Payload: []byte("3")})
	if err != nil || r.GetRouted() != 1 {
		t.Fatalf("publish to a full group and a fanout subscription: routed %d, %v; want 1 (the fanout), OK", r.GetRouted(), err)
	}
	for i := range 4 {
		if got := string(watcher.next().GetPayload()); got != strconv.Itoa(i) {
			t.Fatalf("watcher got %q", got)
		}
	}
	watcher.close()
	brokertest.Eventually(t, "watcher gone", func() bool { return len(tb.stats(t).GetSubscriptions()) == 0 })
	_, err = tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "o.b", Payload: []byte("4")})
	wantCode(t, err, codesResourceExhausted, `consumer group "full"`)
	wantCode(t, err, codesResourceExhausted, "max_queued")
	if g := tb.group(t, "full"); g.GetQueued() != 3 {
		t.Fatalf("queued %d, want 3", g.GetQueued())
	}
	b := tb.open(t, balanced("full", "full", 10, "o.*"))
	for i := range 3 {
		if got := string(b.next().GetPayload()); got != strconv.Itoa(i) {
			t.Fatalf("member got %q, want %d", got, i)
		}
	}
	tb.publish(t, "o.a", "room again")
}

// "drop_oldest" keeps the newest messages and counts what it dropped.
func TestOverflowDropOldest(t *testing.T) {
	needsGroupBounds(t)
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupMaxQueued: 3, GroupOverflow: broker.OverflowDropOldest}})
	tb.memberless(t, "d", "d")
	for i := range 5 {
		tb.publish(t, "d", strconv.Itoa(i))
	}
	// JetStream's counts come from its consumer's state, which settles after the drop's
	// term is processed (once read as dropped 2, queued 2): poll. What is delivered below
	// shows that nothing else went.
	brokertest.Eventually(t, "dropped 2 and queued 3", func() bool {
		g := tb.group(t, "d")
		return g.GetDropped() == 2 && g.GetQueued() == 3
	})
	b := tb.open(t, balanced("d", "d", 5, "d"))
	for _, want := range []string{"2", "3", "4"} {
		if got := string(b.next().GetPayload()); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// With groups.expire_after, a group without members is removed with what it holds, and no
// longer blocks publishes to its topics; without it, the group waits for its next member.
func TestGroupExpiry(t *testing.T) {
	needs(t, engine.GroupExpiry, "expiry of groups without members (groups { expire_after })")
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupExpireAfter: 500 * time.Millisecond, GroupMaxQueued: 1}})
	// Until the server has seen the member leave, "held" would go to it, in flight, and the
	// next publish would be queued instead of refused.
	tb.memberless(t, "gone", "e")
	tb.publish(t, "e", "held") // queued for the next member, up to the bound
	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "e"})
	wantCode(t, err, codesResourceExhausted, "full")
	brokertest.Eventually(t, "group expired", func() bool { return len(tb.stats(t).GetGroups()) == 0 })
	if resp, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "e"}); err != nil || resp.GetRouted() != 0 {
		t.Fatalf("after expiry: %v %v", resp, err)
	}
	// The name is free again, for other patterns too.
	n := tb.open(t, balanced("gone", "gone", 1, "other"))
	tb.publish(t, "other", "fresh")
	if got := n.next(); string(got.GetPayload()) != "fresh" {
		t.Fatalf("got %q", got.GetPayload())
	}
	// A group with a member does not expire.
	n.none(300 * time.Millisecond)
	if len(tb.stats(t).GetGroups()) != 1 {
		t.Fatal("a group with a member expired")
	}
}
