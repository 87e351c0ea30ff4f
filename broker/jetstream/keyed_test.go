package jetstream_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// orderCheck follows the deliveries of an ordered group (payload "key/index"): a key's
// delivery must be its next message not yet acked, and no other delivery of its key may be
// out (received by a member and not yet acked or nacked), whichever member or node got it.
type orderCheck struct {
	mu     sync.Mutex
	acked  map[string]int    // the highest index acked, per key
	out    map[string]string // key: the member that holds its message
	errs   []string
	total  int // messages acked
	single bool
	busy   string // with single: the member holding the group's one message
}

func newOrderCheck() *orderCheck {
	return &orderCheck{acked: make(map[string]int), out: make(map[string]string)}
}

func parseKeyed(d broker.Delivery) (string, int) {
	k, i, _ := strings.Cut(string(d.Msg.Payload), "/")
	n, _ := strconv.Atoi(i)
	return k, n
}

// got checks a delivery to member who.
func (c *orderCheck) got(who string, d broker.Delivery) {
	k, i := parseKeyed(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.single {
		if c.busy != "" {
			c.errs = append(c.errs, fmt.Sprintf("%s delivered to %s while %s holds one", d.Msg.Payload, who, c.busy))
		}
		c.busy = who
	}
	if d.Msg.Key == "" { // not ordered
		return
	}
	if d.Msg.Key != k {
		c.errs = append(c.errs, fmt.Sprintf("%s: key %q, want %q", d.Msg.Payload, d.Msg.Key, k))
	}
	if o := c.out[k]; o != "" {
		c.errs = append(c.errs, fmt.Sprintf("%s delivered to %s while %s holds a message of key %s", d.Msg.Payload, who, o, k))
	}
	next := 0
	if a, ok := c.acked[k]; ok {
		next = a + 1
	}
	if i != next {
		c.errs = append(c.errs, fmt.Sprintf("%s delivered (attempt %d); the key's next unacked is %d", d.Msg.Payload, d.Attempt, next))
	}
	c.out[k] = who
}

// settled records that who acked (or nacked) the message of d: called before the member
// tells the engine, which may then deliver the key's next at once.
func (c *orderCheck) settled(who string, d broker.Delivery, acked bool) {
	k, i := parseKeyed(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.single && c.busy == who {
		c.busy = ""
	}
	if d.Msg.Key == "" {
		return
	}
	if c.out[k] == who {
		delete(c.out, k)
	}
	if acked {
		c.acked[k] = i
		c.total++
	}
}

// dropped forgets what member who holds (it is being killed: the engine gives it back).
func (c *orderCheck) dropped(who string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, o := range c.out {
		if o == who {
			delete(c.out, k)
		}
	}
	if c.busy == who {
		c.busy = ""
	}
}

func (c *orderCheck) done(keys, per int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total < keys*per {
		return false
	}
	for k := range keys {
		if c.acked["k"+strconv.Itoa(k)] != per-1 {
			return false
		}
	}
	return true
}

func (c *orderCheck) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		t.Fatalf("%d violations, first: %s", len(c.errs), strings.Join(c.errs[:min(5, len(c.errs))], "; "))
	}
}

// keyedMember is a member that acks what it gets, in its own goroutine, until killed.
type keyedMember struct {
	name string
	st   broker.Stream
	sub  broker.Subscription
	quit chan struct{}
	wg   sync.WaitGroup
}

func startMember(t *testing.T, e *jetstream.Engine, c *orderCheck, name string, o broker.SubscribeOptions) *keyedMember {
	t.Helper()
	m := &keyedMember{name: name, st: e.NewStream(nil), quit: make(chan struct{})}
	sub, err := m.st.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	m.sub = sub
	m.wg.Go(func() {
		for {
			// All it was given is held at once (a member never holds two of a key), then
			// acked together.
			var ids []string
			ds := m.st.Next(nil, 64, math.MaxInt)
			select {
			case <-m.quit:
				return
			default:
			}
			for _, d := range ds {
				if d.Msg != nil {
					c.got(name, d)
				}
			}
			for _, d := range ds {
				if d.Msg != nil {
					c.settled(name, d, true)
					ids = append(ids, d.Msg.SystemID)
				}
			}
			if len(ids) > 0 {
				sub.Ack(ids)
			}
			select {
			case <-m.st.Ready():
			case <-m.quit:
				return
			case <-m.st.Done():
				return
			}
		}
	})
	t.Cleanup(m.kill)
	return m
}

// kill stops the member mid-work: what it holds goes back to the group.
func (m *keyedMember) kill() {
	select {
	case <-m.quit:
		return
	default:
	}
	close(m.quit)
	m.wg.Wait()
	m.st.Close()
}

// publishKeyed publishes per messages of each of keys keys, in runs of run messages of a
// key.
func publishKeyed(t *testing.T, e *jetstream.Engine, topic string, keys, per, run int) {
	t.Helper()
	var frame []broker.Draft
	flush := func() {
		res := make([]broker.PublishResult, len(frame))
		errs := make([]error, len(frame))
		e.PublishBatch(frame, res, errs)
		for i, err := range errs {
			if err != nil || res[i].Routed != 1 {
				t.Errorf("publish %s: %+v %v", frame[i].Payload, res[i], err) // may run in a goroutine of the test's
				return
			}
		}
		frame = frame[:0]
	}
	for i := 0; i < per; i += run {
		for k := range keys {
			key := "k" + strconv.Itoa(k)
			for j := i; j < min(i+run, per); j++ {
				frame = append(frame, broker.Draft{Topic: topic, Key: key, Payload: []byte(key + "/" + strconv.Itoa(j))})
				if len(frame) == 256 {
					flush()
				}
			}
		}
	}
	if len(frame) > 0 {
		flush()
	}
}

func orderedEngine(t *testing.T) *jetstream.Engine {
	t.Helper()
	e := start(t, jetstream.Options{MemoryStorage: true, Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir()}})
	t.Cleanup(func() { stop(t, e) })
	t.Cleanup(func() {
		if t.Failed() {
			g, err := e.Group("o")
			t.Logf("group: %+v %v", g, err)
		}
	})
	return e
}

var orderedOpts = broker.SubscribeOptions{ID: "o", Group: "o", Mode: broker.Balanced, Patterns: []string{"o.>"},
	Dispatch: broker.Dispatch{Ordering: broker.OrderingKey}}

// Several members take an ordered group's keys in parallel, one message of a key at a time
// in publish order, and one member killed mid-work changes nothing of that: what it held
// goes to the others first.
func TestOrderedGroupPerKey(t *testing.T) {
	e := orderedEngine(t)
	c := newOrderCheck()
	o := orderedOpts
	o.MaxInFlight = 5
	var ms []*keyedMember
	for i := range 4 {
		ms = append(ms, startMember(t, e, c, "m"+strconv.Itoa(i), o))
	}
	const keys, per = 20, 30
	publishKeyed(t, e, "o.x", keys, per, 10)
	brokertest.Eventually(t, "a third acked", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.total >= keys*per/3 })
	c.dropped("m0")
	ms[0].kill()
	brokertest.Eventually(t, "every message acked in order", func() bool { return c.done(keys, per) })
	c.check(t)
	g, err := e.Group("o")
	if err != nil || g.Dispatch.Ordering != broker.OrderingKey || g.Keys != 0 {
		t.Fatalf("group: %+v %v", g, err)
	}
}

// Ordering and fair_by together: turns across keys, one message of a key at a time, in order.
func TestOrderedFairGroup(t *testing.T) {
	e := orderedEngine(t)
	c := newOrderCheck()
	o := orderedOpts
	o.MaxInFlight, o.Dispatch.FairBy = 5, "key"
	for i := range 3 {
		startMember(t, e, c, "m"+strconv.Itoa(i), o)
	}
	const keys, per = 10, 30
	publishKeyed(t, e, "o.x", keys, per, 15)
	brokertest.Eventually(t, "every message acked in order", func() bool { return c.done(keys, per) })
	c.check(t)
}

// A key's next message waits until the previous is settled: after a nack, and after its ack
// deadline passed, the same message comes again (before the next, which was there to take,
// and the member had room); another key's messages go meanwhile; messages without a key are
// not held back.
func TestOrderedGroupWaitsForSettle(t *testing.T) {
	e := orderedEngine(t)
	st := e.NewStream(nil)
	defer st.Close()
	o := orderedOpts
	o.MaxInFlight, o.AckDeadline = 20, 2*time.Second
	sub, err := st.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	drafts := []broker.Draft{{Topic: "o.x", Key: "a", Payload: []byte("a/0")}, {Topic: "o.x", Key: "a", Payload: []byte("a/1")},
		{Topic: "o.x", Key: "b", Payload: []byte("b/0")}}
	for i := range 5 {
		drafts = append(drafts, broker.Draft{Topic: "o.x", Payload: []byte("free/" + strconv.Itoa(i))})
	}
	res, errs := make([]broker.PublishResult, len(drafts)), make([]error, len(drafts))
	e.PublishBatch(drafts, res, errs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	got := map[string]broker.Delivery{}
	for len(got) < 7 { // a/0, b/0 and the five without a key, none acked
		d := receive(t, st)
		if _, dup := got[string(d.Msg.Payload)]; dup || string(d.Msg.Payload) == "a/1" {
			t.Fatalf("delivered %s (attempt %d) while holding %d", d.Msg.Payload, d.Attempt, len(got))
		}
		got[string(d.Msg.Payload)] = d
	}
	if _, ok := got["a/0"]; !ok {
		t.Fatalf("got %v", got)
	}
	// b's and the free ones are acked; a/0 is nacked: it comes again, not a/1.
	for p, d := range got {
		if p != "a/0" && sub.Ack([]string{d.Msg.SystemID}) != 0 {
			t.Fatalf("ack %s skipped", p)
		}
	}
	if g, _ := e.Group("o"); g.Keys != 1 || len(g.Busiest) != 1 || g.Busiest[0].Key != "a" || g.Busiest[0].Held != 2 {
		t.Fatalf("stats: keys %d busiest %+v", g.Keys, g.Busiest)
	}
	sub.Nack([]string{got["a/0"].Msg.SystemID}, 0, "")
	d := receive(t, st)
	if string(d.Msg.Payload) != "a/0" || d.Attempt != 2 {
		t.Fatalf("after the nack: %s attempt %d", d.Msg.Payload, d.Attempt)
	}
	// Not acked: the deadline takes it back, and it comes again.
	d = receive(t, st)
	if string(d.Msg.Payload) != "a/0" || d.Attempt != 3 {
		t.Fatalf("after the deadline: %s attempt %d", d.Msg.Payload, d.Attempt)
	}
	sub.Ack([]string{d.Msg.SystemID})
	d = receive(t, st)
	if string(d.Msg.Payload) != "a/1" || d.Attempt != 1 {
		t.Fatalf("after the ack: %s attempt %d", d.Msg.Payload, d.Attempt)
	}
	sub.Ack([]string{d.Msg.SystemID})
	brokertest.Eventually(t, "the group holds nothing", func() bool {
		g, err := e.Group("o")
		return err == nil && g.Queued == 0 && g.InFlight == 0 && g.Keys == 0 && g.Bytes == 0
	})
}

// Ordering "group" is a single active consumer: one message out at a time, whatever its
// key, in publish order, across members.
func TestOrderedGroupSingleActive(t *testing.T) {
	e := orderedEngine(t)
	c := newOrderCheck()
	c.single = true
	o := orderedOpts
	o.Dispatch.Ordering, o.MaxInFlight = broker.OrderingGroup, 10
	for i := range 3 {
		startMember(t, e, c, "m"+strconv.Itoa(i), o)
	}
	const keys, per = 5, 20
	publishKeyed(t, e, "o.x", keys, per, 1)
	brokertest.Eventually(t, "every message acked", func() bool { return c.done(keys, per) })
	c.check(t)
}

// The group's dispatch is in its consumer's metadata: a restarted node keeps it, members
// that leave it unset take it, and one that asks for another is refused, as is a fair_by
// that names neither the key nor a header.
func TestOrderedGroupSettingsKept(t *testing.T) {
	dir := t.TempDir()
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}}
	e := start(t, o)
	want := broker.Dispatch{Ordering: broker.OrderingKey, FairBy: "key"}
	if err := e.Declare(broker.GroupConfig{Name: "o", Patterns: []string{"o.>"}, Dispatch: want}); err != nil {
		t.Fatal(err)
	}
	stop(t, e)
	e = start(t, o)
	defer stop(t, e)
	if g, err := e.Group("o"); err != nil || g.Dispatch != want {
		t.Fatalf("after the restart: %+v %v", g.Dispatch, err)
	}
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{ID: "o", Group: "o", Mode: broker.Balanced, Patterns: []string{"o.>"}})
	if err != nil || sub.Settings().Dispatch != want {
		t.Fatalf("member: %v %v", sub, err)
	}
	if _, err := st.Subscribe(broker.SubscribeOptions{ID: "o", Group: "o", Mode: broker.Balanced, Patterns: []string{"o.>"},
		Dispatch: broker.Dispatch{Ordering: broker.OrderingGroup}}); !errors.Is(err, broker.ErrGroupMismatch) {
		t.Fatalf("a member asking for another ordering: %v", err)
	}
	if _, err := st.Subscribe(broker.SubscribeOptions{ID: "f", Group: "f", Mode: broker.Balanced, Patterns: []string{"f"},
		Dispatch: broker.Dispatch{FairBy: "tenant"}}); !errors.Is(err, broker.ErrInvalidSubscription) || !strings.Contains(err.Error(), "fair_by") {
		t.Fatalf("fair_by %q: %v", "tenant", err)
	}
}

// With fair_by, delivery takes turns across tenants among what the node pulled: a tenant
// that flooded the group gets one turn in three beside two quiet ones, and is listed noisy.
// The order is exact: the member takes one message at a time, and the test waits until the
// node holds every message before it acks the first.
func TestFairGroupTakesTurns(t *testing.T) {
	e := orderedEngine(t)
	gc := broker.GroupConfig{Name: "f", Patterns: []string{"f"}, Dispatch: broker.Dispatch{FairBy: "header:tenant"}}
	if err := e.Declare(gc); err != nil {
		t.Fatal(err)
	}
	var drafts []broker.Draft
	add := func(tenant string, n int) {
		for i := range n {
			drafts = append(drafts, broker.Draft{Topic: "f", Payload: []byte(tenant + "/" + strconv.Itoa(i)),
				Headers: broker.MakeHeaders(map[string]string{"tenant": tenant})})
		}
	}
	add("a", 150)
	add("b", 2)
	add("c", 2)
	res, errs := make([]broker.PublishResult, len(drafts)), make([]error, len(drafts))
	e.PublishBatch(drafts, res, errs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{ID: "f", Group: "f", Mode: broker.Balanced, Patterns: []string{"f"}, MaxInFlight: 1})
	if err != nil || sub.Settings().Dispatch.FairBy != "header:tenant" {
		t.Fatalf("member: %v", err)
	}
	d := receive(t, st)
	if string(d.Msg.Payload) != "a/0" {
		t.Fatalf("first: %s", d.Msg.Payload)
	}
	brokertest.Eventually(t, "the node holds every message", func() bool {
		g, err := e.Group("f")
		held := 0
		for _, k := range g.Busiest {
			held += k.Held
		}
		return err == nil && held == len(drafts)
	})
	g, _ := e.Group("f")
	var got []string
	for range 8 {
		sub.Ack([]string{d.Msg.SystemID})
		d = receive(t, st)
		got = append(got, string(d.Msg.Payload))
	}
	if want := "a/1 b/0 c/0 a/2 b/1 c/1 a/3 a/4"; strings.Join(got, " ") != want {
		t.Fatalf("order: %s, want %s", strings.Join(got, " "), want)
	}
	if g.Keys != 3 || len(g.Busiest) != 3 || g.Busiest[0].Key != "a" || g.Busiest[0].Held != 150 || !g.Busiest[0].Noisy || g.Busiest[1].Noisy ||
		g.Dispatch.FairBy != "header:tenant" {
		t.Fatalf("keys %d, busiest %+v", g.Keys, g.Busiest)
	}
}

// Many keys through eight members, members killed at random and replaced: per-key order
// held, nothing lost.
func TestOrderedGroupMembersKilled(t *testing.T) {
	e := orderedEngine(t)
	c := newOrderCheck()
	o := orderedOpts
	o.MaxInFlight = 20
	const members = 8
	ms := make([]*keyedMember, members)
	seq := 0
	for i := range ms {
		ms[i] = startMember(t, e, c, "m"+strconv.Itoa(seq), o)
		seq++
	}
	keys, per := 1000, 100
	if testing.Short() {
		keys, per = 200, 20
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { publishKeyed(t, e, "o.x", keys, per, 5); close(done) })
	rng := rand.New(rand.NewPCG(1, 2))
	kills := 0
	for !c.done(keys, per) {
		c.check(t)
		i := rng.IntN(members)
		who := ms[i].name
		c.dropped(who)
		ms[i].kill()
		kills++
		ms[i] = startMember(t, e, c, "m"+strconv.Itoa(seq), o)
		seq++
		brokertest.Eventually(t, "progress", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.total >= kills*keys*per/40 || c.total == keys*per
		})
	}
	wg.Wait()
	c.check(t)
	t.Logf("%d messages of %d keys, %d members killed", keys*per, keys, kills)
}

// Three nodes: an ordered group's members on two of them. One node dispatches at a time
// (JetStream's pin), so a key's messages are never out on both; order per key holds and
// nothing is lost, also when the dispatching node's members all leave and the other node
// takes over.
func TestClusterOrderedGroup(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	a, b, c3 := nodes[0], nodes[1], nodes[2]
	c := newOrderCheck()
	o := orderedOpts
	o.MaxInFlight, o.AckDeadline = 10, time.Second
	ma := []*keyedMember{startMember(t, a, c, "a0", o), startMember(t, a, c, "a1", o)}
	mb := []*keyedMember{startMember(t, b, c, "b0", o), startMember(t, b, c, "b1", o)}
	brokertest.Eventually(t, "node c routes to the group", func() bool {
		res, err := c3.Publish("o.probe", []byte("probe/0"), nil)
		return err == nil && res.Routed == 1
	})
	const keys, per = 50, 40
	publishKeyed(t, c3, "o.x", keys, per/2, 5)
	brokertest.Eventually(t, "the first half acked", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.total >= keys*per/2
	})
	// Whichever node dispatches, its members leave; the other node's take over.
	var holder []*keyedMember
	for _, e := range []struct {
		e  *jetstream.Engine
		ms []*keyedMember
	}{{a, ma}, {b, mb}} {
		if g, _ := e.e.Group("o"); g.Delivered > 0 {
			holder = e.ms
		}
	}
	if holder == nil {
		t.Fatal("no node delivered")
	}
	for _, m := range holder {
		c.dropped(m.name)
		m.kill()
	}
	for k := range keys {
		var frame []broker.Draft
		key := "k" + strconv.Itoa(k)
		for i := per / 2; i < per; i++ {
			frame = append(frame, broker.Draft{Topic: "o.x", Key: key, Payload: []byte(key + "/" + strconv.Itoa(i))})
		}
		res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
		c3.PublishBatch(frame, res, errs)
		for j, err := range errs {
			if err != nil {
				t.Fatalf("publish %s: %v", frame[j].Payload, err)
			}
		}
	}
	deadline := time.Now().Add(2 * brokertest.Patience) // the takeover waits out the pin's TTL and a grace
	for !c.done(keys, per) {
		if time.Now().After(deadline) {
			c.check(t)
			c.mu.Lock()
			t.Fatalf("not done: %d of %d acked", c.total, keys*per)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.check(t)
}

// While a tenant is noisy, a fair group's node pulls ahead up to its parking bound (1,024
// messages), not only fairWindow (256): a quiet tenant's message 600 behind a flood in the
// stream is seen, and goes second once the member has room, while the flood's first is
// held. Past the bound the node stops pulling.
func TestFairGroupReadsPastFlood(t *testing.T) {
	e := orderedEngine(t)
	if err := e.Declare(broker.GroupConfig{Name: "f", Patterns: []string{"f"}, Dispatch: broker.Dispatch{FairBy: "key"}}); err != nil {
		t.Fatal(err)
	}
	publish := func(key string, from, n int) {
		var ds []broker.Draft
		for i := from; i < from+n; i++ {
			ds = append(ds, broker.Draft{Topic: "f", Key: key, Payload: []byte(key + "/" + strconv.Itoa(i))})
		}
		res, errs := make([]broker.PublishResult, len(ds)), make([]error, len(ds))
		e.PublishBatch(ds, res, errs)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("publish %s: %v", ds[i].Payload, err)
			}
		}
	}
	publish("flood", 0, 600)
	publish("quiet", 0, 1)
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{ID: "f", Group: "f", Mode: broker.Balanced, Patterns: []string{"f"}, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, st)
	if string(d.Msg.Payload) != "flood/0" {
		t.Fatalf("first: %s", d.Msg.Payload)
	}
	held := func() (keys, n int, noisy bool) {
		g, err := e.Group("f")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range g.Busiest {
			n += k.Held
			noisy = noisy || k.Key == "flood" && k.Noisy
		}
		return g.Keys, n, noisy
	}
	brokertest.Eventually(t, "the node holds the quiet tenant's message, 600 behind the flood", func() bool {
		keys, n, noisy := held()
		return keys == 2 && n == 601 && noisy
	})
	var got []string
	for range 2 {
		sub.Ack([]string{d.Msg.SystemID})
		d = receive(t, st)
		got = append(got, string(d.Msg.Payload))
	}
	if want := "flood/1 quiet/0"; strings.Join(got, " ") != want {
		t.Fatalf("after the flood's first: %s, want %s", strings.Join(got, " "), want)
	}
	// The member holds flood/2 now; the node parks up to its bound, and no more.
	sub.Ack([]string{d.Msg.SystemID})
	d = receive(t, st)
	publish("flood", 600, 1000)
	const parkMax = 1024
	brokertest.Eventually(t, "the node parks up to its bound", func() bool {
		_, n, _ := held()
		if n > parkMax+1 {
			t.Fatalf("the node holds %d messages, over its bound of %d parked and one out", n, parkMax)
		}
		return n == parkMax+1
	})
	if g, _ := e.Group("f"); g.Queued != 1601-3-1 || g.InFlight != 1 {
		t.Fatalf("queued %d, in flight %d", g.Queued, g.InFlight)
	}
}
