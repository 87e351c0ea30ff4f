// Package grpcbuf holds the gRPC buffer pool and protobuf codec the server and the clients
// share.
package grpcbuf

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Pool is a mem.BufferPool with a tier for every power of two from 256 B to 16 MiB that
// hands out buffers without zeroing them. grpc's own pools clear a buffer's whole capacity on
// every Get, and its default tiers jump from 32 KiB to 1 MiB: for a fanout run that was 13%
// of the server's CPU before the tiers, and 8% after (BENCHMARKS.md). Every user of a pooled
// buffer here writes it before reading it: gRPC reads frames into it, the codec marshals or
// copies into it.
var Pool mem.BufferPool = newPool()

// HTTP/2 flow-control windows for the server and the Go clients. Setting them turns off
// gRPC's bandwidth-delay estimator, which otherwise answers data with PING frames to size the
// windows: on loopback that is a frame, a syscall and a wake-up per burst for nothing. The
// stream window holds several full message frames (the server's are at most 64 KiB).
const (
	StreamWindow = 1 << 20
	ConnWindow   = 8 << 20
)

const (
	minShift = 8  // 256 B
	maxShift = 24 // 16 MiB
)

type pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

func newPool() *pool { return &pool{} }

// tier returns the index of the smallest tier holding n bytes, or -1 past the largest.
func tier(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	s := bits.Len(uint(n - 1)) // 1<<s >= n
	if s > maxShift {
		return -1
	}
	return s - minShift
}

func (p *pool) Get(n int) *[]byte {
	t := tier(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+minShift))
	return &b
}

func (p *pool) Put(b *[]byte) {
	c := cap(*b)
	if t := tier(c); t >= 0 && c == 1<<(t+minShift) {
		p.tiers[t].Put(b)
	}
}

// Codec is the protobuf codec with Pool in place of grpc's default pool. Use it on both sides:
// grpc.ForceServerCodecV2 on a server (wrapped by wire.ServerCodec), and
// grpc.ForceCodecV2 as a default call option on a client.
type Codec struct{}

// Name is "proto": on the wire this is the standard protobuf codec.
func (Codec) Name() string { return "proto" }

// Marshal encodes v into a pooled buffer (small messages into a plain slice).
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcbuf: cannot marshal %T: not a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // safe: Size just ran
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := Pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		Pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, Pool)}, nil
}

// Unmarshal decodes data into v. A message that arrived in one buffer is decoded in place;
// one in several is first copied into a pooled buffer. Protobuf copies what it keeps.
//
// A v with a SetBuffers method (wire.Frame) takes the bytes as they are, for a decoder of its
// own.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(interface{ SetBuffers(mem.BufferSlice) }); ok {
		r.SetBuffers(data)
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("grpcbuf: cannot unmarshal into %T: not a proto.Message", v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	buf := data.MaterializeToBuffer(Pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
