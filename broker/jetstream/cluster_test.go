package jetstream_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// startCluster starts n tinybroker nodes in this process, each embedding a NATS server, that
// form one JetStream cluster with the given replicas; they stop when the test ends. With
// -short, the test is skipped: a cluster takes seconds to form.
func startCluster(t *testing.T, n, replicas int) []*jetstream.Engine {
	t.Helper()
	if testing.Short() {
		t.Skip("a JetStream cluster takes seconds to form")
	}
	routes := brokertest.FreeAddrs(t, n)
	logger := testLogger(t)
	nodes := make([]*jetstream.Engine, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n { // together: JetStream answers once a quorum is up
		wg.Go(func() {
			nodes[i], errs[i] = jetstream.New(jetstream.Options{Replicas: replicas, RequestTimeout: 10 * time.Second, Logger: logger,
				Embedded: jetstream.EmbeddedOptions{DataDir: t.TempDir(), Name: "n" + strconv.Itoa(i+1), ClusterName: "tb",
					ClusterListen: routes[i], Routes: routes}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, e := range nodes {
				if e != nil {
					stop(t, e)
				}
			}
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	for _, e := range nodes {
		t.Cleanup(func() { stop(t, e) })
	}
	return nodes
}

// Three nodes, replicas 3: a group's messages published on one node go to a member on
// another; one node is killed and no confirmed message is lost.
func TestClusterOfThree(t *testing.T) {
	nodes := startCluster(t, 3, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	// The group is made by its first member, on b; a learns of it from b's announcement.
	st := b.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "work", Patterns: []string{"w.>"}, MaxInFlight: 50})
	if err != nil {
		t.Fatal(err)
	}
	confirmed := map[string]bool{}
	brokertest.Eventually(t, "node a routes to the group made on b", func() bool {
		res, err := a.Publish("w.probe", nil, nil)
		return err == nil && res.Routed == 1 && func() bool { confirmed[res.SystemID] = true; return true }()
	})
	publish := func(i int) {
		t.Helper()
		brokertest.Eventually(t, "a confirmed publish", func() bool {
			res, err := a.Publish("w.x", []byte(strconv.Itoa(i)), nil)
			if err != nil || res.Routed != 1 {
				return false
			}
			confirmed[res.SystemID] = true
			return true
		})
	}
	for i := range 100 {
		publish(i)
	}
	stop(t, c) // a node goes away, perhaps the stream's leader
	for i := 100; i < 200; i++ {
		publish(i)
	}

	got := map[string]bool{}
	for len(got) < len(confirmed) {
		d := receive(t, st)
		if !confirmed[d.Msg.SystemID] {
			t.Fatalf("delivered %s (%q), never confirmed", d.Msg.SystemID, d.Msg.Payload)
		}
		got[d.Msg.SystemID] = true
		sub.Ack([]string{d.Msg.SystemID})
	}
	brokertest.Eventually(t, "the group empty, as the cluster sees it", func() bool {
		g, err := a.Group("work")
		return err == nil && g.Queued == 0 && g.InFlight == 0
	})
}

// testLogger collects the nodes' logs, shown if the test fails.
func testLogger(t *testing.T) hclog.Logger {
	logs := new(brokertest.Log)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
}

// Across nodes: a group made on one node is routed to by every node as soon as its member
// hears "subscribed"; a unary Ack or Nack on a node that does not hold the delivery reaches
// the node that does, and one of a delivery no member holds is refused as unknown.
func TestClusterSettleAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3, 1)
	a, b, c := nodes[0], nodes[1], nodes[2]
	st := b.NewStream(nil)
	defer st.Close()
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "work", Patterns: []string{"w.>"}, MaxInFlight: 10}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*jetstream.Engine{a, c} { // at once, not eventually
		if res, err := n.Publish("w.x", []byte("first"), nil); err != nil || res.Routed != 1 {
			t.Fatalf("publish on another node right after the group was made: %+v %v", res, err)
		}
	}
	first, second := receive(t, st), receive(t, st)
	if err := a.Ack("work", first.Msg.SystemID); err != nil {
		t.Fatalf("ack on a node that does not hold it: %v", err)
	}
	brokertest.Eventually(t, "the ack applied on b", func() bool {
		g, _ := b.Group("work")
		return g.Acked == 1 && g.InFlight == 1
	})
	if err := a.Ack("work", first.Msg.SystemID); !errors.Is(err, broker.ErrUnknownMessage) {
		t.Fatalf("second ack of it: %v", err)
	}
	if err := c.Nack("work", second.Msg.SystemID, 0, "again"); err != nil {
		t.Fatalf("nack on a node that does not hold it: %v", err)
	}
	if d := receive(t, st); d.Msg.SystemID != second.Msg.SystemID || d.Attempt != 2 {
		t.Fatalf("after the nack: %s attempt %d", d.Msg.SystemID, d.Attempt)
	}
	if err := c.Nack("work", first.Msg.SystemID, 0, ""); !errors.Is(err, broker.ErrUnknownMessage) {
		t.Fatalf("nack of an acked message: %v", err)
	}

	// A group's bound holds for what other nodes published, within the 100 ms a node's
	// count may be old: the node asks JetStream, and again once members drained it.
	if err := a.Declare(broker.GroupConfig{Name: "small", Patterns: []string{"s"}, Limits: broker.GroupLimits{MaxQueued: 2}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Publish("s", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, "node a to count both", func() bool { // describing it takes JetStream's count,
		g, _ := a.Group("small") // which follows the stream a moment after the store
		return g.Queued == 2
	})
	if _, err := a.Publish("s", nil, nil); !errors.Is(err, broker.ErrGroupFull) {
		t.Fatalf("a third message to a group of max_queued 2, on another node: %v", err)
	}
	accepted := 0 // by a node whose count is up to 100 ms old
	brokertest.Eventually(t, "c refuses too", func() bool {
		_, err := c.Publish("s", nil, nil)
		if err == nil {
			accepted++
		}
		return errors.Is(err, broker.ErrGroupFull)
	})
	sst := b.NewStream(nil)
	defer sst.Close()
	small, err := sst.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "small", Patterns: []string{"s"}, MaxInFlight: 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 + accepted {
		small.Ack([]string{receive(t, sst).Msg.SystemID})
	}
	brokertest.Eventually(t, "room again, seen from a", func() bool {
		_, err := a.Publish("s", nil, nil)
		return err == nil
	})
}
