package wire

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/grpcbuf"
)

// A fanout message goes to many subscriptions, and marshalling it again for each was the
// largest cost of a fanout (BENCHMARKS.md). So the server encodes the fields every delivery of
// a message shares once, caches the bytes on the message, and builds each subscription's
// frame by copying them and appending the fields that differ (attempt, redelivered,
// subscription_id): protobuf allows fields in any order. A RawFrame carries such a frame past
// the codec (codec.go).

// shared returns the encoding of the fields of m that every delivery shares, cached on m.
func shared(m *broker.Message) []byte {
	if b := m.Wire.Load(); b != nil {
		return *b
	}
	b := appendShared(make([]byte, 0, sharedSize(m)), m)
	m.Wire.CompareAndSwap(nil, &b)
	return b
}

// sharedSize is the length of m's shared encoding.
func sharedSize(m *broker.Message) int {
	n := 0
	if m.SystemID != "" {
		n += protowire.SizeTag(fieldMessageSystemID) + protowire.SizeBytes(len(m.SystemID))
	}
	if m.Topic != "" {
		n += protowire.SizeTag(fieldMessageTopic) + protowire.SizeBytes(len(m.Topic))
	}
	if len(m.Payload) > 0 {
		n += protowire.SizeTag(fieldMessagePayload) + protowire.SizeBytes(len(m.Payload))
	}
	for _, x := range m.Headers {
		n += protowire.SizeTag(fieldMessageHeaders) + protowire.SizeBytes(mapEntrySize(x.Key, x.Value))
	}
	if m.PublishedAt != 0 {
		n += protowire.SizeTag(fieldMessagePublishTime) + protowire.SizeVarint(uint64(m.PublishedAt))
	}
	if m.Key != "" {
		n += protowire.SizeTag(fieldMessageKey) + protowire.SizeBytes(len(m.Key))
	}
	if m.Priority != 0 {
		n += protowire.SizeTag(fieldMessagePriority) + protowire.SizeVarint(uint64(m.Priority))
	}
	return n
}

func mapEntrySize(k, v string) int {
	return protowire.SizeTag(fieldMapKey) + protowire.SizeBytes(len(k)) +
		protowire.SizeTag(fieldMapValue) + protowire.SizeBytes(len(v))
}

// appendShared appends m's shared encoding to b, written with protowire (marshalling a
// pb.Message by reflection was 14% of a fanout's server CPU). The broker has validated every
// string field as UTF-8.
func appendShared(b []byte, m *broker.Message) []byte {
	if m.SystemID != "" {
		b = protowire.AppendTag(b, fieldMessageSystemID, protowire.BytesType)
		b = protowire.AppendString(b, m.SystemID)
	}
	if m.Topic != "" {
		b = protowire.AppendTag(b, fieldMessageTopic, protowire.BytesType)
		b = protowire.AppendString(b, m.Topic)
	}
	if len(m.Payload) > 0 {
		b = protowire.AppendTag(b, fieldMessagePayload, protowire.BytesType)
		b = protowire.AppendBytes(b, m.Payload)
	}
	for _, x := range m.Headers {
		b = protowire.AppendTag(b, fieldMessageHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mapEntrySize(x.Key, x.Value)))
		b = protowire.AppendTag(b, fieldMapKey, protowire.BytesType)
		b = protowire.AppendString(b, x.Key)
		b = protowire.AppendTag(b, fieldMapValue, protowire.BytesType)
		b = protowire.AppendString(b, x.Value)
	}
	if m.PublishedAt != 0 {
		b = protowire.AppendTag(b, fieldMessagePublishTime, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.PublishedAt))
	}
	if m.Key != "" {
		b = protowire.AppendTag(b, fieldMessageKey, protowire.BytesType)
		b = protowire.AppendString(b, m.Key)
	}
	if m.Priority != 0 {
		b = protowire.AppendTag(b, fieldMessagePriority, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.Priority))
	}
	return b
}

// EncodeBatch returns the SubscribeResponse frame carrying batch, messages only (every
// delivery's Msg set).
func EncodeBatch(batch []broker.Delivery) *RawFrame {
	// A message routed to one target (a group, or a single subscription) is written straight
	// into the frame; one that goes to several is encoded once and the bytes cached on it.
	sharedLen := func(m *broker.Message) int {
		if w := m.Wire.Load(); w != nil {
			return len(*w)
		}
		if m.Targets > 1 {
			return len(shared(m))
		}
		return sharedSize(m)
	}
	size := func(d broker.Delivery) int {
		n := sharedLen(d.Msg) + protowire.SizeTag(fieldMessageAttempt) + protowire.SizeVarint(uint64(d.Attempt)) +
			protowire.SizeTag(fieldMessageSubscriptionID) + protowire.SizeBytes(len(d.Sub.ID()))
		if d.Attempt > 1 {
			n += protowire.SizeTag(fieldMessageRedelivered) + 1
		}
		return n
	}
	// Each delivery's size, reckoned once: a message written straight into the frame would
	// otherwise have its headers walked twice to size it (a map's iteration is dear).
	var small [128]int
	sizes := small[:0]
	if len(batch) > len(small) {
		sizes = make([]int, 0, len(batch))
	}
	inner := 0
	for _, d := range batch {
		n := size(d)
		sizes = append(sizes, n)
		inner += protowire.SizeTag(fieldBatchMessages) + protowire.SizeBytes(n)
	}
	buf := grpcbuf.Pool.Get(protowire.SizeTag(fieldResponseMessages) + protowire.SizeBytes(inner))
	b := (*buf)[:0]
	b = protowire.AppendTag(b, fieldResponseMessages, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	for i, d := range batch {
		b = protowire.AppendTag(b, fieldBatchMessages, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i]))
		if w := d.Msg.Wire.Load(); w != nil {
			b = append(b, *w...)
		} else if d.Msg.Targets > 1 {
			b = append(b, shared(d.Msg)...)
		} else {
			b = appendShared(b, d.Msg)
		}
		b = protowire.AppendTag(b, fieldMessageAttempt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d.Attempt))
		if d.Attempt > 1 {
			b = protowire.AppendTag(b, fieldMessageRedelivered, protowire.VarintType)
			b = protowire.AppendVarint(b, 1)
		}
		b = protowire.AppendTag(b, fieldMessageSubscriptionID, protowire.BytesType)
		b = protowire.AppendString(b, d.Sub.ID())
	}
	return &RawFrame{b: b, pooled: buf}
}
