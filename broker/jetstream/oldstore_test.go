package jetstream_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// TestOpensAStoreOf5bfe240: a data_dir written by tinybroker at 5bfe240 (the commit the
// cluster issue was filed at; testdata/store-5bfe240, made by its engine: two declared
// groups, 30 messages, 4 of group "mail"'s acked) opens with every queued message kept, the
// groups' definitions, and the system_ids the publishers were given. It guards the
// stream's layout (names, subjects, metadata) against a change that would strand what an
// older broker stored.
func TestOpensAStoreOf5bfe240(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/store-5bfe240")); err != nil {
		t.Fatal(err)
	}
	var ids map[string][]string // topic -> system_ids, in publish order
	b, err := os.ReadFile(filepath.Join(dir, "ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ids); err != nil {
		t.Fatal(err)
	}
	topicOf := map[string]string{}
	for topic, list := range ids {
		for _, id := range list {
			topicOf[id] = topic
		}
	}
	e := start(t, jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: filepath.Join(dir, "data")}})
	defer stop(t, e)

	jobs, err := e.Group("jobs")
	if err != nil || jobs.Queued != 21 || !jobs.Declared || jobs.MaxDeliveries != 5 || !slices.Equal(jobs.Patterns, []string{"jobs.>"}) {
		t.Fatalf("group jobs: %+v %v, want declared, 21 queued, max_deliveries 5, jobs.>", jobs, err)
	}
	mail, err := e.Group("mail")
	if err != nil || mail.Queued+mail.InFlight != 8 || !mail.Declared {
		t.Fatalf("group mail: %+v %v, want declared with the 8 messages it had not acked", mail, err)
	}

	// jobs: the 18 jobs.x and 3 jobs.urgent, in publish order, with their system_ids.
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "jobs", Patterns: []string{"jobs.>"}, MaxInFlight: 100, MaxDeliveries: 5})
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for range 21 {
		d := receive(t, st)
		n, _ := strconv.Atoi(string(d.Msg.Payload))
		if n <= last || d.Msg.Headers.Map()["n"] != strconv.Itoa(n) || topicOf[d.Msg.SystemID] != d.Msg.Topic || d.Attempt != 1 {
			t.Fatalf("after message %d: %s %q %v %s attempt %d, want the next in publish order with its own system_id", last, d.Msg.Topic, d.Msg.Payload, d.Msg.Headers, d.Msg.SystemID, d.Attempt)
		}
		last = n
		if sub.Ack([]string{d.Msg.SystemID}) != 0 {
			t.Fatalf("ack of %s skipped", d.Msg.SystemID)
		}
	}
	brokertest.Eventually(t, "group jobs drained", func() bool {
		g, _ := e.Group("jobs")
		return g.Queued == 0 && g.InFlight == 0
	})
}
