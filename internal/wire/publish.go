package wire

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/grpcbuf"
)

// PublishStream frames are decoded and their answers encoded by hand rather than through
// generated messages: decoding a frame of 128 messages made 128 PublishRequest structs, a
// string per topic and a result struct per answer, and walked them by reflection, which was
// most of the publish path's CPU and a large share of the allocations the GC then had to
// chase. PublishFrame reads the wire format straight into what Broker.Publish takes, with
// the same checks the protobuf decoder makes (valid UTF-8 in string fields, well-formed
// lengths); FuzzPublishFrame holds it to proto.Unmarshal.

// PublishFrame is a decoded PublishStreamRequest; pass a *PublishFrame to a stream's RecvMsg
// with ServerCodec. It is reused from frame to frame of one stream: Msgs keeps its capacity,
// topics interns the stream's topics (publishers use few).
type PublishFrame struct {
	Seq        uint64
	ErrorsOnly bool
	Msgs       []PublishMessage
	topics     interner

	MaxMsgs int  // the most messages a frame may carry (0: any number)
	TooMany bool // the frame carries more than MaxMsgs: decoding stopped, the frame is refused
	Size    int  // the frame's encoded size, which bounds the size of its answer

	// MaxHeaders is the broker's max_headers (0: any number). A message's headers are
	// decoded up to the first past it (MaxHeaders+1 distinct names), the rest skipped, and
	// HeadersOver set: the server refuses the message (broker.TooManyHeaders) without the
	// cost of decoding, interning and sorting tens of thousands of headers it would never
	// keep (issue 23).
	MaxHeaders  int
	HeadersOver bool

	// IDs is set when a message of the frame has a message_id (as given: the server makes
	// it a dedupe key, msgid.Key).
	IDs bool
}

// PublishMessage is one PublishRequest of a frame, as Engine.PublishBatch takes it.
type PublishMessage = broker.Draft

var errFrame = errors.New("malformed PublishStreamRequest")

// decode parses b into f. Payloads are copied: b is gRPC's buffer.
func (f *PublishFrame) decode(b []byte) error {
	clear(f.Msgs)
	f.Seq, f.ErrorsOnly, f.Msgs, f.TooMany, f.HeadersOver, f.IDs, f.Size = 0, false, f.Msgs[:0], false, false, false, len(b)
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == fieldStreamRequestSequence && typ == protowire.VarintType:
			f.Seq, n = protowire.ConsumeVarint(b)
		case num == fieldStreamRequestErrorsOnly && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			f.ErrorsOnly = v != 0
		case num == fieldStreamRequestMessages && typ == protowire.BytesType:
			if f.MaxMsgs > 0 && len(f.Msgs) == f.MaxMsgs {
				clear(f.Msgs) // refused whole: decode no further
				f.Msgs, f.TooMany = f.Msgs[:0], true
				return nil
			}
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				m, err := f.decodeMessage(v)
				if err != nil {
					return err
				}
				f.Msgs = append(f.Msgs, m)
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

func (f *PublishFrame) decodeMessage(b []byte) (PublishMessage, error) {
	var m PublishMessage
	var hs headerSet
	var ttl, after *durationpb.Duration // merged over the field's occurrences, as protobuf does
	var at *timestamppb.Timestamp
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
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
				m.Topic = f.topics.String(v)
			}
		case num == fieldPublishPayload && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				m.Payload = append(m.Payload[:0], v...) // the last occurrence wins, as in protobuf
			}
		case num == fieldPublishHeaders && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 && !hs.over {
				k, val, err := mapEntry(v)
				if err != nil {
					return m, fmt.Errorf("%w: %v", errFrame, err)
				}
				hs.add(&m.Headers, f.topics.String(k), string(val), f.MaxHeaders) // names repeat: interned
			}
		case num == fieldPublishID && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if !utf8.Valid(v) {
					return m, fmt.Errorf("%w: message_id is not valid UTF-8", errFrame)
				}
				m.ID = string(v)
				f.IDs = f.IDs || m.ID != ""
			}
		case num == fieldPublishKey && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if !utf8.Valid(v) {
					return m, fmt.Errorf("%w: key is not valid UTF-8", errFrame)
				}
				m.Key = string(v) // not interned: keys are many (an order id each), topics few
			}
		case num == fieldPublishPrio && typ == protowire.VarintType:
			var x uint64
			if x, n = protowire.ConsumeVarint(b); n >= 0 {
				m.Priority = uint8(min(uint64(uint32(x)), 255)) // over 9 is refused (publishing.Gate), never wrapped into range
			}
		case num == fieldPublishTTL && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if err := mergeDuration(v, &ttl); err != nil {
					return m, err
				}
			}
		case num == fieldPublishAfter && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if err := mergeDuration(v, &after); err != nil {
					return m, err
				}
			}
		case num == fieldPublishAt && typ == protowire.BytesType:
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if at == nil {
					at = new(timestamppb.Timestamp)
				}
				if err := decodeSecondsNanos(v, &at.Seconds, &at.Nanos); err != nil {
					return m, err
				}
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return m, fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if !hs.sorted {
		m.Headers = m.Headers.Sorted() // a name given twice keeps its last value, as in a protobuf map
	}
	if ttl != nil {
		m.TTL = TTL(ttl)
	}
	if after != nil || at != nil {
		m.DeliverAfter, m.DeliverAt = Delay(after, at)
	}
	f.HeadersOver = f.HeadersOver || hs.over
	return m, nil
}

// headerSet gathers a message's headers as they are decoded, counting distinct names (a
// protobuf map keeps the last value of a name given twice) up to max+1.
type headerSet struct {
	sorted bool // past max entries: h is sorted, each name once, and kept so
	over   bool // more than max names: the message is to be refused, h holds max+1
}

func (s *headerSet) add(h *broker.Headers, k, v string, max int) {
	if s.sorted {
		*h = h.Set(k, v)
	} else if *h = append(*h, broker.Header{Key: k, Value: v}); max > 0 && len(*h) > max {
		// Names given twice are rare: sorted once here, then each further one costs a
		// binary search, however many follow.
		*h, s.sorted = (*h).Sorted(), true
	}
	s.over = s.sorted && len(*h) > max
}

// unmarshal decodes a frame as it arrived from gRPC, in one buffer or several.
func (f *PublishFrame) unmarshal(data mem.BufferSlice) error {
	if len(data) == 1 {
		return f.decode(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(grpcbuf.Pool)
	defer buf.Free()
	return f.decode(buf.ReadOnlyData())
}

// PublishResult is the answer to one message of a frame.
type PublishResult struct {
	SystemID  string
	Routed    uint32
	Code      uint32
	Err       string
	Duplicate bool
}

// EncodePublishResponse encodes a PublishStreamResponse into a pooled frame.
func EncodePublishResponse(seq uint64, results []PublishResult) *RawFrame {
	size := func(r *PublishResult) int {
		n := 0
		if r.SystemID != "" {
			n += protowire.SizeTag(fieldResultSystemID) + protowire.SizeBytes(len(r.SystemID))
		}
		if r.Routed != 0 {
			n += protowire.SizeTag(fieldResultRouted) + protowire.SizeVarint(uint64(r.Routed))
		}
		if r.Code != 0 {
			n += protowire.SizeTag(fieldResultCode) + protowire.SizeVarint(uint64(r.Code))
		}
		if r.Err != "" {
			n += protowire.SizeTag(fieldResultError) + protowire.SizeBytes(len(r.Err))
		}
		if r.Duplicate {
			n += protowire.SizeTag(fieldResultDup) + 1
		}
		return n
	}
	total := 0
	if seq != 0 {
		total += protowire.SizeTag(fieldStreamResponseSequence) + protowire.SizeVarint(seq)
	}
	for i := range results {
		total += protowire.SizeTag(fieldStreamResponseResults) + protowire.SizeBytes(size(&results[i]))
	}
	buf := grpcbuf.Pool.Get(total)
	b := (*buf)[:0]
	if seq != 0 {
		b = protowire.AppendTag(b, fieldStreamResponseSequence, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	for i := range results {
		r := &results[i]
		b = protowire.AppendTag(b, fieldStreamResponseResults, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size(r)))
		if r.SystemID != "" {
			b = protowire.AppendTag(b, fieldResultSystemID, protowire.BytesType)
			b = protowire.AppendString(b, r.SystemID)
		}
		if r.Routed != 0 {
			b = protowire.AppendTag(b, fieldResultRouted, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(r.Routed))
		}
		if r.Code != 0 {
			b = protowire.AppendTag(b, fieldResultCode, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(r.Code))
		}
		if r.Err != "" {
			b = protowire.AppendTag(b, fieldResultError, protowire.BytesType)
			b = protowire.AppendString(b, r.Err)
		}
		if r.Duplicate {
			b = protowire.AppendTag(b, fieldResultDup, protowire.VarintType)
			b = protowire.AppendVarint(b, 1)
		}
	}
	return &RawFrame{b: b, pooled: buf}
}

// mergeDuration merges the encoded Duration v into *d (made if nil), as proto merges a
// message field given twice.
func mergeDuration(v []byte, d **durationpb.Duration) error {
	if *d == nil {
		*d = new(durationpb.Duration)
	}
	return decodeSecondsNanos(v, &(*d).Seconds, &(*d).Nanos)
}

// decodeSecondsNanos merges the google.protobuf.Duration or Timestamp encoded in b (their
// fields are the same) into sec and nanos.
func decodeSecondsNanos(b []byte, sec *int64, nanos *int32) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errFrame, protowire.ParseError(n))
		}
		b = b[n:]
		var x uint64
		switch {
		case num == fieldDurationSeconds && typ == protowire.VarintType: // = fieldTimestampSeconds
			if x, n = protowire.ConsumeVarint(b); n >= 0 {
				*sec = int64(x)
			}
		case num == fieldDurationNanos && typ == protowire.VarintType: // = fieldTimestampNanos
			if x, n = protowire.ConsumeVarint(b); n >= 0 {
				*nanos = int32(x)
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

// TTL is a PublishRequest's ttl as broker.Draft.TTL takes it: -1 for one that is not a valid,
// non-negative duration (the broker refuses it), 0 for none.
func TTL(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	if d.CheckValid() != nil || d.AsDuration() < 0 {
		return -1
	}
	return d.AsDuration()
}

// Delay is a PublishRequest's deliver_after and deliver_at as broker.Draft.DeliverAfter and
// DeliverAt take them: DeliverAt -2 if both are given, DeliverAfter -1 for a
// deliver_after that is not a valid, non-negative duration, DeliverAt -1 for a deliver_at
// that is not a valid timestamp, 1 for one before 1970 (past: at once),
// math.MaxInt64 for one past 2262 (the gate refuses it as too far). Zero: not given.
func Delay(after *durationpb.Duration, at *timestamppb.Timestamp) (time.Duration, int64) {
	switch {
	case after != nil && at != nil:
		return 0, -2
	case after != nil:
		if after.CheckValid() != nil || after.AsDuration() < 0 {
			return -1, 0
		}
		return after.AsDuration(), 0
	case at == nil:
		return 0, 0
	case at.CheckValid() != nil:
		return 0, -1
	case at.GetSeconds() >= math.MaxInt64/int64(time.Second):
		return 0, math.MaxInt64
	case at.GetSeconds() < 0 || at.AsTime().UnixNano() <= 0:
		return 0, 1
	}
	return 0, at.AsTime().UnixNano()
}
