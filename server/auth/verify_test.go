package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// grants records the order in which callers got their turn.
type grants struct {
	mu    sync.Mutex
	order []string
}

func (g *grants) add(name string) {
	g.mu.Lock()
	g.order = append(g.order, name)
	g.mu.Unlock()
}

// waiters starts n callers of v.acquire for name, each noting its turn in g and releasing
// it at once with ok = false.
func waiters(t *testing.T, v *verifier, wg *sync.WaitGroup, g *grants, name string, n int) {
	for range n {
		wg.Go(func() {
			if err := v.acquire(context.Background(), name); err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			g.add(name)
			v.release(name, false)
		})
	}
}

func (v *verifier) counts() (running, waiting int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.running, v.waiting
}

// Guesses for other names, however many wait, hold up a login by one comparison per name
// being guessed; a queue that is full refuses at once; and nothing stays behind.
func TestVerifierFairAndBounded(t *testing.T) {
	v := newVerifier()
	v.slots = 1
	if err := v.acquire(context.Background(), "first"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var g grants
	waiters(t, v, &wg, &g, unknownName, maxWaitingPerName)
	waiters(t, v, &wg, &g, "bob", maxWaitingPerName)
	brokertest.Eventually(t, "the guesses to wait", func() bool { _, w := v.counts(); return w == 2*maxWaitingPerName })
	var r refusal
	if err := v.acquire(context.Background(), unknownName); !errors.As(err, &r) {
		t.Fatalf("a guess past a full queue: %v, want a refusal at once", err)
	}
	wg.Go(func() {
		if err := v.acquire(context.Background(), "carol"); err != nil {
			t.Error(err)
			return
		}
		g.add("carol")
		v.release("carol", true)
	})
	brokertest.Eventually(t, "carol to wait", func() bool { _, w := v.counts(); return w == 2*maxWaitingPerName+1 })
	v.release("first", true)
	wg.Wait()
	// In turn: the unknown names, bob, carol; a queue of everyone would have put carol last.
	if i := slices.Index(g.order, "carol"); i < 0 || i > 2 {
		t.Fatalf("carol had her turn after %d others: %v", i, g.order)
	}
	if running, waiting := v.counts(); running != 0 || waiting != 0 || len(v.ring) != 0 {
		t.Fatalf("after every login: running %d, waiting %d, ring %v", running, waiting, v.ring)
	}
	if len(v.queues) != 1 || v.queues["bob"] == nil { // bob's failures, for his back-off
		t.Fatalf("queues left: %v", v.queues)
	}
}

// After failuresBeforeBackoff wrong tokens in a row, a user's logins are refused at once
// until the back-off has passed; a right token then clears it.
func TestVerifierBackoff(t *testing.T) {
	v := newVerifier()
	now := time.Unix(1000, 0)
	v.now = func() time.Time { return now }
	for range failuresBeforeBackoff {
		if err := v.acquire(context.Background(), "alice"); err != nil {
			t.Fatal(err)
		}
		v.release("alice", false)
	}
	err := v.acquire(context.Background(), "alice")
	if err == nil || !strings.Contains(err.Error(), "too many wrong tokens") {
		t.Fatalf("after %d failures: %v, want a refusal", failuresBeforeBackoff, err)
	}
	if err := v.acquire(context.Background(), "bob"); err != nil {
		t.Fatalf("another user during alice's back-off: %v", err)
	}
	v.release("bob", true)
	now = now.Add(backoffMin)
	if err := v.acquire(context.Background(), "alice"); err != nil {
		t.Fatalf("after the back-off: %v", err)
	}
	v.release("alice", true)
	if len(v.queues) != 0 {
		t.Fatalf("queues left: %v", v.queues)
	}
}

// With 64 callers guessing tokens for unknown names and for another user, a valid login
// that is not cached is answered OK at its first try, after at most a few comparisons: the
// guesses before it are counted as failures. Before, it queued behind every guess.
func TestValidLoginDuringFlood(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Users: []User{{Name: "alice", TokenHash: string(hash)}, {Name: "bob", TokenHash: string(hash)}}})
	if err != nil {
		t.Fatal(err)
	}
	a.verify.slots = 1
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	withToken := func(token string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for i := range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				name := "bob"
				if i%2 == 0 {
					name = "guess" + strings.Repeat("x", i)
				}
				_, _ = a.authenticate(withToken(name + ":wrong"))
			}
		})
	}
	brokertest.Eventually(t, "the flood to fill the queues", func() bool { _, w := a.verify.counts(); return w >= maxWaitingPerName })
	before := a.verify.comparisons()
	p, err := a.authenticate(withToken("alice:right"))
	compared := a.verify.comparisons() - before
	if err != nil || p == nil || p.Name != "alice" {
		t.Fatalf("valid login during the flood: %v, %v (%s)", p, err, status.Code(err))
	}
	// Ahead of alice: the comparison running, then one per name waiting (the unknown
	// names, bob), then hers. A queue of everyone would have put 16 or more first.
	if compared > 4 {
		t.Fatalf("alice's login was answered after %d comparisons, want at most 4", compared)
	}
	if _, err := a.authenticate(withToken("bob:wrong")); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a guess during the flood: %v", err)
	}
}

// A reload keeps the verified tokens of users it leaves unchanged: their clients are not
// sent back to bcrypt (nor, under a flood, to the queues). A changed user's go.
func TestReloadKeepsVerifiedTokens(t *testing.T) {
	hash := func(tok string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(tok), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	alice, bob := User{Name: "alice", TokenHash: hash("a")}, User{Name: "bob", TokenHash: hash("b")}
	a, err := New(Options{Users: []User{alice, bob}})
	if err != nil {
		t.Fatal(err)
	}
	login := func(token string) {
		t.Helper()
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		if _, err := a.authenticate(ctx); err != nil {
			t.Fatalf("%s: %v", token, err)
		}
	}
	login("alice:a")
	login("bob:b")
	before := a.verify.comparisons()
	bob.TokenHash = hash("b2")
	if err := a.Reload([]User{alice, bob}); err != nil {
		t.Fatal(err)
	}
	login("alice:a")
	if n := a.verify.comparisons() - before; n != 0 {
		t.Fatalf("alice, unchanged by the reload, was compared again (%d comparisons)", n)
	}
	login("bob:b2")
	if n := a.verify.comparisons() - before; n != 1 {
		t.Fatalf("bob, changed by the reload: %d comparisons, want 1", n)
	}
}
