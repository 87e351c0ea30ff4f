package memory

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

// Deleting a group with members ends them with ErrGroupDeleted: a member alone on its stream
// sees the stream end; one sharing a stream gets an Ended event while the stream's other
// subscriptions go on. What the group held, in flight included, is given back.
func TestDeleteGroupWithMembers(t *testing.T) {
	gt := newGroupTest(t, Options{})
	alone := gt.member("g", 1)
	st := gt.b.NewStream(nil)
	defer st.Close()
	fan, err := st.Subscribe(broker.SubscribeOptions{ID: "watch", Patterns: []string{"j.>"}, Mode: broker.Fanout})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := st.Subscribe(broker.SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"j.>"}, Mode: broker.Balanced, Peer: "10.0.0.7:5000"})
	if err != nil {
		t.Fatal(err)
	}
	gt.publish("1", "2", "3")
	if gi, _ := gt.b.Group("g"); gi.Members != 2 || gi.InFlight != 2 || gi.Queued != 1 {
		t.Fatalf("before delete: %+v", gi)
	}
	if err := gt.b.DeleteGroup("g"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-alone.Done():
	default:
		t.Fatal("the member alone on its stream is still open")
	}
	if !errors.Is(alone.Err(), broker.ErrGroupDeleted) || !strings.Contains(alone.Err().Error(), "deleted by an administrator") {
		t.Fatalf("alone: %v; want ErrGroupDeleted saying who deleted it", alone.Err())
	}
	var ended error
	for _, d := range st.Next(nil, 100, 1<<30) {
		if d.Msg == nil && d.Sub == shared && d.Ended != nil {
			ended = d.Ended
		}
	}
	if !errors.Is(ended, broker.ErrGroupDeleted) {
		t.Fatalf("shared stream: Ended event %v, want ErrGroupDeleted", ended)
	}
	select {
	case <-st.Done():
		t.Fatal("the shared stream ended with its fanout subscription still open")
	default:
	}
	if s, _ := st.Lookup("g"); s != nil {
		t.Fatal("the ended member is still on its stream")
	}
	if _, err := gt.b.Group("g"); !errors.Is(err, broker.ErrUnknownSubscription) {
		t.Fatalf("Group after delete: %v", err)
	}
	gt.publish("4")
	if ds := st.Next(nil, 100, 1<<30); len(ds) != 1 || ds[0].Sub != fan || string(ds[0].Msg.Payload) != "4" {
		t.Fatalf("fanout after delete got %v", ds)
	}
	shared.Ack([]string{"whatever"}) // late acks of the ended member are skipped
	shared.Close()
	alone.Close()
	fan.Close()
	if used := gt.b.MemoryUsed(); used != 0 {
		t.Fatalf("memory used %d after delete, want 0", used)
	}
	// Subscribing again makes a new, empty group.
	again := gt.member("g", 1)
	if gi, _ := gt.b.Group("g"); gi.Members != 1 || gi.Queued != 0 || gi.Delivered != 0 {
		t.Fatalf("new group %+v", gi)
	}
	again.Close()
}

// Group describes members with their peers, the oldest message held and the settings.
func TestGroupInfoAndStreams(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupDeadLetterMax: 7}})
	a := gt.member("g", 2, func(o *broker.SubscribeOptions) { o.Peer = "192.0.2.1:4000" }, maxDeliveries(3))
	gt.publish("1", "2", "3")
	gi, err := gt.b.Group("g")
	if err != nil {
		t.Fatal(err)
	}
	if len(gi.MemberList) != 1 || gi.MemberList[0].Peer != "192.0.2.1:4000" || gi.MemberList[0].InFlight != 2 || gi.MemberList[0].MaxInFlight != 2 ||
		gi.MemberList[0].ID != "g-1" || gi.MemberList[0].Joined == 0 {
		t.Fatalf("members %+v", gi.MemberList)
	}
	if gi.Oldest == 0 || gi.MaxDeliveries != 3 || gi.DeadLetterTopic != "dlq.g" || gi.Limits.DeadLetterMax != 7 || gi.Limits.MaxQueued != 100_000 {
		t.Fatalf("info %+v", gi)
	}
	f := gt.fanout("x.>")
	streams := gt.b.Streams()
	if len(streams) != 2 {
		t.Fatalf("streams %+v", streams)
	}
	s0, s1 := streams[0], streams[1]
	if s0.Peer != "192.0.2.1:4000" || len(s0.Subscriptions) != 1 || s0.Subscriptions[0].Group != "g" || s0.Subscriptions[0].MemberID != "g-1" ||
		s0.Subscriptions[0].Mode != broker.Balanced || s0.Buffered != 2 {
		t.Fatalf("member's stream %+v", s0)
	}
	if s1.Subscriptions[0].Mode != broker.Fanout || s1.Subscriptions[0].Patterns[0] != "x.>" {
		t.Fatalf("fanout stream %+v", s1)
	}
	a.Close()
	f.Close()
	if len(gt.b.Streams()) != 0 {
		t.Fatalf("streams after close: %+v", gt.b.Streams())
	}
}

// Dead letters are kept with their reasons, listed a page at a time, replayed to their
// original topic with a replay count (and without the dead-letter headers), and purged.
func TestDeadLetterStore(t *testing.T) {
	gt := newGroupTest(t, Options{})
	a := gt.member("g", 10, maxDeliveries(1))
	ids := gt.publish("1", "2", "3", "4")
	next(a)
	a.Nack(ids, 0, "bad input")
	st := gt.stats("g")
	if st.DeadLettered != 4 || st.DeadLetters != 4 || st.DeadLetterBytes <= 0 {
		t.Fatalf("stats %+v", st)
	}
	page, tok, err := gt.b.DeadLetters("g", "", 3)
	if err != nil || len(page) != 3 || tok == "" {
		t.Fatalf("first page: %d, %q, %v", len(page), tok, err)
	}
	rest, tok2, err := gt.b.DeadLetters("g", tok, 3)
	if err != nil || len(rest) != 1 || tok2 != "" {
		t.Fatalf("second page: %d, %q, %v", len(rest), tok2, err)
	}
	all := append(page, rest...)
	for i, dl := range all {
		if dl.ID != ids[i] || dl.Topic != "j.x" || string(dl.Payload) != fmt.Sprint(i+1) || dl.Reason != "bad input" || dl.Attempts != 1 ||
			dl.Code != deadletter.CodeMaxDeliveries || dl.Headers[deadletter.HeaderCode] != deadletter.CodeMaxDeliveries ||
			dl.Headers[deadletter.HeaderReason] != "bad input" || dl.Headers[deadletter.HeaderTopic] != "j.x" {
			t.Fatalf("dead letter %d: %+v", i, dl)
		}
	}
	if _, _, err := gt.b.DeadLetters("g", "nonsense", 3); err == nil {
		t.Fatal("a bad page token was taken")
	}

	// Replay two, one of them twice: the second time it is no longer kept.
	res, err := gt.b.ReplayDeadLetters("g", []string{ids[1], ids[3], ids[1]})
	if err != nil || len(res) != 3 || res[0].Err != nil || res[1].Err != nil || !errors.Is(res[2].Err, broker.ErrUnknownMessage) || res[0].Routed != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	ds := next(a)
	if len(ds) != 2 || string(ds[0].Msg.Payload) != "2" || string(ds[1].Msg.Payload) != "4" {
		t.Fatalf("member got %v after replay", got(a))
	}
	for _, d := range ds {
		if h := d.Msg.Headers.Map(); h[deadletter.HeaderReplayCount] != "1" || h[deadletter.HeaderReason] != "" || h[deadletter.HeaderCode] != "" || d.Msg.SystemID == ids[1] {
			t.Fatalf("replayed message %+v", d.Msg)
		}
	}
	// Dead-lettered again and replayed again: the count goes up.
	a.Nack([]string{ds[0].Msg.SystemID}, 0, "still bad")
	if res, _ := gt.b.ReplayDeadLetters("g", []string{ds[0].Msg.SystemID}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	d := next(a)
	if len(d) != 1 || d[0].Msg.Headers.Map()[deadletter.HeaderReplayCount] != "2" {
		t.Fatalf("second replay: %v", d)
	}
	a.Ack([]string{ds[1].Msg.SystemID, d[0].Msg.SystemID})

	if n, err := gt.b.PurgeDeadLetters("g", []string{ids[0]}); n != 1 || err != nil {
		t.Fatalf("purge one: %d %v", n, err)
	}
	if dls, _, _ := gt.b.DeadLetters("g", "", 0); len(dls) != 1 || dls[0].ID != ids[2] {
		t.Fatalf("left after purge: %+v", dls)
	}
	if n, _ := gt.b.PurgeDeadLetters("g", nil); n != 1 {
		t.Fatalf("purge all: %d", n)
	}
	if _, err := gt.b.PurgeDeadLetters("nope", nil); !errors.Is(err, broker.ErrUnknownSubscription) {
		t.Fatalf("purge of an unknown group: %v", err)
	}
	a.Close()
	gt.settled("g")
	if gt.stats("g").DeadLetterBytes != 0 {
		t.Fatal("dead-letter bytes left")
	}
}

// The store keeps the newest dead letters within its bounds, counting what it drops; a
// replay refused by a full group puts the letter back.
func TestDeadLetterStoreBounds(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupDeadLetterMax: 3}})
	a := gt.member("g", 10, maxDeliveries(1))
	ids := gt.publish("1", "2", "3", "4", "5")
	next(a)
	a.Nack(ids, 0, "")
	dls, _, _ := gt.b.DeadLetters("g", "", 10)
	if len(dls) != 3 || dls[0].ID != ids[2] || dls[2].ID != ids[4] {
		t.Fatalf("kept %+v, want the newest 3", dls)
	}
	if st := gt.stats("g"); st.DeadLettersDropped != 2 || st.DeadLetters != 3 {
		t.Fatalf("stats %+v", st)
	}
	a.Close()

	// A byte bound: a letter of 2 KiB does not fit in 1 KiB at all.
	gt2 := newGroupTest(t, Options{Limits: broker.Limits{GroupDeadLetterMaxBytes: 1024}})
	b := gt2.member("g", 1, maxDeliveries(1))
	r, _ := gt2.b.Publish("j.x", make([]byte, 2048), nil)
	next(b)
	b.Nack([]string{r.SystemID}, 0, "")
	if st := gt2.stats("g"); st.DeadLetters != 0 || st.DeadLettersDropped != 1 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
	b.Close()

	// A replay that the group refuses (full, overflow reject) stays kept.
	gt3 := newGroupTest(t, Options{Limits: broker.Limits{GroupMaxQueued: 1}})
	c := gt3.member("g", 1, maxDeliveries(1))
	id := gt3.publish("x")[0]
	next(c)
	c.Nack([]string{id}, 0, "")
	c.Close()
	gt3.publish("filler") // the group, with no member, now holds its one message
	res, _ := gt3.b.ReplayDeadLetters("g", nil)
	if len(res) != 1 || !errors.Is(res[0].Err, broker.ErrGroupFull) {
		t.Fatalf("replay into a full group: %+v", res)
	}
	if dls, _, _ := gt3.b.DeadLetters("g", "", 10); len(dls) != 1 || dls[0].ID != id {
		t.Fatalf("after a refused replay the store holds %+v", dls)
	}
}

// The memory engine keeps one copy of a message: a declaration asking for more is refused,
// saying why; replicas 1 is what it does anyway, and Group says so.
func TestDeclareReplicas(t *testing.T) {
	b := New(Options{})
	defer b.Shutdown(t.Context())
	err := b.Declare(broker.GroupConfig{Name: "r3", Patterns: []string{"a.>"}, Replicas: 3})
	if !errors.Is(err, broker.ErrInvalidSubscription) || !strings.Contains(err.Error(), "one copy") {
		t.Fatalf("replicas 3: %v, want a refusal saying the engine keeps one copy", err)
	}
	if err := b.Declare(broker.GroupConfig{Name: "r1", Patterns: []string{"a.>"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if gi, err := b.Group("r1"); err != nil || gi.Replicas != 1 {
		t.Fatalf("%+v %v", gi, err)
	}
}
