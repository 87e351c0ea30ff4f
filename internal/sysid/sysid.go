// Package sysid seals a message's sequence number and a secret into a system_id: one AES-128
// block in URL-safe base64, 22 characters. Both engines use it, each with its own secrets and
// errors (see RATIONALE.md, "Why unguessable system_ids?").
package sysid

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"sync"
)

// Len is the length of every system_id: base64 of one 16-byte block, without padding.
const Len = 22

// encoding decodes ids strictly: the last of the 22 characters carries 2 bits of the block
// and 4 bits that must be zero; a lenient decoder would take 16 spellings of every id.
var encoding = base64.RawURLEncoding.Strict()

// Codec seals and opens system_ids under one key.
type Codec struct{ block cipher.Block }

// New returns the codec of a 16-byte key.
func New(key []byte) (Codec, error) {
	block, err := aes.NewCipher(key)
	return Codec{block: block}, err
}

// scratch holds Format's and Parse's blocks: passed to cipher.Block's methods, arrays on the
// stack would escape to the heap, two allocations per id.
var scratch = sync.Pool{New: func() any { return new([2][16]byte) }}

// Format returns the system_id of seq under secret.
func (c Codec) Format(seq, secret uint64) string {
	s := scratch.Get().(*[2][16]byte)
	id := c.FormatIn(seq, secret, &s[0])
	scratch.Put(s)
	return id
}

// FormatIn is Format encrypting in block, a buffer of the caller's already on the heap (a
// message's), which must not escape for it.
func (c Codec) FormatIn(seq, secret uint64, block *[16]byte) string {
	binary.LittleEndian.PutUint64(block[:8], seq)
	binary.LittleEndian.PutUint64(block[8:], secret)
	c.block.Encrypt(block[:], block[:])
	var out [Len]byte
	base64.RawURLEncoding.Encode(out[:], block[:])
	return string(out[:])
}

// Parse opens id: ok is false unless it is Len characters spelled exactly as Format writes
// them. The caller checks the secret.
func (c Codec) Parse(id string) (seq, secret uint64, ok bool) {
	if len(id) != Len {
		return 0, 0, false
	}
	var raw [Len]byte
	copy(raw[:], id)
	s := scratch.Get().(*[2][16]byte)
	defer scratch.Put(s)
	enc, plain := &s[0], &s[1]
	if n, err := encoding.Decode(enc[:], raw[:]); err != nil || n != 16 {
		return 0, 0, false
	}
	c.block.Decrypt(plain[:], enc[:])
	return binary.LittleEndian.Uint64(plain[:8]), binary.LittleEndian.Uint64(plain[8:]), true
}
