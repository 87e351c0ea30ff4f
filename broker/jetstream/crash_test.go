package jetstream_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
)

// crashChildEnv makes the test binary a broker that the parent kills (TestMain).
const crashChildEnv = "TINYBROKER_TEST_CRASH_CHILD"

// crashOptions: an engine on dir's file store whose members' default ack deadline is 2 s,
// so that what a killed node's member held comes back 7 s after its delivery (AckWait).
func crashOptions(dir string) jetstream.Options {
	o := jetstream.Options{Embedded: jetstream.EmbeddedOptions{DataDir: dir}}
	o.AckDeadline = 2 * time.Second
	return o
}

// crashChild runs an engine on dir's file store and a member of group "crash" that takes
// what a publisher publishes, without acking, printing each payload as it gets it, until
// the parent kills it.
func crashChild(dir string) {
	fail := func(err error) { fmt.Println("error:", err); os.Exit(2) }
	e, err := jetstream.New(crashOptions(dir))
	if err != nil {
		fail(err)
	}
	st := e.NewStream(nil)
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "crash", Patterns: []string{"k.*"}, MaxInFlight: 10000, AckDeadline: 2 * time.Second}); err != nil {
		fail(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 60000 {
			if _, err := e.Publish("k.x", []byte(strconv.Itoa(i)), nil); err != nil {
				fail(err)
			}
			if i%50 == 0 { // a steady rate the member keeps up with
				time.Sleep(time.Millisecond)
			}
		}
	})
	w := bufio.NewWriter(os.Stdout)
	for {
		for _, d := range st.Next(nil, 256, math.MaxInt) {
			if d.Msg != nil {
				w.Write(d.Msg.Payload)
				w.WriteByte('\n')
			}
		}
		w.Flush()
		<-st.Ready()
	}
}

// Honest delivery marks after a crash (issue 25, finding 3): every message a member had when
// its node was killed comes back marked as a redelivery (attempt 2 or more), never as a first
// delivery. Before, some came back with attempt 1: the file store writes the consumer's
// delivered state a moment after it delivers, and a kill in that moment loses it.
func TestRedeliveredAfterCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker in a child process and kills it")
	}
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	const enough = 3000
	lines := make(chan string, 64)
	var reader sync.WaitGroup
	reader.Go(func() { // ends when the child does
		defer close(lines)
		for s := bufio.NewScanner(out); s.Scan(); {
			lines <- s.Text()
		}
	})
	had := map[string]bool{}
	for timeout := time.After(brokertest.Patience); len(had) < enough; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended after %d messages", len(had))
			}
			if strings.HasPrefix(l, "error:") {
				t.Fatal(l)
			}
			had[l] = true
		case <-timeout:
			t.Fatalf("the child's member had %d messages after %v, want %d", len(had), brokertest.Patience, enough)
		}
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL while it delivers: nothing flushed
		t.Fatal(err)
	}
	for l := range lines { // what it printed before it died: it had those too
		had[l] = true
	}
	reader.Wait()
	_ = child.Wait()

	e := start(t, crashOptions(dir))
	defer stop(t, e)
	st := e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "crash", Patterns: []string{"k.*"}, MaxInFlight: 1000, AckDeadline: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	for seen := 0; seen < len(had); {
		d := receive(t, st)
		if p := string(d.Msg.Payload); had[p] {
			seen++
			if d.Attempt < 2 {
				first = append(first, p)
			}
		}
		sub.Ack([]string{d.Msg.SystemID})
	}
	if len(first) > 0 {
		t.Fatalf("%d of the %d messages the member had when its node was killed came back as first deliveries (attempt 1): %s",
			len(first), len(had), strings.Join(first, " "))
	}
}

// After a clean shutdown JetStream's delivered state is exact and the marks are gone: a
// message never delivered comes back after the restart as a first delivery, one a member
// had as a redelivery.
func TestNoFalseMarksAfterCleanShutdown(t *testing.T) {
	dir := t.TempDir()
	e := start(t, crashOptions(dir))
	st := e.NewStream(nil)
	if _, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "clean", Patterns: []string{"c.*"}, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := e.Publish("c.x", []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if d := receive(t, st); string(d.Msg.Payload) != "0" { // the member has "0"; "1" and "2" wait
		t.Fatalf("got %q first", d.Msg.Payload)
	}
	stop(t, e)

	e = start(t, crashOptions(dir))
	defer stop(t, e)
	st = e.NewStream(nil)
	defer st.Close()
	sub, err := st.Subscribe(broker.SubscribeOptions{Mode: broker.Balanced, Group: "clean", Patterns: []string{"c.*"}, MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[string]uint32{}
	for range 3 {
		d := receive(t, st)
		attempts[string(d.Msg.Payload)] = d.Attempt
		sub.Ack([]string{d.Msg.SystemID})
	}
	if attempts["0"] < 2 || attempts["1"] != 1 || attempts["2"] != 1 {
		t.Fatalf("attempts after a clean restart: %v, want 0 redelivered and 1, 2 first deliveries", attempts)
	}
}
