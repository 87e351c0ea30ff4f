package wire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/internal/grpcbuf"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// The server's codec passes the frames this package encodes (RawFrame) to gRPC as they are,
// decodes a PublishStream frame into a *PublishFrame, a unary Publish with more headers than
// the broker keeps by hand (decodeCappedPublish), and passes every other message to the
// protobuf codec (grpcbuf.Codec).

// RawFrame is an already encoded SubscribeResponse or PublishStreamResponse, for a server
// stream's SendMsg with ServerCodec. b comes from grpcbuf.Pool when pooled is set, and goes
// back to it once gRPC has written it.
type RawFrame struct {
	b      []byte
	pooled *[]byte
}

// ServerCodec returns the server's codec, for grpc.ForceServerCodecV2. On the wire it is the
// standard protobuf codec ("proto"). maxHeaders is the broker's max_headers (0: no bound):
// a unary Publish's headers are decoded up to the first past it, as PublishFrame's are.
func ServerCodec(maxHeaders int) encoding.CodecV2 { return codec{maxHeaders: maxHeaders} }

type codec struct {
	proto      grpcbuf.Codec
	maxHeaders int
}

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
	switch m := v.(type) {
	case *PublishFrame:
		return m.unmarshal(data)
	case *pb.PublishRequest:
		if c.maxHeaders > 0 {
			return c.unmarshalPublish(data, m)
		}
	}
	return c.proto.Unmarshal(data, v)
}

func (codec) Name() string { return "proto" }

// unmarshalPublish decodes a unary Publish: by proto.Unmarshal, unless it carries more than
// max_headers header entries.
func (c codec) unmarshalPublish(data mem.BufferSlice, m *pb.PublishRequest) error {
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(grpcbuf.Pool)
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	if countHeaders(b) > c.maxHeaders {
		return decodeCappedPublish(b, m, c.maxHeaders)
	}
	return proto.Unmarshal(b, m) // copies what it keeps: b may go back to the pool
}

// countHeaders returns how many header entries an encoded PublishRequest carries (names
// given twice count twice), walking its fields without decoding them; 0 if it is malformed
// (proto.Unmarshal then says how).
func countHeaders(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, l := consumeTag(b)
		if l < 0 {
			return 0
		}
		b = b[l:]
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return 0
		}
		if num == fieldPublishHeaders && typ == protowire.BytesType {
			n++
		}
		b = b[l:]
	}
	return n
}

// decodeCappedPublish decodes a PublishRequest of more than max header entries into m as
// proto.Unmarshal would, except that once it has max+1 distinct names it skips the other
// headers: the broker refuses the message (broker.TooManyHeaders), and decoding tens of
// thousands of headers into a map first cost milliseconds per request (issue 23).
func decodeCappedPublish(b []byte, m *pb.PublishRequest, max int) error {
	m.Reset()
	m.Headers = make(map[string]string, max+1)
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		switch {
		case num == fieldPublishTopic && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if !utf8.Valid(v) {
					return fmt.Errorf("%w: topic is not valid UTF-8", ErrMalformed)
				}
				m.Topic = string(v)
			}
		case num == fieldPublishPayload && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				m.Payload = append(m.Payload[:0], v...)
			}
		case num == fieldPublishHeaders && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 && len(m.Headers) <= max {
				k, val, err := mapEntry(v)
				if err != nil {
					return err
				}
				m.Headers[string(k)] = string(val)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}
