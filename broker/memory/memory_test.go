package memory

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// headersLike builds n headers the way the server's decoder does: every key and value its
// own allocation.
func headersLike(n int) map[string]string {
	h := make(map[string]string)
	for i := range n {
		k := strings.Clone(fmt.Sprintf("k%05d", i))
		h[k] = strings.Clone("v")
	}
	return h
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// What the budget charges for a message covers what holding it really costs, within a
// small margin, for payload-heavy and header-heavy messages alike (header-heavy ones once
// cost 28 times what was counted).
func TestMessageCostCoversHeap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload int
		headers int
	}{{"payload", 64 << 10, 0}, {"headers", 16, 2000}, {"small", 16, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBroker(t, Options{Limits: broker.Limits{MaxHeaderBytes: 1 << 20, MaxHeaders: 1 << 20}})
			if _, err := b.Subscribe(broker.SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"t"}, Mode: broker.Balanced}); err != nil {
				t.Fatal(err)
			}
			// Each message is queued in the group (one in flight to the member that never acks).
			const n = 200
			msgs := make([]struct {
				p []byte
				h map[string]string
			}, n)
			before := liveHeap()
			for i := range msgs {
				msgs[i].p = make([]byte, tc.payload)
				msgs[i].h = headersLike(tc.headers)
			}
			for i := range msgs {
				if _, err := b.Publish("t", msgs[i].p, msgs[i].h); err != nil {
					t.Fatal(err)
				}
			}
			msgs = nil
			real := int64(liveHeap() - before)
			counted := b.MemoryUsed()
			t.Logf("%d messages: real %d bytes, counted %d (%.2f)", n, real, counted, float64(counted)/float64(real))
			if counted < real*9/10 {
				t.Fatalf("counted %d bytes for messages that take %d: under-counted", counted, real)
			}
			if counted > real*3 {
				t.Fatalf("counted %d bytes for messages that take %d: over-counted more than 3x", counted, real)
			}
			runtime.KeepAlive(msgs)
		})
	}
}

// A group's byte bound refuses publishes once the group holds that much, counting headers;
// the refusal names the group and the setting.
func TestGroupByteBound(t *testing.T) {
	b := newTestBroker(t, Options{Limits: broker.Limits{GroupMaxQueuedBytes: 1 << 20}})
	g, err := b.Subscribe(broker.SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"t"}, Mode: broker.Balanced})
	if err != nil {
		t.Fatal(err)
	}
	g.Close() // no members: everything queues
	accepted := 0
	h := headersLike(1000) // ~7 KB of header bytes, ~100 KB of real memory
	for i := range 100 {
		_, err := b.Publish("t", []byte(strconv.Itoa(i)), h)
		if err != nil {
			if !errors.Is(err, broker.ErrGroupFull) || !strings.Contains(err.Error(), "max_queued_bytes") || !strings.Contains(err.Error(), `"g"`) {
				t.Fatalf("refusal %v: want broker.ErrGroupFull naming group \"g\" and max_queued_bytes", err)
			}
			break
		}
		accepted++
	}
	if accepted < 5 || accepted > 12 {
		t.Fatalf("accepted %d header-heavy messages under a 1 MiB group bound, want about 9", accepted)
	}
	st := b.Stats().Groups[0]
	if st.Bytes > 1<<20 || st.Rejected != 1 || st.Queued != accepted {
		t.Fatalf("stats %+v", st)
	}
}

// Consumer groups together stay within 3/4 of the broker's budget, however many there are;
// a fanout subscriber that keeps up still gets every message.
func TestGroupsShareOfBudget(t *testing.T) {
	b := newTestBroker(t, Options{MaxMemoryBytes: 4 << 20, Limits: broker.Limits{GroupMaxQueuedBytes: 4 << 20}})
	for i := range 100 {
		id := "g" + strconv.Itoa(i)
		s, err := b.Subscribe(broker.SubscribeOptions{ID: id, Group: id, Patterns: []string{"t"}, Mode: broker.Balanced})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	fan, err := b.Subscribe(broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	if err != nil {
		t.Fatal(err)
	}
	full := false
	for i := range 2000 {
		r, err := b.Publish("t", make([]byte, 1024), nil)
		if err != nil {
			t.Fatalf("publish %d: %v (the fanout subscriber should still take it)", i, err)
		}
		if r.Routed == 1 {
			full = true
		}
		drainOne(t, fan) // a subscriber that keeps up
		if used := b.MemoryUsed(); used > 3<<20+64<<10 {
			t.Fatalf("after %d publishes the broker holds %d bytes; groups may use 3 MiB", i, used)
		}
	}
	if !full {
		t.Fatal("the groups never filled")
	}
	var rejected uint64
	for _, g := range b.Stats().Groups {
		rejected += g.Rejected
	}
	if rejected == 0 {
		t.Fatal("no rejection counted")
	}
}

// A fanout subscriber's buffer counts what its messages cost, headers included.
func TestFanoutBufferCountsHeaders(t *testing.T) {
	b := newTestBroker(t, Options{FanoutBufferBytes: 1 << 20, PublisherWait: -1})
	s, err := b.Subscribe(broker.SubscribeOptions{Patterns: []string{"t"}, Mode: broker.Fanout})
	if err != nil {
		t.Fatal(err)
	}
	h := headersLike(1000)
	n := 0
	for ; n < 100; n++ {
		if _, err := b.Publish("t", nil, h); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Done():
		default:
			continue
		}
		break
	}
	if !errors.Is(s.Err(), broker.ErrSlowConsumer) || n > 12 {
		t.Fatalf("after %d header-heavy messages: %v; want a slow consumer after about 9", n, s.Err())
	}
	s.Close()
	if used := b.MemoryUsed(); used != 0 {
		t.Fatalf("the ended stream still holds %d bytes", used)
	}
}

// Everything charged is given back: after messages are acked, dropped, dead-lettered (and
// their kept copies purged), nacked and taken by fanout subscribers, the budget is back to
// zero.
func TestBudgetReturnsToZero(t *testing.T) {
	b := newTestBroker(t, Options{Limits: broker.Limits{GroupMaxQueued: 5, GroupOverflow: broker.OverflowDropOldest, GroupRedeliveryDelayMin: -1}})
	fan, _ := b.Subscribe(broker.SubscribeOptions{Patterns: []string{">"}, Mode: broker.Fanout})
	m, err := b.Subscribe(broker.SubscribeOptions{ID: "g", Group: "g", Patterns: []string{"t.>"}, Mode: broker.Balanced, MaxInFlight: 2, MaxDeliveries: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := b.Publish("t."+strconv.Itoa(i%3), []byte("x"), map[string]string{"a": "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for b.Stats().Groups[0].Queued+b.Stats().Groups[0].InFlight > 0 {
		d := drainOne(t, m)
		if d.Msg.ID%2 == 0 {
			m.Ack([]string{d.Msg.SystemID})
		} else {
			m.Nack([]string{d.Msg.SystemID}, 0, "") // twice: dead-lettered to dlq.g
		}
	}
	for len(fan.Next(nil, 100, 1<<30)) > 0 {
	}
	m.Close()
	fan.Close()
	if n, err := b.PurgeDeadLetters("g", nil); n == 0 || err != nil { // the group keeps its dead letters until purged
		t.Fatalf("PurgeDeadLetters: %d, %v; want some", n, err)
	}
	if used := b.MemoryUsed(); used != 0 {
		t.Fatalf("budget used %d after everything was settled, want 0", used)
	}
}

// A message may have at most max_headers headers, however small: each costs the broker a
// map entry and an encoded field per subscriber.
func TestMaxHeaders(t *testing.T) {
	b := newTestBroker(t, Options{Limits: broker.Limits{MaxHeaders: 10}})
	if _, err := b.Publish("t", nil, headersLike(10)); err != nil {
		t.Fatal(err)
	}
	_, err := b.Publish("t", nil, headersLike(11))
	if !errors.Is(err, broker.ErrInvalidMessage) || !strings.Contains(err.Error(), "max_headers") {
		t.Fatalf("11 headers: %v; want broker.ErrInvalidMessage naming max_headers", err)
	}
}

// An id has one spelling: the bits past the block in its last character must be zero.
func TestSystemIDOneSpelling(t *testing.T) {
	b := newTestBroker(t, Options{})
	for seq := uint64(1); seq < 200; seq++ {
		id := b.FormatID(seq)
		if got, err := b.ParseID(id); err != nil || got != seq {
			t.Fatalf("ParseID(%q) = %d, %v", id, got, err)
		}
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		top := strings.IndexByte(alphabet, id[21]) &^ 15 // the 2 bits of the block it carries
		for k := range 16 {
			alt := id[:21] + string(alphabet[top|k])
			if alt == id {
				continue
			}
			if got, err := b.ParseID(alt); err == nil {
				t.Fatalf("ParseID(%q), another spelling of %q, = %d", alt, id, got)
			}
		}
	}
}
