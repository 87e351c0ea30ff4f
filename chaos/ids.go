package main

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Finding 4: system_ids are capabilities, and group names cannot be squatted.

func guessIDs(e *env) error {
	// The victim: a group whose one member holds one message and has 199 queued behind it.
	member, err := subscribe(e.ctx, e.client(), balancedOpen("victim", 1, "victim.*"))
	if err != nil {
		return err
	}
	defer member.cancel()
	pub := e.client()
	const held = 200
	for i := range held {
		if _, err := pub.Publish(e.ctx, &pb.PublishRequest{Topic: "victim.job", Payload: []byte(fmt.Sprint(i))}); err != nil {
			return err
		}
	}
	first, err := member.s.Recv()
	if err != nil {
		return err
	}
	firstIDs := map[string]bool{}
	for _, m := range first.GetMessages().GetMessages() {
		firstIDs[m.GetSystemId()] = true
	}

	// The attacker: not a member; it learns the shape of ids from its own publish.
	attacker := e.client()
	own, err := attacker.Publish(e.ctx, &pb.PublishRequest{Topic: "attacker.x", Payload: []byte("x")})
	if err != nil {
		return err
	}
	ownID := own.GetSystemId()
	var guesses []string
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range len(ownID) {
		for _, c := range []byte(alphabet) {
			if ownID[i] != c {
				guesses = append(guesses, ownID[:i]+string(c)+ownID[i+1:])
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range e.o.n(20_000, 500) {
		guesses = append(guesses, randomID(r))
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	settled := 0
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(guesses); i += 8 {
				_, aerr := attacker.Ack(e.ctx, &pb.Ack{SubscriptionId: "victim", SystemId: guesses[i]})
				_, nerr := attacker.Nack(e.ctx, &pb.Nack{SubscriptionId: "victim", SystemId: guesses[i]})
				for _, err := range []error{aerr, nerr} {
					if err == nil {
						mu.Lock()
						settled++
						mu.Unlock()
					} else {
						e.r.refused(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	// The same guesses as ack and nack frames on a stream of the attacker's own.
	as, err := subscribe(e.ctx, attacker, fanoutOpen("attacker", "attacker.>"))
	if err != nil {
		return err
	}
	defer as.cancel()
	for i := 0; i < len(guesses); i += 1000 {
		ids := guesses[i:min(i+1000, len(guesses))]
		_ = as.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SubscriptionId: "victim", SystemIds: ids}}})
		_ = as.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SubscriptionId: "victim", SystemIds: ids}}})
	}
	e.r.figure("%d guessed ids (of %q's shape) acked and nacked by unary calls and stream frames in %.1fs; %d unary calls succeeded",
		len(guesses), ownID, time.Since(start).Seconds(), settled)

	// What the group holds is intact: the member gets every message once, none redelivered.
	stats, err := pub.Stats(e.ctx, &pb.StatsRequest{})
	if err != nil {
		return err
	}
	for _, g := range stats.GetGroups() {
		if g.GetSubscriptionId() == "victim" {
			e.r.figure("victim group after the guesses: queued %d, in flight %d, acked %d, redelivered %d", g.GetQueued(), g.GetInFlight(), g.GetAcked(), g.GetRedelivered())
			if g.GetAcked() != 0 || g.GetRedelivered() != 0 || g.GetQueued()+g.GetInFlight() != held {
				return fmt.Errorf("the attacker settled messages: %v", g)
			}
		}
	}
	seen := map[string]bool{}
	dupes, redelivered := 0, 0
	batch := first
	for len(seen) < held {
		for _, m := range batch.GetMessages().GetMessages() {
			if seen[m.GetSystemId()] {
				dupes++
			}
			if m.GetRedelivered() {
				redelivered++
			}
			seen[m.GetSystemId()] = true
			if err := member.ack(m.GetSystemId(), "victim"); err != nil {
				return err
			}
		}
		if len(seen) >= held {
			break
		}
		if batch, err = member.s.Recv(); err != nil {
			return fmt.Errorf("member after %d messages: %v", len(seen), err)
		}
	}
	e.r.figure("the member then received all %d messages: %d duplicates, %d redelivered", len(seen), dupes, redelivered)
	if settled > 0 || dupes > 0 || redelivered > 0 {
		return fmt.Errorf("%d settled by the attacker, %d duplicates, %d redelivered", settled, dupes, redelivered)
	}
	if n := e.r.count(codes.NotFound); n != 2*len(guesses) {
		return fmt.Errorf("%d of %d guesses answered NOT_FOUND", n, 2*len(guesses))
	}
	return nil
}

func squatterConfig(*options, string) (string, error) {
	return "group \"orders\" {\n  topics = [\"orders.>\"]\n}\n", nil
}

func squatter(e *env) error {
	// A declared group is the config's: a member with other patterns is refused.
	if err := wantPrecondition(e, balancedOpen("orders", 1, "nothing.>"), "squatting the declared group"); err != nil {
		return err
	}
	// An undeclared group is its members': the squatter holds it while connected...
	sq, err := subscribe(e.ctx, e.client(), balancedOpen("jobs", 1, "nothing.>"))
	if err != nil {
		return fmt.Errorf("squatter's open: %v", err)
	}
	if err := wantPrecondition(e, balancedOpen("jobs", 16, "jobs.>"), "joining a group that has a member with other patterns"); err != nil {
		return err
	}
	// ...and once it leaves, the real members define it.
	if err := sq.leave(); err != nil {
		return err
	}
	pub := e.client()
	n := e.o.n(1000, 50)
	for i := range n {
		if r, err := pub.Publish(e.ctx, &pb.PublishRequest{Topic: "orders.new", Payload: []byte(fmt.Sprint(i))}); err != nil || r.GetRouted() != 1 {
			return fmt.Errorf("publish to the declared group before its first member: routed %d, %v", r.GetRouted(), err)
		}
	}
	real, err := subscribe(e.ctx, e.client(), balancedOpen("jobs", 16, "jobs.>"))
	if err != nil {
		return fmt.Errorf("the real member after the squatter left: %v", err)
	}
	defer real.cancel()
	if err := real.open(balancedOpen("orders", 16, "orders.>")); err != nil {
		return fmt.Errorf("the real member of the declared group: %v", err)
	}
	for i := range n {
		if _, err := pub.Publish(e.ctx, &pb.PublishRequest{Topic: "jobs.new", Payload: []byte(fmt.Sprint(i))}); err != nil {
			return err
		}
	}
	got := map[string]int{}
	for got["jobs"]+got["orders"] < 2*n {
		r, err := real.s.Recv()
		if err != nil {
			return fmt.Errorf("real member after %v: %v", got, err)
		}
		for _, m := range r.GetMessages().GetMessages() {
			got[m.GetSubscriptionId()]++
			if err := real.ack(m.GetSystemId(), m.GetSubscriptionId()); err != nil {
				return err
			}
		}
	}
	e.r.figure("squatter refused on the declared group and, while connected, on its own; after it left the real members got %v", got)
	return nil
}

// wantPrecondition sends the open frame req on a stream of its own and wants it refused with
// FAILED_PRECONDITION; it records the refusal.
func wantPrecondition(e *env, req *pb.SubscribeRequest, what string) error {
	s, err := openStream(e.ctx, e.client())
	if err != nil {
		return err
	}
	defer s.cancel()
	err = s.open(req)
	if status.Code(err) != codes.FailedPrecondition {
		return fmt.Errorf("%s: %v, want FAILED_PRECONDITION", what, err)
	}
	e.r.refused(err)
	return nil
}
