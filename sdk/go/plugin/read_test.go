package plugin

import (
	"bytes"
	"testing"
	"unsafe"
)

// serve returns a reader that follows ABI v1's read convention for value (nil: absent), and
// counts its calls.
func serve(value []byte, calls *int) reader {
	return func(buf unsafe.Pointer, capacity uint32) int32 {
		*calls++
		if value == nil {
			return -1
		}
		copy(unsafe.Slice((*byte)(buf), capacity), value)
		return int32(len(value))
	}
}

func TestRead(t *testing.T) {
	defer func(s []byte) { scratch = s }(scratch)
	scratch = make([]byte, scratchMin)
	for _, tc := range []struct {
		size        int
		calls       int
		own         bool
		scratchSize int // after the read
	}{
		{0, 1, false, scratchMin},
		{100, 1, false, scratchMin},
		{scratchMin, 1, false, scratchMin},
		{scratchMin + 1, 2, false, 2 * scratchMin}, // the scratch buffer grows...
		{scratchMin + 1, 1, false, 2 * scratchMin}, // ...and stays grown
		{5000, 2, false, 8 * scratchMin},
		{scratchMax, 2, false, scratchMax},
		{scratchMax + 1, 2, true, scratchMax}, // a big value gets a buffer of its own
		{1 << 20, 2, true, scratchMax},
	} {
		value := bytes.Repeat([]byte{'x'}, tc.size)
		calls := 0
		b, own, ok := read(serve(value, &calls))
		if !ok || !bytes.Equal(b, value) || own != tc.own || calls != tc.calls || len(scratch) != tc.scratchSize {
			t.Errorf("size %d: got %d bytes, own %v, ok %v, %d calls, scratch %d; want own %v, %d calls, scratch %d",
				tc.size, len(b), own, ok, calls, len(scratch), tc.own, tc.calls, tc.scratchSize)
		}
	}

	calls := 0
	if b, _, ok := read(serve(nil, &calls)); ok || b != nil || calls != 1 {
		t.Errorf("absent value: %q, %v after %d calls", b, ok, calls)
	}
}

func TestReadCopies(t *testing.T) {
	calls := 0
	s, ok := readString(serve([]byte("orders.created"), &calls))
	p, _ := readBytes(serve([]byte("payload"), &calls))
	scratch[0] = '!' // the values must not alias the scratch buffer
	if !ok || s != "orders.created" || string(p) != "payload" {
		t.Errorf("readString, readBytes = %q, %q", s, p)
	}
	if p, ok := readBytes(serve([]byte{}, &calls)); p != nil || !ok {
		t.Errorf("empty value: %q, %v; want nil, true", p, ok)
	}
	big := bytes.Repeat([]byte{'y'}, scratchMax+10)
	if s, _ := readString(serve(big, &calls)); s != string(big) {
		t.Errorf("big readString: %d bytes", len(s))
	}
}

// A short value read again is returned without allocating; a different one is not confused
// with it.
func TestReadInterns(t *testing.T) {
	calls := 0
	acme, other := serve([]byte("acme"), &calls), serve([]byte("acmf"), &calls)
	if s, _ := readString(acme); s != "acme" {
		t.Fatalf("read %q", s)
	}
	if allocs := testing.AllocsPerRun(100, func() { readString(acme) }); allocs != 0 {
		t.Errorf("reading the same value again: %.1f allocations", allocs)
	}
	if s, _ := readString(other); s != "acmf" {
		t.Errorf("read %q after acme", s)
	}
	if s, _ := readString(serve([]byte{}, &calls)); s != "" {
		t.Errorf("read %q for an empty value", s)
	}
	long := bytes.Repeat([]byte("x"), internMax+1)
	if s, _ := readString(serve(long, &calls)); s != string(long) {
		t.Errorf("long value: %q", s)
	}
}
