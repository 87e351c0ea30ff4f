package memory

import (
	"crypto/rand"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/grouping"
	"github.com/tinybroker/tinybroker/internal/sysid"
)

// message is a published message with what the engine keeps about it. The engine hands out
// &m.Message; the rest is its own.
type message struct {
	broker.Message
	// idBlock is where the system_id is encrypted (in place: a buffer passed to cipher.Block
	// escapes, and this one is on the heap already).
	idBlock [16]byte
	// cost is what holding the message costs (grouping.MessageCost), charged to the engine's memory
	// budget from its publish until its last holder lets go of it; holders counts them.
	cost    int64
	holders atomic.Int32
}

// delivery is a broker.Delivery as the engine holds it. With m nil it is an event: sub
// opened or was refused (attempt 0), or was ended by the engine (attempt endedEvent; why is
// in its member's ended).
type delivery struct {
	m       *message
	sub     *Subscription
	attempt uint32
}

const endedEvent = 1

// withHeaders returns a copy of m with headers set and deleted; m itself is shared and
// never changes. Headers that are not UTF-8 are not set (subscribers decode them as strings).
func (m *message) withHeaders(set map[string]string, del []string) *message {
	h := slices.Clone(m.Headers)
	for _, k := range del {
		h = h.Delete(k)
	}
	for k, v := range set {
		if utf8.ValidString(k) && utf8.ValidString(v) {
			h = h.Set(k, v)
		}
	}
	if len(h) == 0 {
		h = nil
	}
	hb := 0
	for _, x := range h {
		hb += len(x.Key) + len(x.Value)
	}
	n := &message{Message: broker.Message{ID: m.ID, SystemID: m.SystemID, Topic: m.Topic, Payload: m.Payload, Headers: h, Key: m.Key, TTL: m.TTL, Priority: m.Priority, PublishedAt: m.PublishedAt, HeaderBytes: hb}}
	n.cost = grouping.MessageCost(n.Topic, n.Key, n.SystemID, n.Payload, len(n.Headers), hb, 1)
	return n
}

// idCodec turns message sequence numbers into system_ids and back. A system_id is the
// sequence number and a secret of this broker process, encrypted together as one AES block
// under a key of this process, in URL-safe base64 (22 characters). It is unguessable: only
// whoever received it (or published the message) can know it, so an ack, nack or touch
// needs the id as a capability; forging one means guessing 128 bits. An id from an earlier
// process fails to decrypt to this process's secret and is refused instead of acking an
// unrelated message that reused its number. See RATIONALE.md, "Why unguessable system_ids?".
type idCodec struct {
	ids    sysid.Codec
	secret uint64
}

const idLen = sysid.Len

func newIDCodec() idCodec {
	var key [16]byte
	var secret [8]byte
	_, _ = rand.Read(key[:])
	_, _ = rand.Read(secret[:])
	ids, err := sysid.New(key[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return idCodec{ids: ids, secret: binary.LittleEndian.Uint64(secret[:])}
}

func (c idCodec) format(seq uint64) string { return c.ids.Format(seq, c.secret) }

// formatIn is format encrypting in block (a message's, already on the heap).
func (c idCodec) formatIn(seq uint64, block *[16]byte) string {
	return c.ids.FormatIn(seq, c.secret, block)
}

func (c idCodec) parse(id string) (uint64, error) {
	return grouping.ParseID(c.ids, c.secret, id, "this broker process", "the broker may have restarted")
}
