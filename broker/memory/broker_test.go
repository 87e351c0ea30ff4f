package memory

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/msgid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestBroker(t testing.TB, opts Options) *Engine {
	b := New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // benchmarks leave messages unsent: no grace
		_ = b.Shutdown(ctx)
	})
	return b
}

// drainOne waits for one delivery on s.
func drainOne(t testing.TB, s *Subscription) broker.Delivery {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if ds := s.Next(nil, 1, 1<<20); len(ds) == 1 {
			return ds[0]
		}
		select {
		case <-s.Ready():
		case <-deadline:
			t.Fatal("no delivery")
		}
	}
}

// Shutdown is idempotent, ends subscriptions with ErrShuttingDown and refuses new work.
func TestShutdown(t *testing.T) {
	b := New(Options{})
	s, err := b.Subscribe(broker.SubscribeOptions{Patterns: []string{"a"}, Mode: broker.Fanout})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if !errors.Is(s.Err(), broker.ErrShuttingDown) {
		t.Fatalf("Err = %v", s.Err())
	}
	s.Close()
	if _, err := b.Publish("a", nil, nil); !errors.Is(err, broker.ErrShuttingDown) {
		t.Fatalf("Publish after Shutdown = %v", err)
	}
	if _, err := b.Subscribe(broker.SubscribeOptions{Patterns: []string{"a"}, Mode: broker.Fanout}); !errors.Is(err, broker.ErrShuttingDown) {
		t.Fatalf("Subscribe after Shutdown = %v", err)
	}
}

// A message routed to several targets is the same immutable *Message for each.
func TestSystemIDs(t *testing.T) {
	b := newTestBroker(t, Options{})
	s, _ := b.Subscribe(broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	defer s.Close()
	r, err := b.Publish("x", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := drainOne(t, s)
	id := b.FormatID(d.Msg.ID)
	if seq, err := b.ParseID(id); err != nil || seq != r.Seq {
		t.Fatalf("ParseID(%q) = %d, %v; want %d", id, seq, err, r.Seq)
	}
	other := New(Options{})
	defer other.Shutdown(context.Background())
	if _, err := other.ParseID(id); !errors.Is(err, broker.ErrUnknownMessage) {
		t.Fatalf("another broker process accepted id %q: %v", id, err)
	}
}

func BenchmarkPublishFanout4(b *testing.B) {
	br := newTestBroker(b, Options{FanoutBufferMessages: 1 << 30, FanoutBufferBytes: 1 << 40})
	var subs []*Subscription
	for range 4 {
		s, _ := br.Subscribe(broker.SubscribeOptions{Patterns: []string{"bench.w1"}, Mode: broker.Fanout})
		subs = append(subs, s)
	}
	benchmarkPublish(b, br, "bench.w1", subs, 256, func(*Subscription, []broker.Delivery) {})
}

func BenchmarkGroupDispatchAck(b *testing.B) {
	br := newTestBroker(b, Options{})
	var members []*Subscription
	for range 4 {
		s, err := br.Subscribe(broker.SubscribeOptions{ID: "w2", Group: "w2", Patterns: []string{"bench.w2"}, Mode: broker.Balanced, MaxInFlight: 256})
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, s)
	}
	ids := make([]string, 0, 256)
	benchmarkPublish(b, br, "bench.w2", members, 128, func(s *Subscription, ds []broker.Delivery) {
		ids = ids[:0]
		for _, d := range ds {
			ids = append(ids, br.FormatID(d.Msg.ID))
		}
		s.Ack(ids)
	})
}

// benchmarkPublish publishes a 256-byte message to topic per iteration and, every `every`
// publishes, takes up to 256 deliveries from each of subs and passes them to settle.
func benchmarkPublish(b *testing.B, br *Engine, topic string, subs []*Subscription, every int, settle func(*Subscription, []broker.Delivery)) {
	payload := make([]byte, 256)
	buf := make([]broker.Delivery, 0, 256)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := br.Publish(topic, payload, nil); err != nil {
			b.Fatal(err)
		}
		if i++; i%every == 0 {
			for _, s := range subs {
				buf = s.Next(buf[:0], 256, 1<<20)
				settle(s, buf)
			}
		}
	}
}

// BenchmarkPublishBatchIDs publishes PublishStream-sized frames (128 messages of 256 bytes)
// to 4 fanout subscribers, without message ids and with (a new id each: the table's cost
// on the publish path; and the same ids again: every message a duplicate).
func BenchmarkPublishBatchIDs(b *testing.B) {
	for _, mode := range []string{"none", "new", "duplicate"} {
		b.Run(mode, func(b *testing.B) {
			br := newTestBroker(b, Options{FanoutBufferMessages: 1 << 30, FanoutBufferBytes: 1 << 40})
			var subs []*Subscription
			for range 4 {
				s, _ := br.Subscribe(broker.SubscribeOptions{Patterns: []string{"bench.w1"}, Mode: broker.Fanout})
				subs = append(subs, s)
			}
			frame := make([]broker.Draft, 128)
			res, errs := make([]broker.PublishResult, len(frame)), make([]error, len(frame))
			buf := make([]broker.Delivery, 0, 1024)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for i := range frame {
					frame[i] = broker.Draft{Topic: "bench.w1", Payload: make([]byte, 256)}
					switch mode {
					case "new":
						n++
						frame[i].ID = msgid.Key("", strconv.Itoa(n))
					case "duplicate":
						frame[i].ID = msgid.Key("", strconv.Itoa(i))
					}
				}
				br.PublishBatch(frame, res, errs)
				for _, s := range subs {
					for buf = s.Next(buf[:0], 1024, 1<<30); len(buf) > 0; buf = s.Next(buf[:0], 1024, 1<<30) {
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(frame)), "ns/msg")
		})
	}
}
