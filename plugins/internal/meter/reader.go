package meter

import "fmt"

// reader reads a module's bytes. Its first error sticks: after it every read returns zero
// and reads nothing, so loops over counts check err to end early.
type reader struct {
	b    []byte
	off  int
	base int // the offset of b in the module, for errors
	err  error
}

func (r *reader) fail(format string, args ...any) error {
	if r.err == nil {
		r.err = &Error{r.base + r.off, fmt.Sprintf(format, args...)}
	}
	return r.err
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("unexpected end")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("unexpected end: %d bytes wanted, %d left", n, len(r.b)-r.off)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) rest() []byte { return r.bytes(len(r.b) - r.off) }

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() uint32 {
	var v uint32
	for i := 0; i < 5; i++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if i == 4 && c > 0x0f {
			r.fail("integer too large for 32 bits")
			return 0
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	return v
}

// leb skips a LEB128 (signed or not) of at most max bytes.
func (r *reader) leb(max int) {
	for i := 0; i < max; i++ {
		if c := r.byte(); c&0x80 == 0 || r.err != nil {
			return
		}
	}
	r.fail("integer longer than %d bytes", max)
}

func (r *reader) name() string {
	n := r.u32()
	return string(r.bytes(int(n)))
}

// limits skips a table's or memory's limits.
func (r *reader) limits() {
	flags := r.byte()
	if flags > 0x07 {
		r.fail("limits with flags 0x%02x", flags)
		return
	}
	r.leb(10)
	if flags&0x01 != 0 {
		r.leb(10)
	}
}

// tableLimits skips a table's limits, refusing an initial size over maxTableSize.
func (r *reader) tableLimits() {
	flags := r.byte()
	if flags > 0x07 {
		r.fail("limits with flags 0x%02x", flags)
		return
	}
	if min := r.u32(); min > maxTableSize {
		r.fail("a table of %d elements, over the limit of %d", min, maxTableSize)
	}
	if flags&0x01 != 0 {
		r.leb(10)
	}
}

// blockType skips a block type: empty (0x40), a value type, or a type index (s33).
func (r *reader) blockType() {
	if r.err != nil || r.off >= len(r.b) {
		r.byte()
		return
	}
	switch r.b[r.off] {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.off++
	default:
		r.leb(5)
	}
}

// memarg skips an alignment (with bit 6, a memory index follows) and an offset.
func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 {
		r.u32()
	}
	r.leb(10)
}

// prefixedFC skips the rest of a 0xfc instruction: saturating truncations, bulk memory and
// tables.
func (r *reader) prefixedFC() {
	switch op := r.u32(); op {
	case 0, 1, 2, 3, 4, 5, 6, 7:
	case 9, 11, 13, 15, 16, 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		r.u32()
	case 8, 10, 12, 14: // memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	default:
		if r.err == nil {
			r.fail("instruction 0xfc %d is not one the broker knows", op)
		}
	}
}

// prefixedSIMD skips the rest of a 0xfd instruction (SIMD and relaxed SIMD).
func (r *reader) prefixedSIMD() {
	switch op := r.u32(); {
	case op <= 11 || op == 92 || op == 93: // loads and stores
		r.memarg()
	case op == 12 || op == 13: // v128.const, i8x16.shuffle
		r.bytes(16)
	case op >= 21 && op <= 34: // extract and replace lane
		r.byte()
	case op >= 84 && op <= 91: // load and store lane
		r.memarg()
		r.byte()
	case op <= 0x113:
	default:
		if r.err == nil {
			r.fail("instruction 0xfd %d is not one the broker knows", op)
		}
	}
}

// prefixedAtomic skips the rest of a 0xfe instruction (threads).
func (r *reader) prefixedAtomic() {
	switch op := r.u32(); {
	case op == 0x03: // atomic.fence
		r.byte()
	case op <= 0x02 || op >= 0x10 && op <= 0x4e:
		r.memarg()
	default:
		if r.err == nil {
			r.fail("instruction 0xfe %d is not one the broker knows", op)
		}
	}
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
