package jetstream_test

import (
	"math"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
	"github.com/tinybroker/tinybroker/broker/jetstream"
)

// publishTTL publishes payload to topic with ttl and key, and returns a time at or after the
// one the engine stamped it with (from which its ttl counts).
func publishTTL(t *testing.T, e *jetstream.Engine, topic, payload, key string, ttl time.Duration) time.Time {
	t.Helper()
	d := []broker.Draft{{Topic: topic, Payload: []byte(payload), TTL: ttl, Key: key}}
	res, errs := make([]broker.PublishResult, 1), make([]error, 1)
	e.PublishBatch(d, res, errs)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	return time.Now()
}

// waitPast waits until the wall clock is past at: the JetStream engine expires messages by
// the time stored with them, and has no clock a test could move.
func waitPast(at time.Time) { time.Sleep(time.Until(at) + 10*time.Millisecond) }

// fanoutOn subscribes a fanout stream to topic (a dead-letter topic).
func fanoutOn(t *testing.T, e *jetstream.Engine, topic string) broker.Stream {
	t.Helper()
	st := e.NewStream(nil)
	t.Cleanup(st.Close)
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Fanout, Patterns: []string{topic}}); err != nil {
		t.Fatal(err)
	}
	return st
}

// join subscribes a member of group to patterns on a stream of its own.
func join(t *testing.T, e *jetstream.Engine, o broker.SubscribeOptions) (broker.Stream, broker.Subscription) {
	t.Helper()
	st := e.NewStream(nil)
	t.Cleanup(st.Close)
	o.Mode = broker.Balanced
	sub, err := st.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	return st, sub
}

// wantDead checks the next dead letter on dlq: payload, with reason and code "expired".
func wantDead(t *testing.T, dlq broker.Stream, payload string) {
	t.Helper()
	d := receive(t, dlq)
	h := d.Msg.Headers.Map()
	if r, c := h[deadletter.HeaderReason], h[deadletter.HeaderCode]; string(d.Msg.Payload) != payload || r != deadletter.ReasonExpired || c != deadletter.CodeExpired {
		t.Fatalf("dead letter %q with reason %q and code %q, want %q with reason %q and code %q", d.Msg.Payload, r, c, payload, deadletter.ReasonExpired, deadletter.CodeExpired)
	}
}

// wantNone checks that st holds no delivery now.
func wantNone(t *testing.T, st broker.Stream) {
	t.Helper()
	for _, d := range st.Next(nil, 10, math.MaxInt) {
		if d.Msg != nil {
			t.Fatalf("delivered %q (attempt %d), want nothing", d.Msg.Payload, d.Attempt)
		}
	}
}

func groupStats(t *testing.T, e *jetstream.Engine, id string) broker.GroupStats {
	t.Helper()
	g, err := e.Group(id)
	if err != nil {
		t.Fatal(err)
	}
	return g.GroupStats
}

// On the JetStream engine a message past its ttl is never delivered: one that expired while
// the group had no member is dead-lettered with reason "expired" when a member pulls it, and
// the member gets the next; one a member holds may still be acked, but a nack dead-letters it
// instead of redelivering it, and one nacked with a delay past its ttl goes at its ttl. A
// group with on_expire "drop" drops it and counts it; a group's max_age expires messages
// without a ttl alike.
func TestTTLOnJetStream(t *testing.T) {
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	defer stop(t, e)
	for _, gc := range []broker.GroupConfig{
		{Name: "g", Patterns: []string{"g.*"}},
		{Name: "d", Patterns: []string{"d.*"}, Limits: broker.GroupLimits{OnExpire: "drop"}},
		{Name: "m", Patterns: []string{"m.*"}, Limits: broker.GroupLimits{MaxAge: time.Second}},
	} {
		if err := e.Declare(gc); err != nil {
			t.Fatal(err)
		}
	}
	dlq := fanoutOn(t, e, "dlq.*")

	// Expired while the group has no member.
	publishTTL(t, e, "g.x", "late", "", 200*time.Millisecond)
	publishTTL(t, e, "g.x", "forever", "", 0)
	at := publishTTL(t, e, "d.x", "dropped", "", 200*time.Millisecond)
	publishTTL(t, e, "d.x", "kept", "", time.Hour)
	publishTTL(t, e, "m.x", "old", "", 0)
	old := publishTTL(t, e, "m.x", "older", "", time.Hour) // max_age is shorter: it wins
	waitPast(at.Add(200 * time.Millisecond))
	waitPast(old.Add(time.Second))
	publishTTL(t, e, "m.x", "young", "", 0)

	st, sub := join(t, e, broker.SubscribeOptions{Group: "g", Patterns: []string{"g.*"}, MaxInFlight: 10})
	if d := receive(t, st); string(d.Msg.Payload) != "forever" || d.Attempt != 1 {
		t.Fatalf("member of g got %q attempt %d, want forever attempt 1 (late expired)", d.Msg.Payload, d.Attempt)
	} else {
		sub.Ack([]string{d.Msg.SystemID})
	}
	wantDead(t, dlq, "late")
	if s := groupStats(t, e, "g"); s.Expired != 1 || s.DeadLettered != 1 || s.Delivered != 1 {
		t.Fatalf("g: expired %d dead-lettered %d delivered %d, want 1, 1, 1", s.Expired, s.DeadLettered, s.Delivered)
	}
	if dls, _, err := e.DeadLetters("g", "", 10); err != nil || len(dls) != 1 || dls[0].Reason != deadletter.ReasonExpired || dls[0].Code != deadletter.CodeExpired || dls[0].Attempts != 0 {
		t.Fatalf("g's dead-letter store: %+v %v, want late, expired, never delivered", dls, err)
	}

	dst, _ := join(t, e, broker.SubscribeOptions{Group: "d", Patterns: []string{"d.*"}, MaxInFlight: 10})
	if d := receive(t, dst); string(d.Msg.Payload) != "kept" {
		t.Fatalf("member of d got %q, want kept (dropped expired)", d.Msg.Payload)
	}
	if s := groupStats(t, e, "d"); s.Expired != 1 || s.Dropped != 1 || s.DeadLettered != 0 {
		t.Fatalf("d: expired %d dropped %d dead-lettered %d, want 1, 1, 0", s.Expired, s.Dropped, s.DeadLettered)
	}

	mst, _ := join(t, e, broker.SubscribeOptions{Group: "m", Patterns: []string{"m.*"}, MaxInFlight: 10})
	if d := receive(t, mst); string(d.Msg.Payload) != "young" {
		t.Fatalf("member of m got %q, want young (old and older past max_age)", d.Msg.Payload)
	}
	wantDead(t, dlq, "old")
	wantDead(t, dlq, "older")

	// Held by a member past its ttl: acked, it is acked; nacked, it is dead-lettered, not
	// redelivered. (A ttl of a second, so that a slow delivery under load still comes first.)
	at = publishTTL(t, e, "g.x", "acked", "", time.Second)
	d := receive(t, st)
	waitPast(at.Add(time.Second))
	if sub.Ack([]string{d.Msg.SystemID}) != 0 {
		t.Fatalf("ack of %q past its ttl refused", d.Msg.Payload)
	}
	at = publishTTL(t, e, "g.x", "nacked", "", time.Second)
	d = receive(t, st)
	waitPast(at.Add(time.Second))
	sub.Nack([]string{d.Msg.SystemID}, 0, "")
	wantDead(t, dlq, "nacked")
	// Delayed past its ttl: it goes at its time, not when the delay ends.
	publishTTL(t, e, "g.x", "delayed", "", time.Second)
	d = receive(t, st)
	sub.Nack([]string{d.Msg.SystemID}, time.Hour, "")
	wantDead(t, dlq, "delayed")
	publishTTL(t, e, "g.x", "next", "", 0)
	if d := receive(t, st); string(d.Msg.Payload) != "next" {
		t.Fatalf("after the nack the member got %q (attempt %d), want next", d.Msg.Payload, d.Attempt)
	}
	wantNone(t, dlq)
	if s := groupStats(t, e, "g"); s.Expired != 3 || s.Acked != 2 {
		t.Fatalf("g: expired %d acked %d, want 3 and 2", s.Expired, s.Acked)
	}
}

// An ordered group expires messages too: one that expired before its member joined is
// dead-lettered as it arrives, and a message of a key that waited behind the key's earlier
// one past its ttl is dead-lettered when its turn comes; the key's next goes.
func TestTTLOrderedOnJetStream(t *testing.T) {
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	defer stop(t, e)
	ordered := broker.Dispatch{Ordering: broker.OrderingKey}
	if err := e.Declare(broker.GroupConfig{Name: "o", Patterns: []string{"o.*"}, Dispatch: ordered}); err != nil {
		t.Fatal(err)
	}
	dlq := fanoutOn(t, e, "dlq.*")
	waitPast(publishTTL(t, e, "o.x", "gone", "other", 200*time.Millisecond).Add(200 * time.Millisecond))
	st, sub := join(t, e, broker.SubscribeOptions{Group: "o", Patterns: []string{"o.*"}, MaxInFlight: 10, Dispatch: ordered})
	publishTTL(t, e, "o.x", "first", "k", 0)
	d := receive(t, st)
	if string(d.Msg.Payload) != "first" {
		t.Fatalf("the member got %q, want first (gone expired)", d.Msg.Payload)
	}
	wantDead(t, dlq, "gone")
	at := publishTTL(t, e, "o.x", "second", "k", 200*time.Millisecond)
	publishTTL(t, e, "o.x", "third", "k", 0)
	waitPast(at.Add(200 * time.Millisecond))
	sub.Ack([]string{d.Msg.SystemID})
	wantDead(t, dlq, "second")
	if d := receive(t, st); string(d.Msg.Payload) != "third" {
		t.Fatalf("after first the member got %q, want third (second expired)", d.Msg.Payload)
	}
	if s := groupStats(t, e, "o"); s.Expired != 2 {
		t.Fatalf("o: expired %d, want 2", s.Expired)
	}
}

// A message's ttl is stored with it: published with a ttl, the engine restarted on its file
// store, and a member joining after the ttl passed, the message is dead-lettered with
// reason "expired", not delivered; one without a ttl is delivered.
func TestTTLAcrossRestart(t *testing.T) {
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}}
	e := start(t, o)
	if err := e.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	at := publishTTL(t, e, "jobs.x", "late", "", 300*time.Millisecond)
	publishTTL(t, e, "jobs.x", "forever", "", 0)
	stop(t, e)

	e = start(t, o)
	defer stop(t, e)
	dlq := fanoutOn(t, e, "dlq.jobs")
	waitPast(at.Add(300 * time.Millisecond))
	st, _ := join(t, e, broker.SubscribeOptions{Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 10})
	if d := receive(t, st); string(d.Msg.Payload) != "forever" {
		t.Fatalf("after the restart the member got %q, want forever (late expired)", d.Msg.Payload)
	}
	wantDead(t, dlq, "late")
	wantNone(t, st)
}
