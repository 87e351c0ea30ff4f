package wire

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/tinybroker/tinybroker/internal/grpcbuf"
)

// The server's codec passes the frames this package encodes (RawFrame) to gRPC as they are,
// decodes a PublishStream frame into a *PublishFrame, and passes every other message to the
// protobuf codec (grpcbuf.Codec).

// RawFrame is an already encoded SubscribeResponse or PublishStreamResponse, for a server
// stream's SendMsg with ServerCodec. b comes from grpcbuf.Pool when pooled is set, and goes
// back to it once gRPC has written it.
type RawFrame struct {
	b      []byte
	pooled *[]byte
}

// ServerCodec returns the server's codec, for grpc.ForceServerCodecV2. On the wire it is the
// standard protobuf codec ("proto").
func ServerCodec() encoding.CodecV2 { return codec{} }

type codec struct{ proto grpcbuf.Codec }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*RawFrame); ok {
		if f.pooled != nil {
			*f.pooled = f.b
			return mem.BufferSlice{mem.NewBuffer(f.pooled, grpcbuf.Pool)}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*PublishFrame); ok {
		return f.unmarshal(data)
	}
	return c.proto.Unmarshal(data, v)
}

func (codec) Name() string { return "proto" }
