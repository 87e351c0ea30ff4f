package wire

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tinybroker/tinybroker/broker"
)

// maxVarint32 is the longest varint of a uint32 (Message.attempt).
const maxVarint32 = 5

// DeliverySize bounds the bytes one delivery of m adds to a MessageBatch frame (its
// MessageBatch.messages field: tag, length and Message), for the engine to keep frames under
// a size without encoding them. m.HeaderBytes must be the sum of the lengths of m's header
// keys and values, as the broker keeps it.
//
// The delivery's subscription_id field is left out: it depends on the subscription, not on
// the message. Add its tag, length and id (2+len(id) bytes for an id under 128 bytes, 131 for
// the broker's longest) to bound it too. The Message's length prefix is counted a byte wider
// than m's fields need, which leaves room for any subscription_id field of up to 16,256 bytes.
//
// It is cheap: it does not iterate m.Headers but bounds the varints of their entries from
// m.HeaderBytes (a varint of x takes at most 1+x/128 bytes), and counts attempt and
// redelivered at their largest. It exceeds the encoded size by at most 8 bytes for a message
// with a system_id, a topic, a payload and a publish time, and no headers; each of those
// fields left empty (and the key) adds 2 bytes, and headers at most 1 byte per 32 of HeaderBytes plus 6 per
// header (what they take encoded, when their keys and values are under 128 bytes).
func DeliverySize(m *broker.Message) int {
	h := len(m.Headers)
	lens := 2*h + m.HeaderBytes/128 // the varint lengths of all keys and values
	entries := m.HeaderBytes + h*(protowire.SizeTag(fieldMapKey)+protowire.SizeTag(fieldMapValue)) + lens
	headers := h*(protowire.SizeTag(fieldMessageHeaders)+1) + entries/128 + entries // with their tags and lengths
	n := protowire.SizeTag(fieldMessageSystemID) + protowire.SizeBytes(len(m.SystemID)) +
		protowire.SizeTag(fieldMessageTopic) + protowire.SizeBytes(len(m.Topic)) +
		protowire.SizeTag(fieldMessagePayload) + protowire.SizeBytes(len(m.Payload)) +
		headers +
		protowire.SizeTag(fieldMessagePublishTime) + protowire.SizeVarint(uint64(m.PublishedAt)) +
		protowire.SizeTag(fieldMessageKey) + protowire.SizeBytes(len(m.Key)) +
		protowire.SizeTag(fieldMessageAttempt) + maxVarint32 +
		protowire.SizeTag(fieldMessageRedelivered) + 1
	return protowire.SizeTag(fieldBatchMessages) + protowire.SizeVarint(uint64(n)) + 1 + n
}
