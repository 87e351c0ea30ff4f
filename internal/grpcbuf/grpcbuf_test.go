package grpcbuf

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestPoolSizes(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 40_000, 1 << 24, 1<<24 + 1} {
		b := Pool.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) has length %d", n, len(*b))
		}
		if c := cap(*b); n <= 1<<maxShift && (c < n || c > 2*n && c > 1<<minShift) {
			t.Fatalf("Get(%d) has capacity %d, want the next power of two", n, c)
		}
		Pool.Put(b)
	}
	b := Pool.Get(1000)
	*b = (*b)[:10] // a prefix goes back to its tier
	Pool.Put(b)
	if c := cap(*Pool.Get(1024)); c != 1024 {
		t.Fatalf("capacity %d, want 1024", c)
	}
}

// The codec round-trips messages whether they arrive in one buffer or several.
func TestCodecRoundTrip(t *testing.T) {
	for _, size := range []int{10, 100_000} {
		in := wrapperspb.Bytes(make([]byte, size))
		for i := range in.Value {
			in.Value[i] = byte(i)
		}
		data, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		whole := data.Materialize()
		data.Free()
		var split mem.BufferSlice // as frames arrive: 16 KiB pieces
		for len(whole) > 0 {
			n := min(16<<10, len(whole))
			split = append(split, mem.SliceBuffer(whole[:n]))
			whole = whole[n:]
		}
		out := &wrapperspb.BytesValue{}
		if err := (Codec{}).Unmarshal(split, out); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(in, out) {
			t.Fatalf("size %d: round trip differs", size)
		}
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil {
		t.Fatal("marshalled a string")
	}
}
