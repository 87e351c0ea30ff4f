package brokertest

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
)

// Patience is how long a test waits for what should happen in milliseconds before it fails:
// generous, for loaded machines and the race detector.
const Patience = 20 * time.Second

// Eventually polls cond, from at once to every 10ms, until it holds; after Patience it fails
// the test, saying it was waiting for what.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Patience)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", Patience, what)
		}
		time.Sleep(pause)
	}
}

// Receive waits for a value from ch; after Patience it fails the test, saying it was waiting
// for what.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Patience):
		tb.Fatalf("timed out after %v waiting for %s", Patience, what)
		var zero T
		return zero
	}
}

// Sub is a subscription on a stream of its own, drained in the test's goroutine.
type Sub struct {
	broker.Subscription
	stream broker.Stream
}

// Subscribe opens o on a new stream of b; the stream is closed when the test ends.
func Subscribe(tb testing.TB, b broker.Engine, o broker.SubscribeOptions) *Sub {
	tb.Helper()
	st := b.NewStream(func(m *broker.Message) int { return len(m.Payload) })
	s, err := st.Subscribe(o)
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	return &Sub{Subscription: s, stream: st}
}

// Poll returns the delivery waiting on the stream, if any; it passes over the stream's
// events (Delivery.Msg nil).
func (s *Sub) Poll() (broker.Delivery, bool) {
	for {
		ds := s.stream.Next(nil, 1, math.MaxInt)
		if len(ds) == 0 {
			return broker.Delivery{}, false
		}
		if ds[0].Msg != nil {
			return ds[0], true
		}
	}
}

// Next waits for the next delivery; after Patience it fails the test.
func (s *Sub) Next(tb testing.TB) broker.Delivery {
	tb.Helper()
	deadline := time.After(Patience)
	for {
		if d, ok := s.Poll(); ok {
			return d
		}
		select {
		case <-s.stream.Ready():
		case <-deadline:
			tb.Fatalf("subscription %s: no delivery within %v", s.ID(), Patience)
		}
	}
}

// None fails the test if a delivery is waiting after d.
func (s *Sub) None(tb testing.TB, d time.Duration) {
	tb.Helper()
	time.Sleep(d)
	if got, ok := s.Poll(); ok {
		tb.Fatalf("subscription %s: unexpected delivery %s %q", s.ID(), got.Msg.Topic, got.Msg.Payload)
	}
}

// Log collects what goroutines write, a logger's output say, for the test to read.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WaitFor waits until a line of the log contains s, and returns it; after Patience it fails
// the test, showing the log.
func (l *Log) WaitFor(tb testing.TB, s string) string {
	tb.Helper()
	deadline := time.Now().Add(Patience)
	for {
		for line := range strings.Lines(l.String()) {
			if strings.Contains(line, s) {
				return line
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the log does not say %q:\n%s", s, l.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FreeAddrs returns n loopback addresses nothing listens on (for now), on ports below
// Linux's ephemeral range (32768 and up), for a cluster's route listeners: the nodes bind
// them a moment later, and a port the kernel hands out (":0") may by then be taken by
// another package's test, listening or connecting (CI saw "bind: address already in use" on
// a route port).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no free port found in 20000-32767 after %d tries", tries)
		}
		addr := "127.0.0.1:" + strconv.Itoa(20000+rand.IntN(12768))
		if slices.Contains(addrs, addr) {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		addrs = append(addrs, addr)
		l.Close()
	}
	return addrs
}
