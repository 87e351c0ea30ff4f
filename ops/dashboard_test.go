package ops_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

var screenshots = flag.String("screenshots", "", "save screenshots of the dashboard's tabs into this `directory` (make screenshots: docs/dashboard), after some traffic")

// chromium finds the headless browser: Debian's chromium on PATH. Without it the test is
// skipped, except in CI (CI set), where it must run.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not on PATH, and CI is set: the dashboard test must run in CI (.ci/run installs Debian's chromium)")
	}
	t.Skip("chromium is not on PATH: install it (Debian: apt-get install chromium) to test the dashboard in a headless browser")
	return ""
}

// browser starts a headless chromium tab; it fails the test on any console error, uncaught
// exception or error logged by the browser (a failed request included).
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // root in CI containers
		chromedp.WindowSize(1440, 900),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				problems = append(problems, fmt.Sprintf("browser log: %s (%s)", ev.Entry.Text, ev.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("dashboard: %s", p)
		}
	})
	return ctx
}

// waitJS polls a JavaScript expression in the page until it is true (10s).
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(pctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		var text string
		_, _ = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`0`))
		text, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").innerText.slice(0, 2000)`))
		t.Fatalf("%s: %v (waiting for %s)\npage:\n%s", what, err, expr, text)
	}
}

// cell is the JavaScript for the text of a cell of a group's row.
func cell(group, class string) string {
	return fmt.Sprintf(`(document.querySelector('tr[data-group=%q] td.%s') || {}).textContent`, group, class)
}

// The dashboard in a real browser: it loads with no console error, shows a group the test
// created with its backlog, follows publishes live, and its replay button brings a dead
// letter back to its group.
func TestDashboard(t *testing.T) {
	interval := 100 * time.Millisecond
	if *screenshots != "" {
		interval = time.Second // as served, for the graphs
	}
	s := start(t, stackOptions{interval: interval, plugins: []plugins.Spec{
		{Name: "tenant-filter", Wasm: wasm(t, "pass"), Topics: []string{"orders.>"}},
		{Name: "shipping-router", Wasm: wasm(t, "trap"), Topics: []string{"orders.shipped"}, BreakerCooldown: 10 * time.Second},
	}})
	ctx := browser(t)
	if err := s.b.Declare(broker.GroupConfig{Name: "resizers", Patterns: []string{"jobs.thumb.*"}, MaxDeliveries: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s.publish(t, "jobs.thumb."+strconv.Itoa(i), "cat.jpg")
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#groups")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the group's backlog", cell("resizers", "queued")+` === "3"`)
	waitJS(t, ctx, "live status", `document.getElementById("status").dataset.state === "live"`)
	for i := range 2 {
		s.publish(t, "jobs.thumb.more"+strconv.Itoa(i), "dog.jpg")
	}
	waitJS(t, ctx, "the backlog after publishing", cell("resizers", "queued")+` === "5"`)

	// A member takes one message and nacks it: with max_deliveries 1 it is dead-lettered.
	m := s.join(t, "resizers", &pb.OpenSubscription{TopicPatterns: []string{"jobs.thumb.*"}, ConsumerGroup: "resizers"})
	waitJS(t, ctx, "the member", cell("resizers", "members")+` === "1"`)
	m.nack(t, m.next(t))
	waitJS(t, ctx, "the dead letter counted", cell("resizers", "dead-lettered")+` === "1"`)
	m.ack(t, m.next(t))
	waitJS(t, ctx, "the ack", cell("resizers", "acked")+` === "1"`)
	waitJS(t, ctx, "the backlog after the member", cell("resizers", "queued")+` === "2"`)

	// Its dead letters, from the group's row; replay brings it back to the group.
	if err := chromedp.Do(ctx, chromedp.Click(`tr[data-group="resizers"] td.actions button`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the dead-letter tab", `location.hash === "#dead-letters" && document.getElementById("dl-group").value === "resizers"`)
	waitJS(t, ctx, "the dead letter listed", `document.querySelectorAll("#dl-table tr[data-id]").length === 1 && document.querySelector("#dl-table td.reason").textContent === "nack"`)
	before, err := s.b.Group("resizers")
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`#dl-table button.replay`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the dead letter gone from the list", `document.querySelectorAll("#dl-table tr[data-id]").length === 0`)
	waitJS(t, ctx, "the toast", `document.getElementById("toast").textContent.startsWith("Replayed 1 dead letter")`)
	g, err := s.b.Group("resizers")
	if err != nil {
		t.Fatal(err)
	}
	if g.Queued+g.InFlight != before.Queued+before.InFlight+1 {
		t.Errorf("after replay the group holds %d queued + %d in flight; before %d + %d: the dead letter did not come back",
			g.Queued, g.InFlight, before.Queued, before.InFlight)
	}
	// Pause from the group's row: the broker's group is paused and the row says so; Resume
	// undoes it.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#groups")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the pause button", `document.querySelector('tr[data-group="resizers"] button.pause') !== null`)
	if err := chromedp.Do(ctx, chromedp.Click(`tr[data-group="resizers"] button.pause`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the paused badge and the resume button", `document.querySelector('tr[data-group="resizers"] .badge.paused') !== null && document.querySelector('tr[data-group="resizers"] button.resume') !== null`)
	if g, err := s.b.Group("resizers"); err != nil || !g.Paused {
		t.Fatalf("after the dashboard's pause the group is paused %v (%v)", g.Paused, err)
	}
	waitJS(t, ctx, "the pause's toast", `document.getElementById("toast").textContent.startsWith("Paused resizers")`)
	// The toast may cover the row's buttons (fixed, bottom right): click through it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector('tr[data-group="resizers"] button.resume').click()`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the badge gone", `document.querySelector('tr[data-group="resizers"] .badge.paused') === null && document.querySelector('tr[data-group="resizers"] button.pause') !== null`)
	if g, err := s.b.Group("resizers"); err != nil || g.Paused {
		t.Fatalf("after the dashboard's resume the group is paused %v (%v)", g.Paused, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#overview")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the overview's backlog", `document.getElementById("backlog-total").textContent !== "–"`)
	for _, tab := range []string{"plugins", "streams", "overview"} {
		if err := chromedp.Do(ctx, chromedp.Click(`#tabs a[data-tab="`+tab+`"]`)); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, "the "+tab+" tab", `!document.getElementById("tab-`+tab+`").hidden`)
	}
	if *screenshots != "" {
		takeScreenshots(t, ctx, s)
	}
}

// takeScreenshots runs some traffic through the broker for half a minute so that the graphs
// have something to show, then saves a screenshot of each tab.
func takeScreenshots(t *testing.T, ctx context.Context, s *stack) {
	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = s.b.Declare(broker.GroupConfig{Name: "audit", Patterns: []string{"orders.>"}})
	_ = s.b.Declare(broker.GroupConfig{Name: "billing", Patterns: []string{"orders.created"}, MaxDeliveries: 3})
	work := s.join(t, "billing", &pb.OpenSubscription{TopicPatterns: []string{"orders.created"}, MaxInFlight: 8})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tailCtx, endTail := context.WithCancel(context.Background())
	defer endTail()
	tail, r, err := s.openStream(t, tailCtx, &pb.OpenSubscription{SubscriptionId: "shipped-tail", TopicPatterns: []string{"orders.shipped"},
		Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT})
	if err != nil || r.GetSubscribed() == nil {
		t.Fatalf("open shipped-tail: %v %v", r, err)
	}
	wg.Go(func() { // a fanout subscriber reading what it gets, for the Streams and Connections tabs
		for {
			if _, err := tail.Recv(); err != nil {
				return
			}
		}
	})
	wg.Go(func() { // publishes in waves, at 200 to 1,000 messages a second
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			n := 1 + (i/2000)%5
			for range n {
				topic := "orders.created"
				if i%7 == 0 {
					topic = "orders.shipped"
				}
				_, _ = s.c.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Payload: []byte(`{"id":` + strconv.Itoa(i) + `,"total":42.5}`)})
			}
		}
	})
	wg.Go(func() { // billing acks most, and nacks one order in 400 every time: dead letters
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case msg := <-work.msgs:
				if id, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(string(msg.GetPayload()), ",")[0], `{"id":`)); id%400 == 0 {
					_ = work.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{msg.GetSystemId()}, Reason: "card declined"}}})
				} else {
					_ = work.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: []string{msg.GetSystemId()}}}})
				}
				if i%3 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}
	})
	time.Sleep(40 * time.Second)
	for _, tab := range []string{"overview", "groups", "dead-letters", "plugins", "streams", "connections"} {
		if tab == "dead-letters" {
			_ = chromedp.Do(ctx, chromedp.Navigate(s.url+"/#groups"))
			_ = chromedp.Do(ctx, chromedp.Click(`tr[data-group="billing"] td.actions button`))
		} else {
			_ = chromedp.Do(ctx, chromedp.Navigate(s.url+"/#"+tab))
		}
		time.Sleep(1500 * time.Millisecond)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*screenshots, tab+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	endTail()
	wg.Wait()
}

// A page opens with its charts drawn from the broker's own history (api/history), not empty
// until its own snapshots come: here the event stream sends one snapshot an hour, so a rates
// line of many points can only come from the history.
func TestDashboardOpensWithHistory(t *testing.T) {
	s := start(t, stackOptions{interval: time.Hour, history: 20 * time.Millisecond, histLen: 100})
	ctx := browser(t)
	for i := range 5 {
		s.publish(t, "jobs."+strconv.Itoa(i), "x")
	}
	for deadline := time.Now().Add(10 * time.Second); len(s.history(t).Points) < 10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the broker's history never held 10 points")
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#overview")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the rates chart drawn from the broker's history",
		`[...document.querySelectorAll("#chart-rates path.line")].some(p => (p.getAttribute("d").match(/L/g) || []).length >= 5)`)
}

// positive is the JavaScript for "the text of the cell is a number above 0".
func positive(group, class string) string {
	return fmt.Sprintf(`parseFloat(%s) > 0`, cell(group, class))
}

// The Groups tab shows each group's published, delivered, acked and redelivered rates as soon
// as a page opens, from the broker's history: the event stream here sends one snapshot an
// hour, and a rate needs two readings, so the first must come from the history.
func TestDashboardGroupRates(t *testing.T) {
	s := start(t, stackOptions{interval: time.Hour, history: 20 * time.Millisecond, histLen: 1000})
	ctx := browser(t)
	m := s.join(t, "work", &pb.OpenSubscription{TopicPatterns: []string{"work.>"}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() { // publishes until the test ends
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			_, _ = s.c.Publish(context.Background(), &pb.PublishRequest{Topic: "work.x", Payload: []byte("job")})
		}
	})
	wg.Go(func() { // nacks every third delivery (redelivered), acks the others
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case msg := <-m.msgs:
				ids := []string{msg.GetSystemId()}
				if i%3 == 0 {
					_ = m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: ids}}})
				} else {
					_ = m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids}}})
				}
			}
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := 0
		for _, p := range s.history(t).Points {
			for _, g := range p.Groups {
				if g.ID == "work" && g.Redelivered > 0 {
					n++
				}
			}
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker's history never held 3 points of work after a redelivery")
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#groups")); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"rate-published", "rate-delivered", "rate-acked", "rate-redelivered"} {
		waitJS(t, ctx, "the group's "+class, positive("work", class))
	}
}

// The Connections tab lists the open subscribe streams with their peer and subscriptions, a
// page at a time: 11 live subscriptions, 10 a page, make two pages that together list them
// all.
func TestDashboardConnections(t *testing.T) {
	s := start(t, stackOptions{})
	ctx := browser(t)
	want := map[string]bool{}
	for i := range 11 {
		id := fmt.Sprintf("conn-%02d", i)
		s.join(t, id, &pb.OpenSubscription{TopicPatterns: []string{"conn." + id}})
		want[id] = true
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#connections")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the first page of 50", `document.getElementById("conn-range").textContent === "1–11 of 11"`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById("conn-size"); s.value = "10"; s.dispatchEvent(new Event("change")); return true })()`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the first page of 10", `document.getElementById("conn-range").textContent === "1–10 of 11" && document.querySelectorAll("#conn-table tr[data-stream]").length === 10`)
	waitJS(t, ctx, "the peers", `[...document.querySelectorAll("#conn-table td.peer")].every(td => td.textContent.startsWith("127.0.0.1:"))`)
	subs := func() []string {
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#conn-table div.sub")].map(d => d.dataset.sub)`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	seen := subs()
	if err := chromedp.Do(ctx, chromedp.Click(`#conn-next`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the second page", `document.getElementById("conn-range").textContent === "11–11 of 11" && document.querySelectorAll("#conn-table tr[data-stream]").length === 1 && document.getElementById("conn-next").disabled`)
	seen = append(seen, subs()...)
	for _, id := range seen {
		delete(want, id)
	}
	if len(seen) != 11 || len(want) > 0 {
		t.Errorf("the two pages list %v; missing %v", seen, want)
	}
}

// The header shows the broker's version and uptime; the Groups tab's dead-letter column says
// it counts them all ever, and the dead-letter tab says how many are kept now beside that
// total: after a replay, 0 kept now of 1 dead-lettered.
func TestDashboardServerAndDeadLetterLabels(t *testing.T) {
	s := start(t, stackOptions{})
	ctx := browser(t)
	if err := s.b.Declare(broker.GroupConfig{Name: "fragile", Patterns: []string{"fragile.>"}, MaxDeliveries: 1}); err != nil {
		t.Fatal(err)
	}
	s.publish(t, "fragile.x", "glass")
	m := s.join(t, "fragile", &pb.OpenSubscription{TopicPatterns: []string{"fragile.>"}})
	m.nack(t, m.next(t))
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/#groups")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the version", `document.getElementById("server-version").textContent === "v1.2.3"`)
	waitJS(t, ctx, "the uptime", `/^up \d+ s$/.test(document.getElementById("server-uptime").textContent)`)
	waitJS(t, ctx, "the dead letter counted", cell("fragile", "dead-lettered")+` === "1"`)
	waitJS(t, ctx, "the total's header", `(th => th.textContent === "Dead-lettered (total)" && th.title.includes("since the broker started") && th.title.includes("kept now"))(document.querySelector("#groups-table th.dead-total"))`)
	if err := chromedp.Do(ctx, chromedp.Click(`tr[data-group="fragile"] td.actions button`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "kept now beside the total", `document.getElementById("dl-count").textContent === "1 kept now · 1 dead-lettered (total)"`)
	waitJS(t, ctx, "the caption", `document.getElementById("dl-caption").textContent.includes("Kept now")`)
	if err := chromedp.Do(ctx, chromedp.Click(`#dl-table button.replay`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "none kept after the replay, one in all", `document.getElementById("dl-count").textContent === "0 kept now · 1 dead-lettered (total)"`)
}
