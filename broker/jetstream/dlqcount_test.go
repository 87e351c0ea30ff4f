package jetstream

import (
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
)

// A group's dead-letter store never keeps more than its dead_letters_max, even when its
// letters are counted again (every Group call, every Stats) while letters are stored and
// the oldest deleted: a count that missed a deletion made while JetStream was asked, or
// counted one twice, left the store one letter over its bound for good (10,001 letters
// against 10,000), or one under.
func TestDeadLetterCountWhileStoring(t *testing.T) {
	const max, keepers, each = 3, 8, 20
	e := newEngine(t, Options{})
	if err := e.Declare(broker.GroupConfig{ID: "jobs", Name: "jobs", Patterns: []string{"jobs"}, Limits: broker.GroupLimits{DeadLetterMax: max}}); err != nil {
		t.Fatal(err)
	}
	g, err := e.deadGroup("jobs")
	if err != nil {
		t.Fatal(err)
	}
	keep := func(id string) {
		e.keepDeadLetter(g, &broker.Message{SystemID: id, Payload: []byte(id)}, map[string]string{"id": id})
	}
	keep("first") // counted
	// Letters stored (and the oldest deleted) by several dead-lettering goroutines at once
	// while the store is counted again and again, as Stats does; then the store is checked.
	// Each round without the fix ended off by one about one time in three: ten rounds.
	for round := range 10 {
		done := make(chan struct{})
		var counter, keeping sync.WaitGroup
		counter.Add(1)
		go func() {
			defer counter.Done()
			ctx, cancel := e.ctx()
			defer cancel()
			for {
				select {
				case <-done:
					return
				default:
					if _, err := e.countDeadLetters(ctx, g); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
		for k := range keepers {
			keeping.Add(1)
			go func() {
				defer keeping.Done()
				for i := range each {
					keep(strconv.Itoa(round) + "k" + strconv.Itoa(k) + "x" + strconv.Itoa(i))
				}
			}()
		}
		keeping.Wait()
		close(done)
		counter.Wait()
		keep(strconv.Itoa(round) + "last") // deletes down to the bound, by the count this node keeps

		ctx, cancel := e.ctx()
		si, err := e.dlq.Info(ctx, jetstream.WithSubjectFilter(e.dlqSubject(g.consumer, "*")))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		g.mu.Lock()
		counted := g.deadCount
		g.mu.Unlock()
		if kept := len(si.State.Subjects); kept > max || kept != counted {
			t.Fatalf("round %d: the store keeps %d letters, the group counts %d; dead_letters_max is %d", round, kept, counted, max)
		}
	}
}
