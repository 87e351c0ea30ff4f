package memory

import (
	"strconv"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// The redelivery back-off (issue 23, finding 6), on the fake clock: a message taken back
// for another attempt waits redelivery_delay_min × 2^(attempt-1), at most
// redelivery_delay_max, whatever the nack, the ack deadline or a plugin asked for; a longer
// nack delay is honoured; a message whose member left goes to the others at once.

func backoffTest(t *testing.T) *groupTest {
	return newGroupTest(t, Options{Limits: broker.Limits{
		GroupRedeliveryDelayMin: 100 * time.Millisecond, GroupRedeliveryDelayMax: time.Second}})
}

func TestRedeliveryBackoffOnNack(t *testing.T) {
	gt := backoffTest(t)
	a, ids := gt.oneMember("1")
	for attempt, wait := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		wait *= time.Millisecond
		a.Nack(ids, 0, "") // a zero-delay nack: at once, before the back-off
		gt.clock.Advance(wait - time.Nanosecond)
		want(t, "before the back-off", got(a))
		gt.clock.Advance(time.Nanosecond)
		want(t, "after "+wait.String(), got(a), "1/"+strconv.Itoa(attempt+2))
	}
	// A longer delay than the back-off is the member's to ask for.
	a.Nack(ids, 3*time.Second, "")
	gt.clock.Advance(3*time.Second - time.Nanosecond)
	want(t, "before the nack's delay", got(a))
	gt.clock.Advance(time.Nanosecond)
	want(t, "after the nack's delay", got(a), "1/8")
}

func TestRedeliveryBackoffOnDeadlineAndHook(t *testing.T) {
	gt := backoffTest(t)
	a := gt.member("g", 1, func(o *broker.SubscribeOptions) { o.AckDeadline = time.Millisecond })
	gt.publish("1")
	want(t, "a", got(a), "1/1")
	gt.clock.Advance(time.Millisecond) // past the deadline: taken back, then the back-off
	gt.clock.Advance(100*time.Millisecond - time.Nanosecond)
	want(t, "before the back-off", got(a))
	gt.clock.Advance(time.Nanosecond)
	want(t, "after it", got(a), "1/2")

	// A plugin's delay of zero gets the back-off too.
	gt.b.SetHooks(&testHooks{redeliver: func(*broker.RedeliverEvent) broker.RedeliverVerdict {
		return broker.RedeliverVerdict{Action: broker.RedeliverDelay}
	}})
	gt.clock.Advance(time.Millisecond)
	gt.clock.Advance(200*time.Millisecond - time.Nanosecond)
	want(t, "before the back-off, hooked", got(a))
	gt.clock.Advance(time.Nanosecond)
	want(t, "after it, hooked", got(a), "1/3")
}

func TestRedeliveryMemberLeftAtOnce(t *testing.T) {
	gt := backoffTest(t)
	a := gt.member("g", 1)
	b := gt.member("g", 1)
	ids := gt.publish("1", "2")
	want(t, "a", got(a), "1/1")
	want(t, "b", got(b), "2/1")
	a.Close()
	b.Ack(ids[1:])
	want(t, "b after a left, with the clock standing", got(b), "1/2")
}

// TestRedeliveryCannotStarveOthers counts, on a standing clock: a group whose member nacks
// every delivery at once gets each of its messages once (the back-off holds the second
// attempt), while another group's first deliveries all flow. Without the floor the looping
// group's deliveries grow with every nack, without bound.
func TestRedeliveryCannotStarveOthers(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupRedeliveryDelayMin: 100 * time.Millisecond}})
	loop := gt.member("loop", 100)
	other, err := gt.b.Subscribe(broker.SubscribeOptions{ID: "other", Group: "other", Patterns: []string{"o.>"}, Mode: broker.Balanced, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	gt.publish("p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10")
	looped, firsts := 0, 0
	for i := range 1000 {
		if _, err := gt.b.Publish("o.x", []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
		for _, d := range next(other) {
			if d.Attempt != 1 {
				t.Fatalf("other group: attempt %d", d.Attempt)
			}
			firsts++
			other.Ack([]string{d.Msg.SystemID})
		}
		for _, d := range next(loop) { // the consumer with a bug: nack at once, every time
			looped++
			loop.Nack([]string{d.Msg.SystemID}, 0, "bug")
		}
	}
	if firsts != 1000 || looped != 10 {
		t.Fatalf("other group got %d first deliveries of 1000; the looping group %d deliveries of its 10 messages, want 10 (one each until the back-off ends)", firsts, looped)
	}
}
