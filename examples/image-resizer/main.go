// Command image-resizer is tinybroker's seed scenario: three workers, A, B and C, are members
// of the consumer group "image-resizer" and share fifty thumbnail jobs published to
// "jobs.thumb.1" … "jobs.thumb.50". Each job must be resized exactly once.
//
//	make run                              # in one terminal: the broker
//	go run ./examples/image-resizer       # in another
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

const (
	jobs           = 50
	group          = "image-resizer"
	subscriptionID = "image-resizer-group"
	pattern        = "jobs.thumb.*"
	// runHeader tells this run's jobs from those an interrupted earlier run left in the group.
	runHeader = "image-resizer-run"
)

var workers = []string{"A", "B", "C"}

func main() {
	addr := flag.String("addr", client.DefaultAddr, "broker address (host:port)")
	timeout := flag.Duration("timeout", time.Minute, "give up if the jobs are not done by then")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *addr, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image-resizer:", err)
		os.Exit(1)
	}
}

// run starts the three workers, publishes the fifty jobs and waits until every job is
// resized. It fails if a job was resized twice or is still missing when ctx is done.
func run(ctx context.Context, addr string, out io.Writer) error {
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	runID := rand.Text()

	var mu sync.Mutex                  // guards out and the maps
	resizedBy := map[string][]string{} // job topic → workers that resized it
	perWorker := map[string]int{}
	allDone := make(chan struct{})
	subs := make([]*client.Subscription, 0, len(workers)) // c.Close closes them on an early return
	for _, w := range workers {
		sub, err := c.Subscribe(ctx, client.SubscribeOptions{
			ID:       subscriptionID,
			Group:    group,
			Mode:     client.Balanced,
			Patterns: []string{pattern},
		}, func(_ context.Context, m *client.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if m.Headers.Get(runHeader) != runID {
				fmt.Fprintf(out, "worker %s dropped %s, left over from an earlier run\n", w, m.Topic)
				return nil // ack it, so that it does not come back
			}
			// The "resize": a real worker would fetch m.Payload's image and write a thumbnail.
			resizedBy[m.Topic] = append(resizedBy[m.Topic], w)
			perWorker[w]++
			fmt.Fprintf(out, "worker %s resized %s\n", w, m.Topic)
			if len(resizedBy) == jobs && len(resizedBy[m.Topic]) == 1 {
				close(allDone)
			}
			return nil // acks the job
		})
		if err != nil {
			return fmt.Errorf("start worker %s: %w", w, err)
		}
		subs = append(subs, sub)
	}

	p, err := c.NewPublisher(ctx, client.PublisherOptions{}) // c.Close closes it on an early return
	if err != nil {
		return err
	}
	for i := 1; i <= jobs; i++ {
		img := "image-" + strconv.Itoa(i) + ".jpg"
		if err := p.Publish(ctx, "jobs.thumb."+strconv.Itoa(i), []byte(img), map[string]string{runHeader: runID}); err != nil {
			return fmt.Errorf("publish job %d: %w", i, err)
		}
	}
	if err := p.Close(); err != nil { // waits until the broker has every job
		return fmt.Errorf("publish jobs: %w", err)
	}

	select {
	case <-allDone:
	case <-ctx.Done():
	}
	for _, s := range subs { // the workers stop and their last acks go out
		if err := s.Close(); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var problems []string
	for i := 1; i <= jobs; i++ {
		topic := "jobs.thumb." + strconv.Itoa(i)
		switch by := resizedBy[topic]; len(by) {
		case 0:
			problems = append(problems, topic+" was never resized")
		case 1:
		default:
			problems = append(problems, fmt.Sprintf("%s was resized %d times (by %s)", topic, len(by), strings.Join(by, ", ")))
		}
	}
	if len(problems) > 0 {
		if ctx.Err() != nil {
			problems = append(problems, "gave up: "+ctx.Err().Error())
		}
		return fmt.Errorf("%d of %d jobs went wrong: %s", len(problems), jobs, strings.Join(problems, "; "))
	}
	var counts []string
	for _, w := range slices.Sorted(maps.Keys(perWorker)) {
		counts = append(counts, fmt.Sprintf("%s %d", w, perWorker[w]))
	}
	fmt.Fprintf(out, "all %d jobs resized exactly once (%s)\n", jobs, strings.Join(counts, ", "))
	return nil
}
