package server_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server/auth"
)

// TestReloadUsers: a reload that changes a user's token ends that user's open streams with
// UNAUTHENTICATED and refuses the old token from then on, while the new token works and an
// unchanged user's streams go on; a reload the broker cannot apply changes nothing.
func TestReloadUsers(t *testing.T) {
	users := testUsers(t)
	s := startSecure(t, users, false, false)
	ctx := context.Background()
	alice, bob := s.as(t, "alice:a-token", nil), s.as(t, "bob:b-token", nil)

	aliceSub, err := openOn(t, alice, fanout("", "orders.eu.*"))
	if err != nil {
		t.Fatal(err)
	}
	bobSub, err := openOn(t, bob, fanout("", "orders.eu.*"))
	if err != nil {
		t.Fatal(err)
	}
	alicePub, err := alice.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	publishFrame := func(seq uint64) error {
		if err := alicePub.Send(&pb.PublishStreamRequest{Sequence: seq, Messages: []*pb.PublishRequest{{Topic: "orders.eu.1"}}}); err != nil {
			return err
		}
		_, err := alicePub.Recv()
		return err
	}
	if err := publishFrame(1); err != nil {
		t.Fatalf("before the reload: %v", err)
	}
	aliceSub.next()
	bobSub.next()

	// A reload that fails changes nothing.
	for _, bad := range []struct {
		users []auth.User
		why   string
	}{
		{nil, "turn authentication off"},
		{append(users[:2:2], auth.User{Name: "carol", TokenHash: hash(t, "c"), Limits: auth.Limits{MaxConnections: 1}}), "max_connections"},
		{append(users[:2:2], auth.User{Name: "carol", TokenHash: hash(t, "c"), Publish: auth.Rules{Allow: []string{"a..b"}}}), "a..b"},
	} {
		err := s.guard.Reload(bad.users)
		if err == nil || !contains(err.Error(), bad.why) {
			t.Fatalf("reload that should fail for %q: %v", bad.why, err)
		}
	}
	if err := publishFrame(2); err != nil {
		t.Fatalf("after refused reloads: %v", err)
	}
	aliceSub.next()
	bobSub.next()

	next := append([]auth.User(nil), users...) // bob and root as they were
	next[0].TokenHash = hash(t, "a-token-2")
	if err := s.guard.Reload(next); err != nil {
		t.Fatal(err)
	}
	wantCode(t, aliceSub.ended().Err(), codes.Unauthenticated, "changed by a configuration reload")
	if _, err := alicePub.Recv(); err == nil {
		t.Fatal("alice's PublishStream goes on after her token changed")
	} else {
		wantCode(t, err, codes.Unauthenticated, `user "alice"`)
	}
	_, err = alice.Publish(ctx, &pb.PublishRequest{Topic: "orders.1"})
	wantCode(t, err, codes.Unauthenticated, `wrong token for user "alice"`)
	if _, err := s.as(t, "alice:a-token-2", nil).Publish(ctx, &pb.PublishRequest{Topic: "orders.eu.2"}); err != nil {
		t.Fatalf("alice's new token: %v", err)
	}
	if m := bobSub.next(); m.GetTopic() != "orders.eu.2" {
		t.Fatalf("bob, unchanged, got %s", m.GetTopic())
	}
}
