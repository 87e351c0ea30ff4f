package plugin

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// These tests run the batch loop natively, on an inbox laid out as docs/ABI.md's "Batches"
// says, with handlers that make no host call (natively there is no host): what the broker
// would read back is checked in the inbox and the write lists.

type testMsg struct {
	topic   string
	payload string
	headers [][2]string // sorted by name, as the broker writes them
}

var le = binary.LittleEndian

// putRecord writes m into rec as a single call's inbox, offsets from rec's start, and
// returns its length.
func putRecord(rec []byte, m testMsg) int {
	le.PutUint32(rec[abi.InHook:], uint32(abi.HookPublish))
	le.PutUint32(rec[abi.InMaxMessage:], 1<<20)
	le.PutUint32(rec[abi.InMaxHeader:], 4096)
	pos := abi.InHeaders + abi.InEntry*len(m.headers)
	put := func(at int, s string) {
		le.PutUint32(rec[at:], uint32(pos))
		le.PutUint32(rec[at+4:], uint32(len(s)))
		pos += copy(rec[pos:], s)
	}
	put(abi.InTopic, m.topic)
	put(abi.InPayload, m.payload)
	le.PutUint32(rec[abi.InID+4:], abi.AbsentLen)
	le.PutUint32(rec[abi.InHeaderCount:], uint32(len(m.headers)))
	for i, h := range m.headers {
		put(abi.InHeaders+abi.InEntry*i, h[0])
		put(abi.InHeaders+abi.InEntry*i+8, h[1])
	}
	return pos
}

// newBatch makes an inbox (8-byte aligned, as tb_v1_inbox gives it) holding msgs as a batch,
// makes it the SDK's, and returns it; the SDK's inbox and write list are restored after t.
func newBatch(t testing.TB, msgs []testMsg) []byte {
	t.Helper()
	oldInbox, oldBox := inbox, box
	t.Cleanup(func() { inbox, box = oldInbox, oldBox; beginWrites() })
	words := make([]uint64, 8192)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	le.PutUint32(b[abi.BatchCount:], uint32(len(msgs)))
	pos := (abi.BatchEntries + abi.BatchEntry*len(msgs) + 7) &^ 7
	for i, m := range msgs {
		n := putRecord(b[pos:], m)
		e := b[abi.BatchEntries+abi.BatchEntry*i:]
		le.PutUint32(e[abi.EntryOffset:], uint32(pos))
		le.PutUint32(e[abi.EntryLength:], uint32(n))
		pos = (pos + n + 7) &^ 7
	}
	inbox, box = b, b
	return b
}

func entry(b []byte, i int) []byte { return b[abi.BatchEntries+abi.BatchEntry*i:][:abi.BatchEntry] }

func record(b []byte, i int) []byte {
	e := entry(b, i)
	at := le.Uint32(e[abi.EntryOffset:])
	return b[at : at+le.Uint32(e[abi.EntryLength:])]
}

// writeAddr is the address the SDK gives the broker for writes[k] (natively, truncated to 32
// bits like every address the SDK writes into the inbox).
func writeAddr(k int) uint32 { return uint32(uintptr(unsafe.Pointer(&writes[k]))) }

// listOf returns the write list of record rec as indexes into writes and the values kept
// for them, which are the strings the records point to, checking that the list is a part
// of writes.
func listOf(t *testing.T, rec []byte) []string {
	t.Helper()
	ptr, n := le.Uint32(rec[abi.InWritesPtr:]), int(le.Uint32(rec[abi.InWritesCount:]))
	if n == 0 {
		return nil
	}
	for k := range len(writes) - n + 1 {
		if writeAddr(k) != ptr {
			continue
		}
		var out []string
		for j := k; j < k+n; j++ {
			w := writes[j]
			a, b := kept[2*j], kept[2*j+1]
			if w[1] != addrOf(a) || int(w[2]) != len(a) || w[3] != addrOf(b) || int(w[4]) != len(b) {
				t.Fatalf("write %d does not point at its values %q, %q", j, a, b)
			}
			out = append(out, fmt.Sprintf("%d %s=%s", w[0], a, b))
		}
		return out
	}
	t.Fatalf("a write list at %#x (%d records) is not in the SDK's write list", ptr, n)
	return nil
}

func TestPublishBatch(t *testing.T) {
	msgs := []testMsg{
		{"a.pass", "p0", [][2]string{{"tenant", "acme"}}},
		{"a.drop", "p1", nil},
		{"a.headers", "p2", [][2]string{{"keep", "1"}, {"removed", "x"}, {"tenant", "globex"}}},
		{"a.payload", "p3", [][2]string{{"a", "1"}, {"b", "2"}}},
		{"a.many", "p4", nil},
	}
	b := newBatch(t, msgs)
	writes, kept = nil, nil // from no capacity: a.many's writes move the list to larger arrays
	var prev *Message
	var seen []string
	n := runPublishBatch(func(m *Message) Verdict {
		i := int(le.Uint32(b[abi.BatchCurrent:]))
		want := msgs[i]
		if m.Topic() != want.topic || string(m.Payload()) != want.payload {
			t.Errorf("current %d: the message is %s %q, want %s %q", i, m.Topic(), m.Payload(), want.topic, want.payload)
		}
		var hs [][2]string
		for k, v := range m.Headers() {
			hs = append(hs, [2]string{k, v})
		}
		slices.SortFunc(hs, func(x, y [2]string) int { return cmpStr(x[0], y[0]) })
		if !slices.Equal(hs, want.headers) {
			t.Errorf("%s: headers %v, want %v", want.topic, hs, want.headers)
		}
		if v, ok := m.Header("tenant"); ok != (want.topic == "a.pass" || want.topic == "a.headers") || (ok && v != want.headers[len(want.headers)-1][1]) {
			t.Errorf("%s: header tenant = %q, %v", want.topic, v, ok)
		}
		prev = m
		seen = append(seen, m.Topic())
		switch want.topic {
		case "a.drop":
			return Drop("dropped " + want.payload)
		case "a.headers":
			m.SetHeader("added", "1")
			m.DelHeader("removed")
			if v, ok := m.Header("removed"); ok || v != "" {
				t.Errorf("a deleted header reads %q, %v", v, ok)
			}
		case "a.payload":
			m.SetPayload([]byte("new " + want.payload))
			return Reject(PermissionDenied, "no")
		case "a.many":
			for k := range 20 {
				m.SetHeader(fmt.Sprint("h", k), "v")
			}
		}
		return Pass()
	})
	if n != 0 {
		t.Fatalf("the batch returned %d, want 0", n)
	}
	if !slices.Equal(seen, []string{"a.pass", "a.drop", "a.headers", "a.payload", "a.many"}) {
		t.Fatalf("messages run: %v", seen)
	}
	if call.hook != abi.HookNone || &inbox[0] != &box[0] || len(inbox) != len(box) || from != 0 {
		t.Error("after the batch, the SDK is not between calls on the whole inbox")
	}
	if !panics(func() { prev.Topic() }) {
		t.Error("a Message works after the batch returned")
	}
	verdicts := []int64{0, 1, 0, 2 | 7<<32, 0}
	many := make([]string, 20)
	for k := range many {
		many[k] = fmt.Sprintf("2 h%d=v", k)
	}
	lists := [][]string{
		nil,
		{"4 dropped p1="},
		{"2 added=1", "3 removed="},
		{"1 new p3=", "4 no="},
		many,
	}
	for i := range msgs {
		if v := int64(le.Uint64(entry(b, i)[abi.EntryVerdict:])); v != verdicts[i] {
			t.Errorf("%s: verdict %#x, want %#x", msgs[i].topic, v, verdicts[i])
		}
		if got := listOf(t, record(b, i)); !slices.Equal(got, lists[i]) {
			t.Errorf("%s: write list %q, want %q", msgs[i].topic, got, lists[i])
		}
	}
	if got, want := le.Uint32(b[abi.BatchCurrent:]), uint32(len(msgs)-1); got != want {
		t.Errorf("current = %d after the batch, want %d", got, want)
	}

	// The next call, of one message, has the inbox and a write list of its own.
	putRecord(b, testMsg{"single", "p", [][2]string{{"tenant", "acme"}}})
	le.PutUint64(b[abi.InWritesPtr:], 0)
	runPublish(func(m *Message) Verdict {
		if v, _ := m.Header("tenant"); m.Topic() != "single" || v != "acme" {
			t.Errorf("after a batch, the call reads %s, tenant %q", m.Topic(), v)
		}
		m.SetHeader("x", "y")
		return Pass()
	})
	if got := listOf(t, b); !slices.Equal(got, []string{"2 x=y"}) || len(writes) != 1 {
		t.Errorf("after a batch, a call's write list is %q (%d records)", got, len(writes))
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func panics(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}

// A batch the SDK cannot read is declined before any message is run: the broker then calls
// tb_v1_on_publish on each.
func TestPublishBatchDeclined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(b []byte)
	}{
		{"count past the inbox", func(b []byte) { le.PutUint32(b[abi.BatchCount:], 1<<20) }},
		{"record past the inbox", func(b []byte) { le.PutUint32(entry(b, 1)[abi.EntryLength:], uint32(len(b))) }},
		{"record too short", func(b []byte) { le.PutUint32(entry(b, 1)[abi.EntryLength:], abi.InHeaders-1) }},
		{"record not aligned", func(b []byte) { le.PutUint32(entry(b, 1)[abi.EntryOffset:], 4) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBatch(t, []testMsg{{"a", "", nil}, {"b", "", nil}})
			tc.spoil(b)
			runs := 0
			if rc := runPublishBatch(func(*Message) Verdict { runs++; return Pass() }); rc == 0 || runs != 0 {
				t.Errorf("returned %d after running %d messages; want it declined, none run", rc, runs)
			}
		})
	}
	t.Run("no inbox", func(t *testing.T) {
		defer func(i, b []byte) { inbox, box = i, b }(inbox, box)
		inbox, box = nil, nil
		if rc := runPublishBatch(func(*Message) Verdict { return Pass() }); rc == 0 {
			t.Error("a batch without an inbox was not declined")
		}
	})
}

// The loop over a batch's messages allocates nothing once warm: its cost is the plugin's.
func TestPublishBatchAllocs(t *testing.T) {
	msgs := make([]testMsg, 64)
	for i := range msgs {
		msgs[i] = testMsg{"bench.w1", "payload", [][2]string{{"tenant", []string{"acme", "blocked"}[i%2]}}}
	}
	newBatch(t, msgs)
	filter := func(m *Message) Verdict {
		if t, _ := m.Header("tenant"); t == "blocked" {
			return Drop("blocked tenant")
		}
		m.SetHeader("x-w4", "1")
		return Pass()
	}
	runPublishBatch(filter)
	if a := testing.AllocsPerRun(20, func() { runPublishBatch(filter) }); a != 0 {
		t.Errorf("a batch of %d messages allocates %v times", len(msgs), a)
	}
}

// A batch whose write list does not move to a larger array (it has the capacity from an
// earlier batch) leaves each record pointing at its own part of it, set when its message was
// done; and a Message that a message left changes in is reset for the next.
func TestPublishBatchWritesInPlace(t *testing.T) {
	msgs := []testMsg{
		{"a", "", [][2]string{{"tenant", "acme"}}},
		{"b", "", nil},
		{"c", "", [][2]string{{"tenant", "globex"}}},
	}
	b := newBatch(t, msgs)
	h := func(m *Message) Verdict {
		if v, ok := m.Header("x"); ok {
			t.Errorf("%s: a change of the message before shows: x = %q", m.Topic(), v)
		}
		if m.Topic() != "b" {
			m.SetHeader("x", m.Topic())
		}
		return Pass()
	}
	runPublishBatch(h) // writes gets its capacity
	for i := range msgs {
		le.PutUint64(record(b, i)[abi.InWritesPtr:], 0) // as the broker zeroes them
	}
	array := unsafe.SliceData(writes)
	if rc := runPublishBatch(h); rc != 0 {
		t.Fatalf("the batch returned %d", rc)
	}
	if unsafe.SliceData(writes) != array {
		t.Fatal("the write list moved: this test needs it not to")
	}
	for i, want := range [][]string{{"2 x=a"}, nil, {"2 x=c"}} {
		if got := listOf(t, record(b, i)); !slices.Equal(got, want) {
			t.Errorf("%s: write list %q, want %q", msgs[i].topic, got, want)
		}
	}
}

// sameBytes agrees with == for every length up to past two words, with a difference at
// every position.
func TestSameBytes(t *testing.T) {
	for n := range 40 {
		a := make([]byte, n)
		for i := range a {
			a[i] = byte('a' + i)
		}
		p := unsafe.Pointer(unsafe.SliceData(a))
		if b := slices.Clone(a); !sameBytes(p, unsafe.Pointer(unsafe.SliceData(b)), uintptr(n)) {
			t.Errorf("%d equal bytes: not the same", n)
		}
		for i := range n {
			b := slices.Clone(a)
			b[i] ^= 0x20
			if sameBytes(p, unsafe.Pointer(unsafe.SliceData(b)), uintptr(n)) {
				t.Errorf("%d bytes differing at %d: the same", n, i)
			}
		}
	}
}
