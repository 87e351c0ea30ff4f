package main

// Issue 23's findings 2 and 6: a dead_letter_topic that crosses a user's publish rules, and
// a consumer in a zero-delay nack loop.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// escapeTokens are the scenario's users' tokens (USER:TOKEN), hashed into its config.
var escapeTokens = map[string]string{"canary": "canary:canary-token", "alice": "alice:alice-token", "bob": "bob:bob-token"}

// escapeConfig declares the users: the canary (its own topics), bob (a balanced group on
// canary.bal) and alice, who may create groups alice.* and publish to alice.> but not to
// alice.internal.>, nor to anything of bob's.
func escapeConfig(*options, string) (string, error) {
	hash := func(user string) (string, error) {
		_, tok, _ := strings.Cut(escapeTokens[user], ":")
		h, err := bcrypt.GenerateFromPassword([]byte(tok), bcrypt.MinCost)
		return string(h), err
	}
	var b strings.Builder
	for _, u := range []struct{ name, publish, deny, subscribe, groups string }{
		{"canary", `"canary.>", "canary-warmup.>"`, "", `"canary.>"`, ""},
		{"bob", `"canary.>"`, "", `"canary.>"`, `"canary.bal"`},
		{"alice", `"alice.>"`, `"alice.internal.>"`, `"alice.>"`, `"alice.*"`},
	} {
		h, err := hash(u.name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "user %q {\n  token_hash = %q\n  publish {\n    allow = [%s]\n", u.name, h, u.publish)
		if u.deny != "" {
			fmt.Fprintf(&b, "    deny = [%s]\n", u.deny)
		}
		fmt.Fprintf(&b, "  }\n  subscribe {\n    allow = [%s]\n  }\n", u.subscribe)
		if u.groups != "" {
			fmt.Fprintf(&b, "  groups {\n    allow = [%s]\n  }\n", u.groups)
		}
		b.WriteString("}\n\n")
	}
	return b.String(), nil
}

// clientAs is a client of the broker authenticated as user (escapeTokens), closed when the
// scenario ends.
func (e *env) clientAs(user string) pb.BrokerClient { return e.dialToken(escapeTokens[user]) }

func withDLQ(req *pb.SubscribeRequest, topic string, maxDeliveries uint32) *pb.SubscribeRequest {
	o := req.GetOpen()
	o.DeadLetterTopic, o.MaxDeliveries = topic, maxDeliveries
	return req
}

// deadLetterEscape: alice tries to dead-letter into bob's group on canary.bal (outside her
// allow), into alice.internal.audit (on her deny list) and to run a group under bob's group
// name, each as the first open of a stream and as later opens; all must be refused with
// PERMISSION_DENIED. She then dead-letters her own messages to the default dlq.alice.esc.
// Bob's group receives exactly his own messages.
func deadLetterEscape(e *env) error {
	alice, bob := e.clientAs("alice"), e.clientAs("bob")
	bobSub, err := subscribe(e.ctx, bob, balancedOpen("canary.bal", 64, "canary.bal"))
	if err != nil {
		return fmt.Errorf("bob's group: %v", err)
	}
	defer bobSub.cancel()
	var bobGot, crossed atomic.Int64
	var firstCrossed atomic.Value
	bobDone := make(chan error, 1)
	go func() {
		for {
			r, err := bobSub.s.Recv()
			if err != nil {
				bobDone <- err
				return
			}
			for _, m := range r.GetMessages().GetMessages() {
				if strings.HasPrefix(string(m.GetPayload()), "bob-") && m.GetHeaders()["tb-dead-letter-subscription"] == "" {
					bobGot.Add(1)
				} else if crossed.Add(1) == 1 {
					firstCrossed.Store(fmt.Sprintf("%q on %s, headers %v", m.GetPayload(), m.GetTopic(), m.GetHeaders()))
				}
				_ = bobSub.ack(m.GetSystemId(), "")
			}
		}
	}()

	attempts := []*pb.SubscribeRequest{
		withDLQ(balancedOpen("alice.esc", 1, "alice.esc.>"), "canary.bal", 1),
		withDLQ(balancedOpen("alice.esc", 1, "alice.esc.>"), "alice.internal.audit", 1),
	}
	squat := balancedOpen("alice.sq", 1, "alice.sq.>")
	squat.GetOpen().ConsumerGroup = "canary.bal"
	attempts = append(attempts, squat)
	tries := e.o.n(1000, 30)
	refused := 0
	for i := range tries {
		req := attempts[i%len(attempts)]
		s, err := subscribe(e.ctx, alice, req)
		if err == nil {
			s.cancel()
			return fmt.Errorf("alice's open %v was accepted", req.GetOpen())
		}
		if status.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("alice's open %v: %v, want PERMISSION_DENIED", req.GetOpen(), err)
		}
		e.r.refused(err)
		refused++
	}
	// The same as later opens of one stream: refused frames, the stream goes on.
	s, err := subscribe(e.ctx, alice, fanoutOpen("", "alice.own"))
	if err != nil {
		return err
	}
	for i := range tries {
		err := s.open(attempts[i%len(attempts)])
		if status.Code(err) != codes.PermissionDenied {
			s.cancel()
			return fmt.Errorf("alice's later open: %v, want PERMISSION_DENIED", err)
		}
		refused++
	}
	s.cancel()

	// What she may do: dead-letter her own messages to dlq.alice.esc.
	mine, err := subscribe(e.ctx, alice, withDLQ(balancedOpen("alice.esc", 256, "alice.esc.>"), "", 1))
	if err != nil {
		return fmt.Errorf("alice's own group: %v", err)
	}
	defer mine.cancel()
	n := e.o.n(1000, 50)
	for i := range n {
		if _, err := alice.Publish(e.ctx, &pb.PublishRequest{Topic: "alice.esc.x", Payload: []byte(fmt.Sprintf("alice-%d", i))}); err != nil {
			return err
		}
	}
	for nacked := 0; nacked < n; {
		r, err := mine.s.Recv()
		if err != nil {
			return fmt.Errorf("alice's group after %d nacks: %v", nacked, err)
		}
		var ids []string
		for _, m := range r.GetMessages().GetMessages() {
			ids = append(ids, m.GetSystemId())
		}
		if len(ids) > 0 {
			if err := mine.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: ids}}}); err != nil {
				return err
			}
			nacked += len(ids)
		}
	}

	// Bob's own messages, after alice's dead letters: his group gets exactly them.
	m := e.o.n(200, 20)
	for i := range m {
		if _, err := bob.Publish(e.ctx, &pb.PublishRequest{Topic: "canary.bal", Payload: []byte(fmt.Sprintf("bob-%d", i))}); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for bobGot.Load() < int64(m) && time.Now().Before(deadline) {
		select {
		case err := <-bobDone:
			return fmt.Errorf("bob's group ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	e.r.figure("alice: %d escape attempts refused (dead_letter_topic outside her allow, on her deny list, bob's group name; first and later opens); %d of her own messages dead-lettered to dlq.alice.esc", refused, n)
	e.r.figure("bob's group on canary.bal: %d of his %d messages, %d crossed", bobGot.Load(), m, crossed.Load())
	if c := crossed.Load(); c > 0 {
		return fmt.Errorf("%d messages crossed into bob's group, the first %v", c, firstCrossed.Load())
	}
	if got := bobGot.Load(); got != int64(m) {
		return fmt.Errorf("bob's group got %d of his %d messages", got, m)
	}
	return nil
}

// nackLoop: a member of a group holding 1,000 messages nacks every delivery at once, with
// max_deliveries unlimited, for 20 s (the finding's run), beside a group whose first
// deliveries keep flowing. max_deliveries 4294967295 must be refused (INVALID_ARGUMENT);
// the looping group's deliveries must stay within what the redelivery back-off allows
// (default redelivery_delay_min 100ms doubling to redelivery_delay_max 10s), and the other
// group must get every message published to it.
func nackLoop(e *env) error {
	c := e.client()
	const loopMsgs = 1000
	open := balancedOpen("loop", loopMsgs, "loop.>")
	open.GetOpen().MaxDeliveries = math.MaxUint32
	loop, err := subscribe(e.ctx, c, open)
	switch {
	case status.Code(err) == codes.InvalidArgument:
		e.r.refused(err)
		open.GetOpen().MaxDeliveries = 0 // unlimited, as the cap says to
		if loop, err = subscribe(e.ctx, c, open); err != nil {
			return fmt.Errorf("the looping group with max_deliveries 0: %v", err)
		}
	case err != nil:
		return fmt.Errorf("the looping group: %v", err)
	default:
		e.r.fail("max_deliveries 4294967295 was accepted")
	}
	defer loop.cancel()
	other, err := subscribe(e.ctx, e.client(), balancedOpen("other", 64, "other.>"))
	if err != nil {
		return fmt.Errorf("the other group: %v", err)
	}
	defer other.cancel()
	for i := range loopMsgs {
		if _, err := c.Publish(e.ctx, &pb.PublishRequest{Topic: "loop.x", Payload: []byte(fmt.Sprint(i))}); err != nil {
			return err
		}
	}
	run := time.Duration(float64(20*time.Second) * e.o.scale)
	run = max(run, 5*time.Second)
	ctx, stop := context.WithTimeout(e.ctx, run)
	defer stop()
	var wg sync.WaitGroup
	var looped, maxAttempt, firsts, published atomic.Int64
	start := time.Now()
	wg.Add(3)
	go func() { // the consumer with a bug: every delivery nacked at once, in one frame per batch
		defer wg.Done()
		for ctx.Err() == nil {
			r, err := loop.s.Recv()
			if err != nil {
				return
			}
			var ids []string
			for _, m := range r.GetMessages().GetMessages() {
				ids = append(ids, m.GetSystemId())
				if a := int64(m.GetAttempt()); a > maxAttempt.Load() {
					maxAttempt.Store(a)
				}
			}
			looped.Add(int64(len(ids)))
			if len(ids) > 0 && loop.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: ids}}}) != nil {
				return
			}
		}
	}()
	go func() { // the other group's first deliveries: acked
		defer wg.Done()
		for {
			r, err := other.s.Recv()
			if err != nil {
				return
			}
			for _, m := range r.GetMessages().GetMessages() {
				if m.GetAttempt() == 1 {
					firsts.Add(1)
				}
				_ = other.ack(m.GetSystemId(), "")
			}
		}
	}()
	pub := e.client()
	pubDone := make(chan struct{})
	go func() { // 500 a second to the other group
		defer wg.Done()
		defer close(pubDone)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := pub.Publish(e.ctx, &pb.PublishRequest{Topic: "other.x", Payload: []byte("o")}); err == nil {
				published.Add(1)
			}
		}
	}()
	<-ctx.Done()
	elapsed := time.Since(start)
	<-pubDone // its last publish counted
	deadline := time.Now().Add(10 * time.Second)
	for firsts.Load() < published.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	loop.cancel()
	other.cancel()
	wg.Wait()
	// What the back-off allows each message in elapsed: the first delivery, then one after
	// each wait of 100ms, 200ms, ... up to 10s, plus one for a wait under way.
	allowed, waited := 1, time.Duration(0)
	for wait := 100 * time.Millisecond; waited+wait <= elapsed; wait = min(2*wait, 10*time.Second) {
		waited += wait
		allowed++
	}
	allowed++
	n := looped.Load()
	e.r.figure("looping group: %d deliveries of %d messages in %.1fs = %.0f deliveries/s (highest attempt %d; the back-off allows %d a message)",
		n, loopMsgs, elapsed.Seconds(), float64(n)/elapsed.Seconds(), maxAttempt.Load(), allowed)
	e.r.figure("other group: %d first deliveries of %d published beside it", firsts.Load(), published.Load())
	if n > int64(allowed*loopMsgs) {
		return fmt.Errorf("the looping group got %d deliveries in %v; the back-off allows %d", n, elapsed.Round(time.Millisecond), allowed*loopMsgs)
	}
	if f, p := firsts.Load(), published.Load(); f != p || p == 0 {
		return fmt.Errorf("the other group got %d of the %d messages published to it", f, p)
	}
	return nil
}
