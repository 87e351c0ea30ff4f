// Package meter rewrites a WebAssembly module so that its code comes back to the host often:
// at the head of every loop and on entry to every function that calls another, the code
// counts down a fuel counter of its own, and when it reaches zero it calls the host function
// Import, whose result refills it.
//
// That call is where the host bounds a guest (plugins/bounds.go): in it the Go runtime can
// stop the goroutine for a garbage collection or preempt it, and the host can end a call
// that ran too long by panicking. wazero's own termination checks (WithCloseOnContextDone)
// do the same by leaving for Go at every loop turn, and by watching every call with a
// goroutine; counting down in the guest costs a load, a compare and a store per turn instead
// (RATIONALE.md, "Why does the broker meter a plugin's code itself?").
//
// The rewrite adds one function type, one import (the host function), one mutable i32
// global (the counter) and the checks; every function index after the imports moves up by
// one, and so does every reference to one (calls, ref.func, exports, the start function,
// element segments, the name section). DWARF sections are dropped: their code offsets no
// longer hold.
package meter

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

const (
	// ImportModule and ImportName name the host function the rewritten code imports, of type
	// () -> i32: it returns the fuel to count down next.
	ImportModule = "tinybroker_meter"
	ImportName   = "yield"

	// Fuel is what the host function should return: the checks the code passes before it
	// calls the host again. A check is one loop turn or one function entry, a nanosecond or
	// a few; 16,384 of them bring the code back to the host every few tens of microseconds,
	// and the call back (about 100 ns) costs well under 1 % of that.
	Fuel = 1 << 14
)

// Section ids, and their order in a module (custom sections, id 0, go anywhere).
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// rank is a section's place in a module's order; 0 for custom sections and unknown ids.
func rank(id byte) int {
	switch id {
	case secType, secImport, secFunction, secTable, secMemory:
		return int(id)
	case secTag:
		return 6
	case secGlobal, secExport, secStart, secElement:
		return int(id) + 1
	case secDataCount:
		return 11
	case secCode:
		return 12
	case secData:
		return 13
	}
	return 0
}

// Limits past which a module is refused: the web's (the JavaScript embedding's
// implementation limits, which every browser enforces), so that no module a browser runs is
// refused. wazero makes room from these counts alone, so without them a module of a few
// bytes could make it ask for gigabytes.
const (
	maxParams    = 1_000      // parameters, and results, of a function type
	maxLocals    = 50_000     // locals of a function
	maxTableSize = 10_000_000 // a table's initial size
)

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Error is why a module could not be rewritten. The module is then not valid WebAssembly, or
// uses a proposal the rewrite does not know (wazero would refuse most of those too).
type Error struct {
	Offset int // in the module
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("at byte %d: %s", e.Offset, e.Msg) }

type section struct {
	id   byte
	off  int // of its contents in the module
	body []byte
}

// module is what the rewrite needs to know of the module before it writes it.
type module struct {
	sections      []section
	types         uint32 // entries of the type section
	funcImports   uint32
	globalImports uint32
	globals       uint32 // defined ones
	has           [14]bool
}

// Instrument returns bin rewritten as the package comment says. bin is not changed.
func Instrument(bin []byte) ([]byte, error) {
	if len(bin) < len(header) || !bytes.Equal(bin[:4], header[:4]) {
		return nil, &Error{0, "not a WebAssembly binary (no \\0asm magic)"}
	}
	if !bytes.Equal(bin[4:8], header[4:8]) {
		return nil, &Error{4, fmt.Sprintf("WebAssembly binary version %x, want 1", bin[4:8])}
	}
	m, err := scan(bin)
	if err != nil {
		return nil, err
	}
	w := &writer{m: m, yieldType: m.types, yieldFunc: m.funcImports, fuel: m.globalImports + m.globals}
	w.check = w.checkCode()
	out := make([]byte, 0, len(bin)+len(bin)/8+64)
	out = append(out, header...)
	// The sections the rewrite needs and the module lacks are added in their place.
	missing := []byte{secType, secImport, secGlobal}
	addMissing := func(before int) error {
		for len(missing) > 0 && rank(missing[0]) < before {
			id := missing[0]
			missing = missing[1:]
			if m.has[id] {
				continue
			}
			body, err := w.section(section{id: id, body: []byte{0}})
			if err != nil {
				return err
			}
			out = appendSection(out, id, body)
		}
		return nil
	}
	for _, s := range m.sections {
		if r := rank(s.id); r > 0 {
			if err := addMissing(r); err != nil {
				return nil, err
			}
		}
		if s.id == secCustom {
			body, keep, err := w.custom(s)
			if err != nil {
				return nil, err
			}
			if keep {
				out = appendSection(out, s.id, body)
			}
			continue
		}
		body, err := w.section(s)
		if err != nil {
			return nil, err
		}
		out = appendSection(out, s.id, body)
	}
	if err := addMissing(100); err != nil {
		return nil, err
	}
	return out, nil
}

// scan splits bin into sections and counts what the rewrite must know beforehand.
func scan(bin []byte) (*module, error) {
	m := &module{}
	r := &reader{b: bin, off: len(header)}
	last := 0
	for r.off < len(bin) && r.err == nil {
		id := r.byte()
		n := r.u32()
		start := r.off
		body := r.bytes(int(n))
		if r.err != nil {
			return nil, r.fail("section %d runs past the end of the module", id)
		}
		if id > secTag {
			return nil, &Error{start, fmt.Sprintf("unknown section id %d", id)}
		}
		if rk := rank(id); rk > 0 {
			if rk <= last {
				return nil, &Error{start, fmt.Sprintf("section %d out of order or repeated", id)}
			}
			last = rk
			m.has[id] = true
		}
		m.sections = append(m.sections, section{id, start, body})
		sr := &reader{b: body, base: start}
		// Every entry of a vector takes a byte at least: a count larger than its section is a
		// lie, refused before wazero would make room for it (it does, from the count alone).
		if vectorSection(id) || id == secDataCount {
			if n := sr.u32(); sr.err == nil && int64(n) > int64(len(bin)) || vectorSection(id) && int64(n) > int64(len(body)) {
				return nil, &Error{start, fmt.Sprintf("section %d counts %d entries in %d bytes", id, n, len(body))}
			}
			sr.off = 0
		}
		switch id {
		case secType:
			m.types = sr.u32()
			for i := uint32(0); i < m.types && sr.err == nil; i++ {
				if form := sr.byte(); form != 0x60 {
					return nil, sr.fail("type of form 0x%02x, not a function type", form)
				}
				for range 2 { // parameters, results
					n := sr.u32()
					if n > maxParams {
						return nil, sr.fail("a function type with %d parameters or results, over the limit of %d", n, maxParams)
					}
					sr.bytes(int(n))
				}
			}
		case secTable:
			count := sr.u32()
			for i := uint32(0); i < count && sr.err == nil; i++ {
				sr.byte() // reftype
				sr.tableLimits()
			}
		case secImport:
			count := sr.u32()
			for i := uint32(0); i < count && sr.err == nil; i++ {
				sr.name()
				sr.name()
				switch kind := sr.byte(); kind {
				case 0x00:
					sr.u32()
					m.funcImports++
				case 0x01:
					sr.byte() // reftype
					sr.tableLimits()
				case 0x02:
					sr.limits()
				case 0x03:
					sr.byte() // valtype
					sr.byte() // mutability
					m.globalImports++
				case 0x04:
					sr.byte() // attribute
					sr.u32()
				default:
					return nil, sr.fail("import of unknown kind 0x%02x", kind)
				}
			}
		case secGlobal:
			m.globals = sr.u32()
		}
		if sr.err != nil {
			return nil, sr.err
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// vectorSection reports whether section id is a vector of entries.
func vectorSection(id byte) bool {
	return id != secCustom && id != secStart && id != secDataCount
}

func appendSection(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = appendU32(out, uint32(len(body)))
	return append(out, body...)
}

type writer struct {
	m         *module
	yieldType uint32 // the index of () -> i32
	yieldFunc uint32 // the import's function index
	fuel      uint32 // the counter's global index
	check     []byte // the code of one check
}

// fn maps a function index of the module to the rewritten module's.
func (w *writer) fn(i uint32) uint32 {
	if i >= w.yieldFunc {
		return i + 1
	}
	return i
}

// checkCode is the code of a check:
//
//	global.get $fuel
//	i32.eqz
//	if
//	  call $yield
//	  global.set $fuel
//	end
//	global.get $fuel
//	i32.const 1
//	i32.sub
//	global.set $fuel
func (w *writer) checkCode() []byte {
	c := []byte{0x23}
	c = appendU32(c, w.fuel)
	c = append(c, 0x45, 0x04, 0x40, 0x10)
	c = appendU32(c, w.yieldFunc)
	c = append(c, 0x24)
	c = appendU32(c, w.fuel)
	c = append(c, 0x0b, 0x23)
	c = appendU32(c, w.fuel)
	c = append(c, 0x41, 0x01, 0x6b, 0x24)
	return appendU32(c, w.fuel)
}

// section returns the rewritten contents of a non-custom section.
func (w *writer) section(s section) ([]byte, error) {
	r := &reader{b: s.body, base: s.off}
	var out []byte
	switch s.id {
	case secType:
		n := r.u32()
		out = appendU32(out, n+1)
		out = append(out, r.rest()...)
		out = append(out, 0x60, 0x00, 0x01, 0x7f)
	case secImport:
		n := r.u32()
		out = appendU32(out, n+1)
		out = append(out, r.rest()...)
		out = appendName(out, ImportModule)
		out = appendName(out, ImportName)
		out = append(out, 0x00)
		out = appendU32(out, w.yieldType)
	case secGlobal:
		n := r.u32()
		out = appendU32(out, n+1)
		for i := uint32(0); i < n && r.err == nil; i++ {
			out = append(out, r.byte(), r.byte()) // valtype, mutability
			out = w.constExpr(r, out)
		}
		out = append(out, 0x7f, 0x01, 0x41) // (mut i32) (i32.const Fuel)
		out = appendS32(out, Fuel)
		out = append(out, 0x0b)
	case secExport:
		n := r.u32()
		out = appendU32(out, n)
		for i := uint32(0); i < n && r.err == nil; i++ {
			out = appendName(out, r.name())
			kind := r.byte()
			idx := r.u32()
			if kind == 0x00 {
				idx = w.fn(idx)
			}
			out = append(out, kind)
			out = appendU32(out, idx)
		}
	case secStart:
		out = appendU32(out, w.fn(r.u32()))
	case secElement:
		out = w.elements(r, out)
	case secCode:
		out = w.code(r, out)
	default:
		return s.body, nil
	}
	if r.err == nil && r.off != len(r.b) {
		return nil, r.fail("section %d has %d bytes after its contents", s.id, len(r.b)-r.off)
	}
	return out, r.err
}

// elements rewrites the element section's function indices.
func (w *writer) elements(r *reader, out []byte) []byte {
	n := r.u32()
	out = appendU32(out, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		out = appendU32(out, flags)
		if flags > 7 {
			r.fail("element segment with flags %d", flags)
			return out
		}
		if flags&0b011 == 0b010 { // an explicit table index
			out = appendU32(out, r.u32())
		}
		if flags&0b001 == 0 { // active: an offset
			out = w.constExpr(r, out)
		}
		if flags&0b011 != 0 { // an element kind or reference type
			out = append(out, r.byte())
		}
		count := r.u32()
		out = appendU32(out, count)
		for j := uint32(0); j < count && r.err == nil; j++ {
			if flags&0b100 == 0 {
				out = appendU32(out, w.fn(r.u32()))
			} else {
				out = w.constExpr(r, out)
			}
		}
	}
	return out
}

// constExpr copies a constant expression, through its end.
func (w *writer) constExpr(r *reader, out []byte) []byte {
	for r.err == nil {
		var op byte
		out, op, _ = w.instr(r, out)
		if op == 0x0b {
			break
		}
	}
	return out
}

// code rewrites the code section: a check at the head of every loop, and on entry to every
// function that calls another.
func (w *writer) code(r *reader, out []byte) []byte {
	n := r.u32()
	out = appendU32(out, n)
	var body []byte
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		base := r.base + r.off
		br := &reader{b: r.bytes(int(size)), base: base}
		if r.err != nil {
			return out
		}
		groups := br.u32()
		locals := 0
		for j := uint32(0); j < groups && br.err == nil; j++ {
			if locals += int(br.u32()); locals > maxLocals {
				r.err = br.fail("a function with more than %d locals", maxLocals)
				return out
			}
			if t := br.byte(); t == 0x63 || t == 0x64 { // a reference with a heap type
				br.leb(5)
			}
		}
		decl := br.b[:br.off]
		body = body[:0]
		calls := false
		for br.off < len(br.b) && br.err == nil {
			var op byte
			var call bool
			body, op, call = w.instr(br, body)
			calls = calls || call
			if op == 0x03 {
				body = append(body, w.check...)
			}
		}
		if br.err != nil {
			r.err = br.err
			return out
		}
		size = uint32(len(decl) + len(body))
		if calls {
			size += uint32(len(w.check))
		}
		out = appendU32(out, size)
		out = append(out, decl...)
		if calls {
			out = append(out, w.check...)
		}
		out = append(out, body...)
	}
	return out
}

// instr copies one instruction, mapping the function index of those that have one. It
// returns the opcode (of prefixed instructions, the prefix) and whether the instruction
// calls a function.
func (w *writer) instr(r *reader, out []byte) ([]byte, byte, bool) {
	start := r.off
	op := r.byte()
	call := false
	switch {
	case op == 0x10 || op == 0x12 || op == 0xd2: // call, return_call, ref.func
		out = append(out, op)
		return appendU32(out, w.fn(r.u32())), op, op != 0xd2
	case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
		r.blockType()
	case op == 0x0c || op == 0x0d: // br, br_if
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint64(0); i <= uint64(n) && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
		call = true
	case op == 0x1c: // select t*
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.byte()
		}
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get, table.set
		r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		r.u32()
	case op == 0x41:
		r.leb(5)
	case op == 0x42:
		r.leb(10)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0: // ref.null
		r.byte()
	case op == 0xfc:
		r.prefixedFC()
	case op == 0xfd:
		r.prefixedSIMD()
	case op == 0xfe:
		r.prefixedAtomic()
	case op <= 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1:
		// no immediates
	default:
		if r.err == nil {
			r.off = start
			r.fail("instruction 0x%02x is not one the broker knows (a proposal it does not run)", op)
		}
	}
	return append(out, r.b[start:r.off]...), op, call
}

// custom returns a custom section rewritten, or keep false to drop it.
func (w *writer) custom(s section) (body []byte, keep bool, err error) {
	r := &reader{b: s.body, base: s.off}
	name := r.name()
	if r.err != nil {
		return nil, false, r.err
	}
	switch {
	case strings.HasPrefix(name, ".debug_"), name == "sourceMappingURL", name == "external_debug_info":
		return nil, false, nil
	case name == "name":
		body, err := w.names(r)
		if err != nil { // only names: the module runs as well without them
			return nil, false, nil
		}
		return body, true, nil
	}
	return s.body, true, nil
}

// names rewrites the name section's function indices (function and local names). It is
// strict where wazero is not: wazero reads a name past the end of its subsection, and then
// into the sections after it (which the rewrite may have added), so a subsection that its
// contents do not fill exactly drops the whole name section.
func (w *writer) names(r *reader) ([]byte, error) {
	out := appendName(nil, "name")
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		size := r.u32()
		sub := &reader{b: r.bytes(int(size))}
		if r.err != nil {
			break
		}
		if id == 0 { // the module's name: kept if it fills its subsection exactly
			if sub.name(); sub.err != nil || sub.off != len(sub.b) {
				return nil, errors.New("bad module name subsection")
			}
		}
		if id != 1 && id != 2 {
			out = append(out, id)
			out = appendU32(out, size)
			out = append(out, sub.b...)
			continue
		}
		var body []byte
		n := sub.u32()
		body = appendU32(body, n)
		for i := uint32(0); i < n && sub.err == nil; i++ {
			body = appendU32(body, w.fn(sub.u32()))
			if id == 1 {
				body = appendName(body, sub.name())
				continue
			}
			m := sub.u32()
			body = appendU32(body, m)
			for j := uint32(0); j < m && sub.err == nil; j++ {
				body = appendU32(body, sub.u32())
				body = appendName(body, sub.name())
			}
		}
		if sub.err != nil || sub.off != len(sub.b) {
			return nil, errors.New("bad name subsection")
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	return out, r.err
}
