package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

// Issue 23, finding 3, against a real server: 200 callers guess tokens for other users'
// names and for names of no user. A valid user's first login (not cached) is answered OK at
// its first try, after a few comparisons of guesses (counted, not timed): one per name
// being guessed, plus those running. Before, it waited behind every guess (17-20 s with 200
// callers), and a client logged in before the flood (the canary) keeps being served.
// Authentication is in front of the engine: the memory engine only.
func TestWrongTokenFloodCannotStarveValidLogin(t *testing.T) {
	if engine.Name != brokertest.Engines[0].Name {
		t.Skipf("authentication is in front of the engine: the test runs on %s only", brokertest.Engines[0].Name)
	}
	all := auth.Rules{Allow: []string{">"}}
	var users []auth.User
	for _, n := range []string{"alice", "bob", "carol", "dave"} {
		users = append(users, auth.User{Name: n, TokenHash: hash(t, n+"-token"), Publish: all, Subscribe: all, Groups: all})
	}
	guard, err := auth.New(auth.Options{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	tb := startWith(t, brokertest.Options{}, server.Options{Auth: guard})
	as := func(token string) pb.BrokerClient {
		conn, err := grpc.NewClient(tb.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewBrokerClient(conn)
	}
	ctx := context.Background()
	canary := as("bob:bob-token") // logged in before the flood, whose name it guesses
	if _, err := canary.Publish(ctx, &pb.PublishRequest{Topic: "canary.ping"}); err != nil {
		t.Fatal(err)
	}

	floodCtx, stopFlood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopFlood(); wg.Wait() }()
	names := []string{"bob", "carol", "dave", ""}
	for c := range 8 {
		conn, err := grpc.NewClient(tb.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		attacker := pb.NewBrokerClient(conn)
		for i := range 25 {
			wg.Go(func() {
				for g := 0; floodCtx.Err() == nil; g++ {
					name := names[(i+g)%len(names)]
					if name == "" {
						name = fmt.Sprint("ghost", c, i, g)
					}
					md := metadata.AppendToOutgoingContext(floodCtx, "authorization", fmt.Sprintf("Bearer %s:guess-%d", name, g))
					_, _ = attacker.Publish(md, &pb.PublishRequest{Topic: "x"})
				}
			})
		}
	}
	// The flood is on once some guesses were compared and more were refused at once (full
	// queues, back-off). A few comparisons suffice: a guess for an unknown name is compared
	// with a hash of bcrypt's default cost, about a second under the race detector on a
	// loaded machine, and waiting for ten took CI past Eventually's patience.
	brokertest.Eventually(t, "the flood to be compared and refused", func() bool {
		failures, _ := guard.Counts()
		return guard.Comparisons() >= 3 && failures > guard.Comparisons()
	})

	before := guard.Comparisons()
	if _, err := as("alice:alice-token").Publish(ctx, &pb.PublishRequest{Topic: "alice.x"}); err != nil {
		t.Fatalf("alice's first login during the flood: %v", err)
	}
	// Ahead of alice: those running, and one per queue waiting (bob's, carol's, dave's and
	// the unknown names'), then hers; and those that end while hers runs.
	if n := guard.Comparisons() - before; n > 10 {
		t.Errorf("alice's login was answered after %d comparisons, want at most 10", n)
	}
	for range 20 {
		if _, err := canary.Publish(ctx, &pb.PublishRequest{Topic: "canary.ping"}); err != nil {
			t.Fatalf("the canary, logged in before the flood: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}
