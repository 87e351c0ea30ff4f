package wire

// A Decoder decodes the broker's message frames (SubscribeResponse.messages) without
// protobuf reflection, for the Go client and the benchmark client. Decoding a batch through
// the generated types built a pb.Message per message and walked it by reflection; on a fanout
// benchmark, where client and broker share two cores, the client's decoding was as costly as
// the whole broker. A Decoder reads the same wire format straight into Delivery values, with
// the checks the protobuf decoder makes (valid UTF-8 in string fields, well-formed lengths);
// FuzzDecode holds it to proto.Unmarshal.

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Delivery is one tinybroker.v1.Message.
type Delivery struct {
	SystemID string
	Topic    string
	Payload  []byte
	// Headers holds the message's header entries as they were encoded (checked to be
	// well-formed UTF-8), decoded on use by HeaderValue and HeaderMap: a subscriber that never
	// reads a header never builds a map.
	Headers             string
	PublishTimeUnixNano int64
	Attempt             uint32
	Redelivered         bool
	SubscriptionID      string
	Key                 string
	Priority            uint32
}

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("malformed tinybroker.v1 frame")

// Decoder decodes frames of one stream. It interns topics and subscription ids, which
// repeat. It is not safe for concurrent use.
type Decoder struct {
	strs    interner
	hdr     []byte // scratch: a message's header fields
	lastHdr string // the last message's header fields, checked
}

const (
	maxInterned     = 1024
	maxInternedSize = 128
)

// Frame is a SubscribeResponse as it arrived, kept for a Decoder. Pass a *Frame to a gRPC
// stream's RecvMsg with the grpcbuf codec: its buffer is reused from frame to frame.
type Frame struct{ B []byte }

// SetBuffers copies a received message into f, reusing f's buffer.
func (f *Frame) SetBuffers(data mem.BufferSlice) {
	n := data.Len()
	if cap(f.B) < n {
		f.B = make([]byte, n)
	}
	f.B = f.B[:n]
	data.CopyTo(f.B)
}

// Messages appends the deliveries of a SubscribeResponse frame to dst. ok is false when the
// frame is not a batch of messages (subscribed or refused): decode it with proto.Unmarshal.
func (d *Decoder) Messages(b []byte, dst []Delivery) (_ []Delivery, ok bool, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return dst, false, parseErr(n)
		}
		b = b[n:]
		if num != fieldResponseMessages || typ != protowire.BytesType {
			if num == fieldResponseSubscribed || num == fieldResponseRefused || num == fieldResponseEnded {
				return dst, false, nil // another frame of the oneof: proto decodes it
			}
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return dst, false, parseErr(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return dst, false, parseErr(n)
		}
		b = b[n:]
		ok = true
		if dst, err = d.batch(v, dst); err != nil {
			return dst, false, err
		}
	}
	return dst, ok, nil
}

func (d *Decoder) batch(b []byte, dst []Delivery) ([]Delivery, error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return dst, parseErr(n)
		}
		b = b[n:]
		if num == fieldBatchMessages && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return dst, parseErr(n)
			}
			b = b[n:]
			dst = append(dst, Delivery{})
			if err := d.message(v, &dst[len(dst)-1]); err != nil {
				return dst[:len(dst)-1], err
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return dst, parseErr(n)
		}
		b = b[n:]
	}
	return dst, nil
}

func (d *Decoder) message(b []byte, m *Delivery) error {
	hdr := d.hdr[:0]
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseErr(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch {
		case typ == protowire.BytesType && (num >= fieldMessageSystemID && num <= fieldMessageHeaders || num == fieldMessageSubscriptionID || num == fieldMessageKey):
			if v, n = protowire.ConsumeBytes(b); n < 0 {
				return parseErr(n)
			}
			if num != fieldMessagePayload && num != fieldMessageHeaders && !utf8.Valid(v) {
				return fmt.Errorf("%w: field %d of a Message is not valid UTF-8", ErrMalformed, num)
			}
			switch num {
			case fieldMessageSystemID:
				m.SystemID = string(v)
			case fieldMessageTopic:
				m.Topic = d.strs.String(v)
			case fieldMessagePayload:
				m.Payload = append(m.Payload[:0], v...)
			case fieldMessageHeaders: // checked below, unless they are the last message's
				hdr = protowire.AppendTag(hdr, fieldMessageHeaders, protowire.BytesType)
				hdr = append(hdr, b[:n]...) // length prefix and entry
			case fieldMessageSubscriptionID:
				m.SubscriptionID = d.strs.String(v)
			case fieldMessageKey:
				m.Key = string(v) // not interned: keys are many, topics few
			}
		case typ == protowire.VarintType && (num == fieldMessagePublishTime || num == fieldMessageAttempt || num == fieldMessageRedelivered || num == fieldMessagePriority):
			if x, n = protowire.ConsumeVarint(b); n < 0 {
				return parseErr(n)
			}
			switch num {
			case fieldMessagePublishTime:
				m.PublishTimeUnixNano = int64(x)
			case fieldMessageAttempt:
				m.Attempt = uint32(x)
			case fieldMessageRedelivered:
				m.Redelivered = x != 0
			case fieldMessagePriority:
				m.Priority = uint32(x)
			}
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return parseErr(n)
			}
		}
		b = b[n:]
	}
	d.hdr = hdr
	if len(hdr) > 0 {
		// A publisher's messages tend to carry the same headers: the same bytes as the last
		// message's, checked then, are taken as they are, without a check or a lookup.
		if string(hdr) == d.lastHdr {
			m.Headers = d.lastHdr
			return nil
		}
		if err := checkHeaders(hdr); err != nil {
			return err
		}
		m.Headers = d.strs.String(hdr)
		d.lastHdr = m.Headers
	}
	return nil
}

// checkHeaders checks every map entry of a message's header fields, hdr (as message keeps
// them: tag, length, entry).
func checkHeaders(hdr []byte) error {
	for len(hdr) > 0 {
		_, _, n := consumeTag(hdr)
		v, m := protowire.ConsumeBytes(hdr[n:])
		if _, _, err := mapEntry(v); err != nil {
			return err
		}
		hdr = hdr[n+m:]
	}
	return nil
}

// HeaderValue returns the value of key in headers (a Delivery's Headers), and whether it is
// there. As in protobuf, a key that occurs twice takes its last value.
func HeaderValue(headers, key string) (value string, ok bool) {
	b := []byte(headers) // does not escape: no copy
	for len(b) > 0 {
		_, _, n := protowire.ConsumeTag(b)
		v, m := protowire.ConsumeBytes(b[n:])
		b = b[n+m:]
		if k, val, _ := mapEntry(v); string(k) == key {
			value, ok = string(val), true
		}
	}
	return value, ok
}

// HeaderMap decodes headers (a Delivery's Headers) into a new map; nil if there are none.
func HeaderMap(headers string) map[string]string {
	if headers == "" {
		return nil
	}
	h := make(map[string]string)
	b := []byte(headers)
	for len(b) > 0 {
		_, _, n := protowire.ConsumeTag(b)
		v, m := protowire.ConsumeBytes(b[n:])
		b = b[n+m:]
		k, val := mapEntryStrings(v)
		h[k] = val
	}
	return h
}

// mapEntryStrings decodes a header entry.
func mapEntryStrings(b []byte) (key, value string) {
	k, v, _ := mapEntry(b)
	return string(k), string(v)
}

// mapEntry returns the key and value of an encoded map<string, string> entry, checking them
// as protobuf would (well-formed, UTF-8).
func mapEntry(b []byte) (key, value []byte, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return nil, nil, parseErr(n)
		}
		b = b[n:]
		if (num == fieldMapKey || num == fieldMapValue) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, nil, parseErr(n)
			}
			if !utf8.Valid(v) {
				return nil, nil, fmt.Errorf("%w: a header is not valid UTF-8", ErrMalformed)
			}
			if num == fieldMapKey {
				key = v
			} else {
				value = v
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, nil, parseErr(n)
		}
		b = b[n:]
	}
	return key, value, nil
}

// consumeTag is protowire.ConsumeTag, refusing field numbers past the largest valid one as
// proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

func parseErr(n int) error { return fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n)) }

// An interner turns bytes into strings, sharing one string between equal byte strings, for the
// topics, ids and headers a stream repeats. It keeps at most 1,024 strings of at most 128
// bytes; past that it allocates as string() would. The zero value is ready to use; it is not
// safe for concurrent use.
type interner struct{ strs map[string]string }

// String returns v as a string.
func (in *interner) String(v []byte) string {
	if s, ok := in.strs[string(v)]; ok { // no allocation: the compiler knows this lookup
		return s
	}
	s := string(v)
	if len(s) <= maxInternedSize && len(in.strs) < maxInterned {
		if in.strs == nil {
			in.strs = make(map[string]string)
		}
		in.strs[s] = s
	}
	return s
}
