package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Finding 1: a group with no members receiving large payloads fills its byte bound and is
// refused with RESOURCE_EXHAUSTED naming the group and the setting, long before memory is
// in danger; the canary keeps working.
func TestMemberlessGroupByteBound(t *testing.T) {
	needsGroupBounds(t)
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupMaxQueuedBytes: 2 << 20}})
	c := newCanary(t, tb)
	tb.memberless(t, "bulk", "bulk.>")
	payload := make([]byte, 256<<10)
	var err error
	n := 0
	for ; n < 100; n++ {
		if _, err = tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "bulk.x", Payload: payload}); err != nil {
			break
		}
		c.check()
	}
	wantCode(t, err, codes.ResourceExhausted, `consumer group "bulk"`)
	wantCode(t, err, codes.ResourceExhausted, "max_queued_bytes")
	if n < 6 || n > 8 {
		t.Fatalf("%d messages of 256 KiB accepted under a 2 MiB bound", n)
	}
	if used := tb.b.Stats().MemoryUsed; used > 2<<20+64<<10 {
		t.Fatalf("broker holds %d bytes", used)
	}
	st := tb.stats(t)
	if g := tb.group(t, "bulk"); g.GetRejected() != 1 || g.GetBytes() > 2<<20 || g.GetBytes() < 1<<20 || g.GetQueued() != uint32(n) {
		t.Fatalf("group stats %v", g)
	}
	if st.GetRefused() != 1 || st.GetMemoryUsedBytes() < 1<<20 || st.GetMemoryBudgetBytes() == 0 {
		t.Fatalf("stats: refused %d, memory %d of %d", st.GetRefused(), st.GetMemoryUsedBytes(), st.GetMemoryBudgetBytes())
	}
	c.check()
}

// Finding 2: a group abandoned on ">" that fills up refuses only for itself: every other
// subscription and group keeps getting what is published, even on topics it matches.
func TestAbandonedGroupDoesNotBlockOthers(t *testing.T) {
	needsGroupBounds(t)
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupMaxQueued: 50}})
	c := newCanary(t, tb)
	tb.memberless(t, "abandoned", ">")
	for i := range 50 {
		tb.publish(t, "x.y", strconv.Itoa(i))
	}
	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "x.y", Payload: []byte("refused")})
	wantCode(t, err, codes.ResourceExhausted, `consumer group "abandoned"`)
	work := tb.open(t, balanced("work", "work", 10, "work.*"))
	for i := range 20 {
		r, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "work.a", Payload: []byte(strconv.Itoa(i))})
		if err != nil || r.GetRouted() != 1 {
			t.Fatalf("publish to a live group beside the full one: routed %d, %v", r.GetRouted(), err)
		}
		m := work.next()
		work.ack(m.GetSystemId())
		c.check()
	}
	if g := tb.group(t, "abandoned"); g.GetQueued() != 50 {
		t.Fatalf("abandoned group queued %d, want 50", g.GetQueued())
	}
}

// Finding 4: a system_id is a capability. A client that is not a member cannot settle
// another group's messages by guessing ids, and nobody can ack a message that was never
// delivered.
func TestSystemIDsAreCapabilities(t *testing.T) {
	tb := start(t, brokertest.Options{})
	c := newCanary(t, tb)
	member := tb.open(t, balanced("g", "g", 1, "j"))
	first := tb.publish(t, "j", "1")
	queued := tb.publish(t, "j", "2") // waits: max_in_flight is 1
	if len(first) != 22 || first == queued {
		t.Fatalf("system_ids %q, %q: want 22 distinct characters", first, queued)
	}
	got := member.next()
	if got.GetSystemId() != first {
		t.Fatalf("delivered %q, published %q", got.GetSystemId(), first)
	}
	other := byte('A') // one character of first changed: a different block, not another spelling
	if first[10] == other {
		other = 'B'
	}
	guesses := []string{"00000000-1", "00000000-2", first[:10] + string(other) + first[11:]}
	if up := strings.ToUpper(first); up != first {
		guesses = append(guesses, up)
	}
	for range 200 {
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		guesses = append(guesses, base64.RawURLEncoding.EncodeToString(raw[:]))
	}
	for _, id := range guesses {
		if _, err := tb.c.Ack(context.Background(), &pb.Ack{SubscriptionId: "g", SystemId: id}); codeOf(err) != codes.NotFound {
			t.Fatalf("ack of guessed id %q: %v, want NOT_FOUND", id, err)
		}
		if _, err := tb.c.Nack(context.Background(), &pb.Nack{SubscriptionId: "g", SystemId: id}); codeOf(err) != codes.NotFound {
			t.Fatalf("nack of guessed id %q: %v, want NOT_FOUND", id, err)
		}
	}
	_, err := tb.c.Ack(context.Background(), &pb.Ack{SubscriptionId: "g", SystemId: queued})
	wantCode(t, err, codes.NotFound, "does not hold it")
	if g := tb.group(t, "g"); g.GetInFlight() != 1 || g.GetQueued() != 1 || g.GetAcked() != 0 {
		t.Fatalf("after the guesses: %v", g)
	}
	c.check()
	member.ack(first)
	if second := member.next(); second.GetSystemId() != queued {
		t.Fatalf("second delivery %q, want %q", second.GetSystemId(), queued)
	}
}

// Finding 4: a client that opened a group name first, with other patterns, and left does
// not lock the real members out: a group without members is redefined by its next member.
// While it has members, it is theirs.
func TestGroupNameNotSquatted(t *testing.T) {
	tb := start(t, brokertest.Options{})
	c := newCanary(t, tb)
	squatter := tb.open(t, balanced("jobs", "jobs", 1, "nothing.>"))
	s, err := openOn(t, tb.c, balanced("jobs", "jobs", 1, "jobs.>"))
	if err == nil {
		s.close()
		t.Fatal("a member with other patterns joined a group with members")
	}
	wantCode(t, err, codes.FailedPrecondition, "same topic_patterns")
	squatter.close()
	brokertest.Eventually(t, "squatter gone", func() bool { return tb.group(t, "jobs").GetMembers() == 0 })
	real := tb.open(t, balanced("jobs", "jobs", 1, "jobs.>"))
	tb.publish(t, "jobs.1", "work")
	if m := real.next(); string(m.GetPayload()) != "work" {
		t.Fatalf("got %q", m.GetPayload())
	}
	c.check()
}

// Finding 7: a group declared up front (a group block in the config file) exists from
// start-up, so what is published before its first member connects — after a restart, say —
// is queued for it, not lost with routed = 0. Its definition cannot be changed by a member.
func TestDeclaredGroupQueuesBeforeFirstMember(t *testing.T) {
	tb := start(t, brokertest.Options{})
	c := newCanary(t, tb)
	if err := tb.b.Declare(broker.GroupConfig{Name: "resizers", Patterns: []string{"jobs.thumb.*"}, MaxDeliveries: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "jobs.thumb." + strconv.Itoa(i), Payload: []byte(strconv.Itoa(i))})
		if err != nil || r.GetRouted() != 1 {
			t.Fatalf("publish before any member: routed %d, %v; want 1", r.GetRouted(), err)
		}
	}
	_, err := openOn(t, tb.c, balanced("resizers", "resizers", 1, "other.>"))
	wantCode(t, err, codes.FailedPrecondition, "same topic_patterns")
	// JetStream counts a consumer's pending messages a moment after it stored them.
	brokertest.Eventually(t, "the declared group to count 3 queued", func() bool {
		g := tb.group(t, "resizers")
		return g.GetDeclared() && g.GetQueued() == 3
	})
	m := tb.open(t, balanced("resizers", "resizers", 3, "jobs.thumb.*"))
	for i := range 3 {
		if got := string(m.next().GetPayload()); got != strconv.Itoa(i) {
			t.Fatalf("got %q, want %d", got, i)
		}
	}
	c.check()
}

func codeOf(err error) codes.Code { return status.Code(err) }

// Finding 1, header-heavy messages: what a group holds is counted with its headers as they
// cost in memory, not as their bytes alone; the canary keeps working.
func TestHeaderHeavyMessagesCounted(t *testing.T) {
	needsGroupBounds(t)
	tb := start(t, brokertest.Options{Limits: broker.Limits{GroupMaxQueuedBytes: 1 << 20}})
	c := newCanary(t, tb)
	tb.memberless(t, "hdr", "hdr.>")
	h := map[string]string{}
	for i := range 1000 {
		h["h"+strconv.Itoa(i)] = "v" // ~6 KB of header bytes, ~120 KB of memory
	}
	n := 0
	var err error
	for ; n < 200; n++ {
		if _, err = tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "hdr.x", Headers: h}); err != nil {
			break
		}
		c.check()
	}
	wantCode(t, err, codes.ResourceExhausted, "max_queued_bytes")
	if n > 12 { // counted by bytes alone, 1 MiB would hold about 170 of them
		t.Fatalf("%d header-heavy messages held under a 1 MiB bound", n)
	}
	c.check()
}

// Finding 1, many groups without members: together they stay within 3/4 of the broker's
// memory budget; the fanout canary, outside the groups' share, keeps working. Only for
// engines with a memory budget (the memory engine's): see brokertest.Engine.
func TestManyMemberlessGroupsBounded(t *testing.T) {
	if !engine.MemoryBudget {
		t.Skipf("engine %s has no memory budget; it is bounded by its store (JetStream: max_bytes, broker/jetstream TestMaxBytes)", engine.Name)
	}
	tb := start(t, brokertest.Options{MaxMemoryBytes: 8 << 20, Limits: broker.Limits{GroupMaxQueuedBytes: 8 << 20}})
	c := newCanary(t, tb)
	for i := range 100 {
		id := "m" + strconv.Itoa(i)
		tb.open(t, balanced(id, id, 1, "many.x")).close()
	}
	brokertest.Eventually(t, "members gone", func() bool {
		for _, g := range tb.stats(t).GetGroups() {
			if g.GetMembers() != 0 {
				return false
			}
		}
		return true
	})
	var err error
	for i := 0; i < 10_000 && err == nil; i++ {
		_, err = tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "many.x", Payload: make([]byte, 512)})
		if i%100 == 0 {
			c.check()
		}
	}
	wantCode(t, err, codes.ResourceExhausted, "memory budget for consumer groups")
	if st := tb.stats(t); st.GetMemoryUsedBytes() > 6<<20+256<<10 {
		t.Fatalf("the broker holds %d bytes; groups may use 6 MiB", st.GetMemoryUsedBytes())
	}
	c.check()
}

// Issue 23, finding 4: with the default settings the memory budget follows the Go memory
// limit (GOMEMLIMIT; here 512 MiB, set before the engine starts as the environment would):
// a quarter of it, so that memberless groups flooded until the budget refuses them leave the
// heap well inside the limit, and the canary keeps working. Before, the default was half of
// the limit, and a full budget's heap (about twice what it holds) reached the limit.
func TestDefaultBudgetFitsTheMemoryLimit(t *testing.T) {
	if !engine.MemoryBudget {
		t.Skipf("engine %s has no memory budget; JetStream's memory store is bounded by the same default (broker/jetstream TestMemoryStoreBound)", engine.Name)
	}
	const limit = 512 << 20
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	tb := start(t, brokertest.Options{}) // MaxMemoryBytes and the group bounds at their defaults
	if got, want := tb.stats(t).GetMemoryBudgetBytes(), uint64(limit/4); got != want {
		t.Fatalf("memory budget %d with GOMEMLIMIT %d; want %d, a quarter", got, limit, want)
	}
	c := newCanary(t, tb)
	const groups = 10 // each may hold an eighth of the budget: together more than the groups' 3/4
	for i := range groups {
		tb.memberless(t, "def"+strconv.Itoa(i), "def."+strconv.Itoa(i))
	}
	payload := make([]byte, 256<<10)
	var err error
	n := 0
	for ; n < 2000 && err == nil; n++ {
		_, err = tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "def." + strconv.Itoa(n%groups), Payload: payload})
		if n%20 == 0 {
			c.check()
		}
	}
	wantCode(t, err, codes.ResourceExhausted, "memory budget for consumer groups")
	st := tb.stats(t)
	if used, budget := st.GetMemoryUsedBytes(), st.GetMemoryBudgetBytes(); used > budget || used < budget/2 {
		t.Fatalf("the broker holds %d bytes at refusal; budget %d", used, budget)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > limit/2 { // the stated bound: a full budget's heap is half the limit
		t.Fatalf("heap %d MiB with a full default budget, GOMEMLIMIT %d MiB", ms.HeapAlloc>>20, limit>>20)
	}
	t.Logf("full default budget: %d messages of 256 KiB accepted, %d MiB held, heap %d MiB of a %d MiB limit",
		n-1, st.GetMemoryUsedBytes()>>20, ms.HeapAlloc>>20, limit>>20)
	c.check()
}
