// Package sysid seals a message's sequence number and a secret into a system_id: one AES-128
// block in the URL-safe base64 alphabet, 22 characters. Both engines use it, each with its own
// secrets and errors (see RATIONALE.md, "Why unguessable system_ids?").
package sysid

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"sync"
)

// Len is the length of every system_id: the 128 bits of one block, 6 to a character.
const Len = 22

// alphabet is URL-safe base64's. An id is the block as one 128-bit number written in it, most
// significant digit first: 22 digits hold 132 bits, so the first digit is one of A-D (its top
// 4 bits are zero). Plain base64 would put the spare bits at the end and could start an id
// with '-', which command lines then take for a flag (`tinybroker dlq replay work -5v2...`).
// Every id has exactly one spelling: any other first digit, or any character outside the
// alphabet, is refused.
const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// digits maps a character to its value in alphabet, or 0xff.
var digits = func() (d [256]byte) {
	for i := range d {
		d[i] = 0xff
	}
	for i := range len(alphabet) {
		d[alphabet[i]] = byte(i)
	}
	return d
}()

// encode writes block as an id.
func encode(out *[Len]byte, block *[16]byte) {
	hi, lo := binary.BigEndian.Uint64(block[:8]), binary.BigEndian.Uint64(block[8:])
	for i := Len - 1; i >= 0; i-- {
		out[i] = alphabet[lo&63]
		lo = lo>>6 | hi<<58
		hi >>= 6
	}
}

// decode reads id into block; it is false unless id is spelled exactly as encode writes.
func decode(block *[16]byte, id string) bool {
	if len(id) != Len || digits[id[0]] > 3 {
		return false
	}
	var hi, lo uint64
	for i := range Len {
		d := digits[id[i]]
		if d == 0xff {
			return false
		}
		hi = hi<<6 | lo>>58
		lo = lo<<6 | uint64(d)
	}
	binary.BigEndian.PutUint64(block[:8], hi)
	binary.BigEndian.PutUint64(block[8:], lo)
	return true
}

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
	encode(&out, block)
	return string(out[:])
}

// Parse opens id: ok is false unless it is Len characters spelled exactly as Format writes
// them. The caller checks the secret.
func (c Codec) Parse(id string) (seq, secret uint64, ok bool) {
	if len(id) != Len {
		return 0, 0, false
	}
	s := scratch.Get().(*[2][16]byte)
	defer scratch.Put(s)
	enc, plain := &s[0], &s[1]
	if !decode(enc, id) {
		return 0, 0, false
	}
	c.block.Decrypt(plain[:], enc[:])
	return binary.LittleEndian.Uint64(plain[:8]), binary.LittleEndian.Uint64(plain[8:]), true
}
