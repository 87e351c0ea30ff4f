package ops_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/ops"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// A group whose queued messages all wait behind a key its member holds and does not settle
// is stalled: with stuck_after passed it is reported stuck, in the metrics, the group's JSON
// and the log (once), while an idle group and a paused one are not; when the member acks,
// it is no longer stuck. The oldest unacked message's age is a gauge of its own.
func TestGroupStuck(t *testing.T) {
	s := start(t, stackOptions{stuck: 300 * time.Millisecond, history: 50 * time.Millisecond})
	for _, gc := range []broker.GroupConfig{
		{Name: "orders", Patterns: []string{"orders.>"}, Dispatch: broker.Dispatch{Ordering: broker.OrderingKey}},
		{Name: "idle", Patterns: []string{"idle.>"}},
	} {
		if err := s.b.Declare(gc); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"1", "2", "3"} {
		if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "orders.new", Payload: []byte(p), Key: "customer-7"}); err != nil {
			t.Fatal(err)
		}
	}
	m := s.join(t, "orders", &pb.OpenSubscription{TopicPatterns: []string{"orders.>"}, MaxInFlight: 10})
	held := m.next(t)
	s.waitMetric(t, "tinybroker_group_stuck", eq(1), "group=orders")
	s.waitMetric(t, "tinybroker_group_stuck", eq(0), "group=idle")
	s.waitMetric(t, "tinybroker_group_oldest_unacked_age_seconds", func(v float64) bool { return v > 0 }, "group=orders")
	if g := getGroup(t, s, "orders"); !g.Stuck || g.OldestUnackedMS <= 0 {
		t.Fatalf("the stuck group's JSON: stuck %v, oldest unacked %d ms", g.Stuck, g.OldestUnackedMS)
	}
	s.logs.WaitFor(t, "consumer group stuck")
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#groups")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the stuck badge on the stuck group only", `document.querySelector('tr[data-group="orders"] .badge.stuck') !== null && document.querySelector('tr[data-group="idle"] .badge.stuck') === null`)

	// Paused, it is not stuck: nothing is to be delivered.
	if err := s.b.PauseGroup("orders", true); err != nil {
		t.Fatal(err)
	}
	s.waitMetric(t, "tinybroker_group_stuck", eq(0), "group=orders")
	if err := s.b.PauseGroup("orders", false); err != nil {
		t.Fatal(err)
	}
	s.waitMetric(t, "tinybroker_group_stuck", eq(1), "group=orders")

	m.ack(t, held)
	m.ack(t, m.next(t))
	s.waitMetric(t, "tinybroker_group_stuck", eq(0), "group=orders")
	s.logs.WaitFor(t, "consumer group no longer stuck")
	if g := getGroup(t, s, "idle"); g.Stuck {
		t.Fatal("the idle group is reported stuck")
	}
}

func getGroup(t *testing.T, s *stack, id string) ops.GroupJSON {
	t.Helper()
	resp, err := http.Get(s.url + "/api/groups/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g ops.GroupJSON
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return g
}
