package memory

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tinybroker/tinybroker/broker"
)

// message is a published message with what the engine keeps about it. The engine hands out
// &m.Message; the rest is its own.
type message struct {
	broker.Message
	// idBlock is where the system_id is encrypted (in place: a buffer passed to cipher.Block
	// escapes, and this one is on the heap already).
	idBlock [16]byte
	// cost is what holding the message costs (messageCost), charged to the engine's memory
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
	h := make(map[string]string, len(m.Headers)+len(set))
	for k, v := range m.Headers {
		h[k] = v
	}
	for _, k := range del {
		delete(h, k)
	}
	for k, v := range set {
		if utf8.ValidString(k) && utf8.ValidString(v) {
			h[k] = v
		}
	}
	hb := 0
	for k, v := range h {
		hb += len(k) + len(v)
	}
	n := &message{Message: broker.Message{ID: m.ID, SystemID: m.SystemID, Topic: m.Topic, Payload: m.Payload, Headers: h, PublishedAt: m.PublishedAt, HeaderBytes: hb}}
	n.cost = messageCost(n.Topic, n.SystemID, n.Payload, n.Headers, hb, 1)
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
	block  cipher.Block
	secret uint64
}

const idLen = 22 // base64 of one 16-byte block, without padding

// idEncoding decodes ids strictly: the last of the 22 characters carries 2 bits of the block
// and 4 bits that must be zero; a lenient decoder would take 16 spellings of every id.
var idEncoding = base64.RawURLEncoding.Strict()

func newIDCodec() idCodec {
	var key [16]byte
	var secret [8]byte
	_, _ = rand.Read(key[:])
	_, _ = rand.Read(secret[:])
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return idCodec{block: block, secret: binary.LittleEndian.Uint64(secret[:])}
}

// idScratch holds format's and parse's blocks: passed to cipher.Block's methods, arrays on
// the stack would escape to the heap, two allocations per id.
var idScratch = sync.Pool{New: func() any { return new([2][16]byte) }}

func (c idCodec) format(seq uint64) string {
	s := idScratch.Get().(*[2][16]byte)
	id := c.formatIn(seq, &s[0])
	idScratch.Put(s)
	return id
}

// formatIn is format encrypting in block, which must not escape to the heap for it.
func (c idCodec) formatIn(seq uint64, block *[16]byte) string {
	binary.LittleEndian.PutUint64(block[:8], seq)
	binary.LittleEndian.PutUint64(block[8:], c.secret)
	c.block.Encrypt(block[:], block[:])
	var out [idLen]byte
	base64.RawURLEncoding.Encode(out[:], block[:])
	return string(out[:])
}

func (c idCodec) parse(id string) (uint64, error) {
	if len(id) != idLen {
		return 0, fmt.Errorf("%w %q: not a system_id of this broker process (a system_id is the %d characters the broker sent with the message; the broker may have restarted)", broker.ErrUnknownMessage, truncate(id, 64), idLen)
	}
	var raw [idLen]byte
	copy(raw[:], id)
	s := idScratch.Get().(*[2][16]byte)
	defer idScratch.Put(s)
	enc, plain := &s[0], &s[1]
	if n, err := idEncoding.Decode(enc[:], raw[:]); err != nil || n != 16 {
		return 0, fmt.Errorf("%w %q: malformed system_id", broker.ErrUnknownMessage, id)
	}
	c.block.Decrypt(plain[:], enc[:])
	seq := binary.LittleEndian.Uint64(plain[:8])
	if binary.LittleEndian.Uint64(plain[8:]) != c.secret || seq == 0 {
		return 0, fmt.Errorf("%w %q: not a system_id of this broker process (the broker may have restarted)", broker.ErrUnknownMessage, id)
	}
	return seq, nil
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
