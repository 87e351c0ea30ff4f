package jetstream_test

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// The seed's promise on every node of a cluster: what a balanced member held when its stream
// ended goes to the other members at once, wherever they and the publisher are connected.
// Members come and go on two nodes while a publisher on the third publishes; a steady member
// acks everything. Every message must be acked well before the consumer's AckWait (the
// members' ack deadline of a minute, plus a pad), which is when JetStream would redeliver a
// message that a leaving member's inbox never saw (issue 25, finding 1: 16-59 of 20,000 came
// back only after AckWait).
func TestClusterGiveBackAtOnce(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	const deadline = time.Minute
	steady := c.NewStream(nil)
	defer steady.Close()
	ssub, err := steady.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "churn", Patterns: []string{"c.>"}, MaxInFlight: 20, AckDeadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	defer wg.Wait()
	defer stop.Store(true)
	wg.Go(func() { // the steady member: acks what it gets
		var buf []broker.Delivery
		for !stop.Load() {
			buf = steady.Next(buf[:0], 20, math.MaxInt)
			var ids []string
			for _, d := range buf {
				if d.Msg != nil {
					ids = append(ids, d.Msg.SystemID)
				}
			}
			if len(ids) > 0 {
				ssub.Ack(ids)
				mu.Lock()
				for _, id := range ids {
					acked[id] = true
				}
				mu.Unlock()
				continue
			}
			select {
			case <-steady.Ready():
			case <-time.After(10 * time.Millisecond):
			}
		}
	})

	const n = 2000
	published := make(chan struct{})
	wg.Go(func() { // the publisher, on the node without members
		defer close(published)
		for i := 0; i < n && !stop.Load(); {
			res, err := a.Publish("c.x", []byte(strconv.Itoa(i)), nil)
			if err == nil && res.Routed == 1 {
				i++
				continue
			}
			time.Sleep(time.Millisecond)
		}
	})
	// Members that take a few messages, ack one and leave holding the rest, on b and c in turn.
	departures := 0
	for leaving := true; leaving; {
		select {
		case <-published:
			leaving = false
		default:
		}
		node := b
		if departures%2 == 1 {
			node = c
		}
		st := node.NewStream(nil)
		sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "churn", Patterns: []string{"c.>"}, MaxInFlight: 5, AckDeadline: deadline})
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		got := 0
		for until := time.Now().Add(200 * time.Millisecond); got < 3 && time.Now().Before(until); {
			for _, d := range st.Next(nil, 1, math.MaxInt) {
				if d.Msg == nil {
					continue
				}
				if got++; got == 1 {
					sub.Ack([]string{d.Msg.SystemID})
					mu.Lock()
					acked[d.Msg.SystemID] = true
					mu.Unlock()
				}
			}
			select {
			case <-st.Ready():
			case <-time.After(5 * time.Millisecond):
			}
		}
		st.Close()
		departures++
	}
	t.Logf("%d departures", departures)
	start := time.Now()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	for count() < n {
		if time.Since(start) > brokertest.Patience {
			t.Fatalf("%d of %d messages acked %v after the publisher ended; the rest wait for AckWait (%v)",
				count(), n, brokertest.Patience, deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the last messages acked %v after the publisher ended", time.Since(start))
	// The counts are true once the group is drained, on every node (they kept showing 86-96
	// queued).
	for i, node := range nodes {
		brokertest.Eventually(t, "node "+strconv.Itoa(i+1)+" to count the group empty", func() bool {
			g, err := node.Group("churn")
			return err == nil && g.Queued == 0 && g.InFlight == 0
		})
	}
}
