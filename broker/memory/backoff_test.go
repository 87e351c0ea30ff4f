package memory

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// The back-off policy per group (issue 28), on the fake clock, exact to the nanosecond: a
// declared group's explicit list (attempt n waits entry n, the last repeats) on a nack
// without a delay, on a passed ack deadline and under a plugin's on_redeliver; a longer
// nack delay honoured; the jitter's draw per message and attempt.

func declareBackoff(t *testing.T, gt *groupTest, l broker.GroupLimits) {
	t.Helper()
	if err := gt.b.Declare(broker.GroupConfig{Name: "g", Patterns: []string{"j.>"}, Limits: l}); err != nil {
		t.Fatal(err)
	}
}

// waitExactly advances the clock by d less a nanosecond, checks s got nothing, then by the
// nanosecond, and checks s got wantGot.
func waitExactly(t *testing.T, gt *groupTest, s *Subscription, d time.Duration, wantGot ...string) {
	t.Helper()
	gt.clock.Advance(d - time.Nanosecond)
	want(t, "a nanosecond before "+d.String(), got(s))
	gt.clock.Advance(time.Nanosecond)
	want(t, "at "+d.String(), got(s), wantGot...)
}

func TestBackoffListOnNack(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupRedeliveryDelayMin: 100 * time.Millisecond, GroupRedeliveryDelayMax: time.Second}})
	s := time.Second
	err := gt.b.Declare(broker.GroupConfig{Name: "bad", Patterns: []string{"b.>"}, Limits: broker.GroupLimits{RedeliveryJitter: 1.5}})
	if !errors.Is(err, broker.ErrInvalidSubscription) || !strings.Contains(err.Error(), "redelivery_jitter 1.5 is out of range") {
		t.Fatalf("jitter 1.5 declared: %v", err)
	}
	declareBackoff(t, gt, broker.GroupLimits{RedeliveryBackoff: []time.Duration{s, 5 * s, 30 * s}})
	a, ids := gt.oneMember("1")
	for attempt, wait := range []time.Duration{s, 5 * s, 30 * s, 30 * s} {
		a.Nack(ids, 0, "")
		waitExactly(t, gt, a, wait, "1/"+strconv.Itoa(attempt+2))
	}
	a.Nack(ids, 2*s, "") // shorter than the policy's 30s: the policy
	waitExactly(t, gt, a, 30*s, "1/6")
	a.Nack(ids, time.Minute, "") // longer: the member's
	waitExactly(t, gt, a, time.Minute, "1/7")
}

func TestBackoffListOnDeadlineAndHook(t *testing.T) {
	gt := newGroupTest(t, Options{})
	s := time.Second
	declareBackoff(t, gt, broker.GroupLimits{RedeliveryBackoff: []time.Duration{2 * s, 7 * s}})
	a := gt.member("g", 1, func(o *broker.SubscribeOptions) { o.AckDeadline = time.Millisecond })
	gt.publish("1")
	want(t, "a", got(a), "1/1")
	gt.clock.Advance(time.Millisecond) // past the deadline: taken back, then the policy
	waitExactly(t, gt, a, 2*s, "1/2")

	// A plugin that asks for no delay gets the policy; one that asks for more, its own.
	var delay time.Duration
	gt.b.SetHooks(&testHooks{redeliver: func(*broker.RedeliverEvent) broker.RedeliverVerdict {
		return broker.RedeliverVerdict{Action: broker.RedeliverDelay, Delay: delay}
	}})
	gt.clock.Advance(time.Millisecond)
	waitExactly(t, gt, a, 7*s, "1/3")
	delay = time.Minute
	gt.clock.Advance(time.Millisecond)
	waitExactly(t, gt, a, time.Minute, "1/4")
	// A plugin's default verdict is the policy's.
	gt.b.SetHooks(&testHooks{redeliver: func(*broker.RedeliverEvent) broker.RedeliverVerdict { return broker.RedeliverVerdict{} }})
	gt.clock.Advance(time.Millisecond)
	waitExactly(t, gt, a, 7*s, "1/5")
}

// TestBackoffJitter: 50 messages nacked together come back spread over (0.5s, 1s], each at
// exactly its draw (GroupLimits.RedeliveryDelay of its sequence and attempt), not together.
func TestBackoffJitter(t *testing.T) {
	gt := newGroupTest(t, Options{Limits: broker.Limits{GroupRedeliveryDelayMin: time.Second, GroupRedeliveryDelayMax: time.Second, GroupRedeliveryJitter: 0.5}})
	a := gt.member("g", 50)
	payloads := make([]string, 50)
	for i := range payloads {
		payloads[i] = strconv.Itoa(i)
	}
	ids := gt.publish(payloads...)
	if n := len(got(a)); n != 50 {
		t.Fatalf("got %d of 50", n)
	}
	a.Nack(ids, 0, "")
	l := gt.group("g").limits
	type due struct {
		at      time.Duration
		payload string
	}
	var dues []due
	for i, id := range ids {
		seq, err := gt.b.ids.parse(id)
		if err != nil {
			t.Fatal(err)
		}
		at := l.RedeliveryDelay(0, 1, seq)
		if at <= 500*time.Millisecond || at > time.Second {
			t.Fatalf("message %d: %v outside (0.5s, 1s]", i, at)
		}
		dues = append(dues, due{at, payloads[i]})
	}
	slices.SortFunc(dues, func(x, y due) int { return int(x.at - y.at) })
	if dues[0].at == dues[len(dues)-1].at || dues[len(dues)-1].at-dues[0].at < 250*time.Millisecond {
		t.Fatalf("not spread: %v to %v", dues[0].at, dues[len(dues)-1].at)
	}
	var now time.Duration
	for i, d := range dues {
		if i > 0 && d.at == dues[i-1].at {
			t.Fatalf("two messages drew the same %v", d.at)
		}
		waitExactly(t, gt, a, d.at-now, d.payload+"/2")
		now = d.at
	}
}
