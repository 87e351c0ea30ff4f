package server

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tinybroker/tinybroker/internal/grpcbuf"
	"github.com/tinybroker/tinybroker/internal/wire"
)

// PublishStream frames are decoded and their answers encoded by hand rather than through
// generated messages: decoding a frame of 128 messages made 128 PublishRequest structs, a
// string per topic and a result struct per answer, and walked them by reflection, which was
// most of the publish path's CPU and a large share of the allocations the GC then had to
// chase. publishFrame reads the wire format straight into what Broker.Publish takes, with
// the same checks the protobuf decoder makes (valid UTF-8 in string fields, well-formed
// lengths); FuzzPublishFrame holds it to proto.Unmarshal.

// Field numbers of the messages decoded and encoded here.
const (
	fieldFrameSequence   = 1 // PublishStreamRequest.sequence, PublishStreamResponse.sequence
	fieldFrameMessages   = 2 // PublishStreamRequest.messages
	fieldFrameErrorsOnly = 3 // PublishStreamRequest.errors_only
	fieldFrameResults    = 2 // PublishStreamResponse.results
	fieldPublishTopic    = 1 // PublishRequest.topic
	fieldPublishPayload  = 2
	fieldPublishHeaders  = 3
	fieldResultSystemID  = 1 // PublishResult
	fieldResultRouted    = 2
	fieldResultCode      = 3
	fieldResultError     = 4
)

// publishFrame is a decoded PublishStreamRequest. It is reused from frame to frame of one
// stream: msgs keeps its capacity, topics interns the stream's topics (publishers use few).
type publishFrame struct {
	seq        uint64
	errorsOnly bool
	msgs       []publishMsg
	topics     wire.Interner

	maxMsgs int  // the most messages a frame may carry (0: any number)
	tooMany bool // the frame carries more than maxMsgs: decoding stopped, the frame is refused
	size    int  // the frame's encoded size, which bounds the size of its answer
}

type publishMsg struct {
	topic   string
	payload []byte
	headers map[string]string
}

var errFrame = errors.New("malformed PublishStreamRequest")

// decode parses b into f. Payloads are copied: b is gRPC's buffer.
func (f *publishFrame) decode(b []byte) error {
	clear(f.msgs)
	f.seq, f.errorsOnly, f.msgs, f.tooMany, f.size = 0, false, f.msgs[:0], false, len(b)
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == fieldFrameSequence && typ == protowire.VarintType:
			f.seq, n = protowire.ConsumeVarint(b)
		case num == fieldFrameErrorsOnly && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			f.errorsOnly = v != 0
		case num == fieldFrameMessages && typ == protowire.BytesType:
			if f.maxMsgs > 0 && len(f.msgs) == f.maxMsgs {
				clear(f.msgs) // refused whole: decode no further
				f.msgs, f.tooMany = f.msgs[:0], true
				return nil
			}
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				m, err := f.decodeMessage(v)
				if err != nil {
					return err
				}
				f.msgs = append(f.msgs, m)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

func (f *publishFrame) decodeMessage(b []byte) (publishMsg, error) {
	var m publishMsg
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return m, fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		switch {
		case num == fieldPublishTopic && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if !utf8.Valid(v) {
					return m, fmt.Errorf("%w: topic is not valid UTF-8", errFrame)
				}
				m.topic = f.topics.String(v)
			}
		case num == fieldPublishPayload && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				m.payload = append(m.payload[:0], v...) // the last occurrence wins, as in protobuf
			}
		case num == fieldPublishHeaders && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				k, val, err := wire.MapEntry(v)
				if err != nil {
					return m, fmt.Errorf("%w: %v", errFrame, err)
				}
				if m.headers == nil {
					m.headers = make(map[string]string)
				}
				m.headers[string(k)] = string(val)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return m, fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return m, nil
}

// unmarshal decodes a frame as it arrived from gRPC, in one buffer or several.
func (f *publishFrame) unmarshal(data mem.BufferSlice) error {
	if len(data) == 1 {
		return f.decode(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(grpcbuf.Pool)
	defer buf.Free()
	return f.decode(buf.ReadOnlyData())
}

// answerBudget bounds the error text of one PublishStreamResponse: 64 KiB plus twice the
// frame's size. A frame of small invalid messages would otherwise be answered with a long
// error per message (a 2-byte empty message earns a 70-byte error); past the budget a failed
// message gets its code and omittedError. With at most max_publish_batch results of bounded
// size, an answer is then at most a constant plus a small multiple of its frame.
func answerBudget(frameSize int) int { return 64<<10 + 2*frameSize }

// omittedError is the error text of a failed message once its answer's budget is spent.
const omittedError = "error text omitted: see this frame's first errors"

// publishResult is the answer to one message of a frame.
type publishResult struct {
	systemID string
	routed   uint32
	code     uint32
	err      string
}

// encodePublishResponse encodes a PublishStreamResponse into a pooled frame.
func encodePublishResponse(seq uint64, results []publishResult) *rawFrame {
	size := func(r *publishResult) int {
		n := 0
		if r.systemID != "" {
			n += protowire.SizeTag(fieldResultSystemID) + protowire.SizeBytes(len(r.systemID))
		}
		if r.routed != 0 {
			n += protowire.SizeTag(fieldResultRouted) + protowire.SizeVarint(uint64(r.routed))
		}
		if r.code != 0 {
			n += protowire.SizeTag(fieldResultCode) + protowire.SizeVarint(uint64(r.code))
		}
		if r.err != "" {
			n += protowire.SizeTag(fieldResultError) + protowire.SizeBytes(len(r.err))
		}
		return n
	}
	total := 0
	if seq != 0 {
		total += protowire.SizeTag(fieldFrameSequence) + protowire.SizeVarint(seq)
	}
	for i := range results {
		total += protowire.SizeTag(fieldFrameResults) + protowire.SizeBytes(size(&results[i]))
	}
	buf := grpcbuf.Pool.Get(total)
	b := (*buf)[:0]
	if seq != 0 {
		b = protowire.AppendTag(b, fieldFrameSequence, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	for i := range results {
		r := &results[i]
		b = protowire.AppendTag(b, fieldFrameResults, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size(r)))
		if r.systemID != "" {
			b = protowire.AppendTag(b, fieldResultSystemID, protowire.BytesType)
			b = protowire.AppendString(b, r.systemID)
		}
		if r.routed != 0 {
			b = protowire.AppendTag(b, fieldResultRouted, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(r.routed))
		}
		if r.code != 0 {
			b = protowire.AppendTag(b, fieldResultCode, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(r.code))
		}
		if r.err != "" {
			b = protowire.AppendTag(b, fieldResultError, protowire.BytesType)
			b = protowire.AppendString(b, r.err)
		}
	}
	return &rawFrame{b: b, pooled: buf}
}
