package memory

import (
	"errors"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// TestQuotaBytes: the groups one quota's owner created share its byte budget: a publish
// one of them cannot hold is refused for that group (ErrGroupFull naming the user's budget)
// while a group of another owner still takes it; acks give the bytes back.
func TestQuotaBytes(t *testing.T) {
	gt := newGroupTest(t, Options{})
	alice := &broker.Quota{Owner: `user "alice"`, MaxBytes: 3000}
	withQuota := func(q *broker.Quota) func(*broker.SubscribeOptions) {
		return func(o *broker.SubscribeOptions) { o.Quota = q }
	}
	a1 := gt.member("a1", 100, withQuota(alice))
	a2 := gt.member("a2", 100, withQuota(alice))
	other := gt.member("other", 100)
	payload := strings.Repeat("x", 500)
	for range 10 {
		if _, err := gt.b.Publish("j.x", []byte(payload), nil); err != nil {
			t.Fatalf("publish: %v (the group without a quota takes every message)", err)
		}
	}
	if gt.stats("a1").Rejected+gt.stats("a2").Rejected == 0 {
		t.Fatalf("alice's groups refused nothing; they hold %d bytes of a %d budget", alice.Bytes(), alice.MaxBytes)
	}
	if b := alice.Bytes(); b > alice.MaxBytes || b != gt.stats("a1").Bytes+gt.stats("a2").Bytes {
		t.Fatalf("quota holds %d, groups %d + %d; budget %d", b, gt.stats("a1").Bytes, gt.stats("a2").Bytes, alice.MaxBytes)
	}
	if n := len(got(other)); n != 10 {
		t.Fatalf("the group without a quota got %d messages, want 10", n)
	}
	// Without it, the publish is refused by every target, naming the user's budget.
	other.Close()
	if err := gt.b.DeleteGroup("other"); err != nil {
		t.Fatal(err)
	}
	_, err := gt.b.Publish("j.x", []byte(payload), nil)
	if !errors.Is(err, broker.ErrGroupFull) || !strings.Contains(err.Error(), `user "alice"`) || !strings.Contains(err.Error(), "max_queued_bytes") {
		t.Fatalf("publish to alice's full groups: %v; want ErrGroupFull naming alice's budget", err)
	}
	// Acks give the budget back.
	for _, s := range []*Subscription{a1, a2} {
		var ids []string
		for _, d := range s.Next(nil, 1000, 1<<30) {
			if d.Msg != nil {
				ids = append(ids, d.Msg.SystemID)
			}
		}
		if skipped := s.Ack(ids); skipped != 0 {
			t.Fatalf("%d acks skipped", skipped)
		}
	}
	if b := alice.Bytes(); b != 0 {
		t.Fatalf("after every ack the quota holds %d bytes, want 0", b)
	}
	if _, err := gt.b.Publish("j.x", []byte(payload), nil); err != nil {
		t.Fatalf("publish after the acks: %v", err)
	}
}

// TestQuotaGroups: the owner creates at most MaxGroups groups; joining an existing group
// costs nothing; a deleted group gives its place back.
func TestQuotaGroups(t *testing.T) {
	gt := newGroupTest(t, Options{})
	q := &broker.Quota{Owner: `user "bob"`, MaxGroups: 1}
	open := func(id string) (*Subscription, error) {
		return gt.b.Subscribe(broker.SubscribeOptions{ID: id, Group: id, Patterns: []string{"j.>"}, Mode: broker.Balanced, Quota: q})
	}
	s1, err := open("g1")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := open("g1") // a second member of the same group
	if err != nil {
		t.Fatalf("joining the user's own group: %v", err)
	}
	if _, err := open("g2"); !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), `user "bob"`) {
		t.Fatalf("second group: %v, want ErrLimit naming the user", err)
	}
	if q.Groups() != 1 || gt.stats("g1").Members != 2 {
		t.Fatalf("quota counts %d groups, g1 has %d members; want 1 and 2", q.Groups(), gt.stats("g1").Members)
	}
	s1.Close()
	s2.Close()
	if err := gt.b.DeleteGroup("g1"); err != nil {
		t.Fatal(err)
	}
	if q.Groups() != 0 {
		t.Fatalf("after deleting the group the quota counts %d, want 0", q.Groups())
	}
	if _, err := open("g2"); err != nil {
		t.Fatalf("a new group after the delete: %v", err)
	}
}
