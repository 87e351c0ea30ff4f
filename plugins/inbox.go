package plugins

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The inbox is ABI v1's optional fast path (docs/ABI.md, "The inbox"): a plugin that exports
// tb_v1_inbox gives the host a buffer in its memory, the host writes the call's message and
// event into it before every call, and the plugin reads them there, with no host call; the
// changes it makes to the payload and headers, and its reason, it lists in its own memory
// (the write list) for the host to apply after the call. A filter then costs one transition
// between the host and the guest instead of two or three, and wazero's transitions are most
// of what a plugin call costs (BENCHMARKS.md). Old plugins, which do not export it, are
// called as before.

// inboxMin is the size asked for first: a message of a few hundred bytes and some headers
// fits, so most plugins are asked once per instance. The layout is internal/abi's.
const inboxMin = 4096

var opNames = [...]string{abi.OpSetPayload: "set_payload", abi.OpSetHeader: "set_header", abi.OpDelHeader: "del_header", abi.OpSetReason: "set_reason"}

// inbox is an instance's inbox, if its module exports tb_v1_inbox.
type inbox struct {
	alloc     api.Function // tb_v1_inbox; nil: the plugin has no inbox
	ptr, size uint32       // the buffer the guest gave; size 0 until it was asked
}

// inboxError is an inbox that could not be had: the call fails, like a trap.
type inboxError struct{ msg string }

func (e inboxError) Error() string { return "tinybroker ABI: " + abi.InboxExport + ": " + e.msg }

// writesError is a write list the host cannot apply: a malformed answer, like a malformed
// verdict (the call completed, so the instance stays).
type writesError struct{ msg string }

func (e writesError) Error() string { return "malformed write list: " + e.msg }

// checkInbox verifies the signature of tb_v1_inbox, if the module exports it.
func (p *plugin) checkInbox(exports map[string]api.FunctionDefinition) error {
	def, ok := exports[abi.InboxExport]
	if !ok {
		return nil
	}
	if len(def.ParamTypes()) != 1 || def.ParamTypes()[0] != i32 || len(def.ResultTypes()) != 1 || def.ResultTypes()[0] != i32 {
		return fmt.Errorf("export %s has signature %v -> %v; ABI v1 wants (i32) -> i32 (see docs/ABI.md, \"The inbox\")", abi.InboxExport, def.ParamTypes(), def.ResultTypes())
	}
	p.hasInbox = true
	return nil
}

// fillInbox writes the call's message and event into the inbox, first asking the guest for a
// larger one if they do not fit. ctx is the call's.
//
// What it costs is what a plugin call saves by not calling the host, so writeRecord is
// written for speed.
func (inst *instance) fillInbox(ctx *callCtx) error {
	for !inst.writeInbox() {
		n := recordNeeds(inst.st)
		if uint64(n) > math.MaxUint32 {
			return inboxError{fmt.Sprintf("the message needs %d bytes, more than a 32-bit memory holds", n)}
		}
		if inst.box.size == 0 {
			n = 0 // the first inbox: the usual size
		}
		if err := inst.growInbox(ctx, uint32(n)); err != nil {
			return err
		}
	}
	return nil
}

// writeInbox writes the call into the inbox and reports whether it fitted (false also when
// the guest has not been asked for an inbox yet).
func (inst *instance) writeInbox() bool {
	r, size := inst.inbox()
	if r == nil {
		return false
	}
	_, ok := inst.writeRecord(r, size, inst.st)
	return ok
}

// inbox returns the address and size of the inbox in guest memory, or nil if the guest has not
// been asked for one yet.
func (inst *instance) inbox() (unsafe.Pointer, int) {
	box := inst.box
	mem := inst.gmem.buf
	if box.size == 0 || uint64(box.ptr)+uint64(box.size) > uint64(len(mem)) { // memory never shrinks: only a bug of ours could get the second
		return nil, 0
	}
	return unsafe.Add(unsafe.Pointer(unsafe.SliceData(mem)), box.ptr), int(box.size)
}

// writeRecord writes the message and event of st into the size bytes at r, with offsets from
// r, and the broker's limits, if they fit, and returns the length written; otherwise the
// length they need.
//
// It runs before every plugin call, and for each message of a batch, so it is written for
// speed: once the size is checked, every store goes through a pointer, with no bounds check,
// and the payload, the one long value, is copied last, so that nothing else is live across
// the call to memmove. The order of the values is the host's to choose: docs/ABI.md gives
// each one's offset.
func (inst *instance) writeRecord(r unsafe.Pointer, size int, st *callState) (int, bool) {
	n := recordNeeds(st)
	if n > size {
		return n, false
	}
	limits := &inst.p.host.opts
	put64(r, abi.InWritesPtr, 0)
	put32(r, abi.InHook, uint32(st.hook))
	put32(r, abi.InMaxMessage, uint32(limits.MaxMessageBytes))
	put32(r, abi.InMaxHeader, uint32(limits.MaxHeaderBytes))
	put32(r, abi.InAttempt, st.attempt)
	put64(r, abi.InInFlight, uint64(st.inFlight))
	put32(r, abi.InHeaderCount, uint32(len(st.headers)))
	put32(r, abi.InFlags, 0)
	pos := uint32(abi.InHeaders + abi.InEntry*len(st.headers))
	// The topic and the headers' names and values, most often short, are copied by copyShort,
	// written out here rather than through putValue: the call would cost more than the copy.
	put64(r, abi.InTopic, uint64(len(st.topic))<<32|uint64(pos))
	if !copyShort(r, pos, st.topic) {
		copyAt(r, pos, st.topic)
	}
	pos += uint32(len(st.topic))
	e := uintptr(abi.InHeaders)
	for _, x := range st.headers { // sorted by name, as the inbox wants them
		put64(r, e, uint64(len(x.Key))<<32|uint64(pos))
		if !copyShort(r, pos, x.Key) {
			copyAt(r, pos, x.Key)
		}
		pos += uint32(len(x.Key))
		put64(r, e+8, uint64(len(x.Value))<<32|uint64(pos))
		if !copyShort(r, pos, x.Value) {
			copyAt(r, pos, x.Value)
		}
		pos += uint32(len(x.Value))
		e += abi.InEntry
	}
	if st.hook == abi.HookPublish { // no event: the id absent, the rest empty (at offset 0)
		put64(r, abi.InID, abi.AbsentLen<<32)
		put64(r, abi.InSub, 0)
		put64(r, abi.InGroup, 0)
		put64(r, abi.InReason, 0)
	} else {
		if st.hook == abi.HookInit || st.hook == abi.HookTick { // no message: no id
			put64(r, abi.InID, abi.AbsentLen<<32)
		} else {
			pos = putValue(r, abi.InID, pos, st.id)
		}
		pos = putValue(r, abi.InSub, pos, st.sub)
		pos = putValue(r, abi.InGroup, pos, st.group)
		pos = putValue(r, abi.InReason, pos, st.reason)
	}
	put64(r, abi.InPayload, uint64(len(st.payload))<<32|uint64(pos))
	copyAt(r, pos, unsafe.String(unsafe.SliceData(st.payload), len(st.payload))) // only copied
	return n, true
}

// recordNeeds is the size the call's message and event take in the inbox.
func recordNeeds(st *callState) int {
	n := abi.InHeaders + len(st.topic) + len(st.payload) + len(st.sub) + len(st.group) + len(st.reason) + len(st.id)
	for _, x := range st.headers {
		n += abi.InEntry + len(x.Key) + len(x.Value)
	}
	return n
}

// put32 and put64 store v, little-endian, at r+off, which the caller has checked is inside
// the record.
func put32(r unsafe.Pointer, off uintptr, v uint32) {
	binary.LittleEndian.PutUint32((*[4]byte)(unsafe.Add(r, off))[:], v)
}

func put64(r unsafe.Pointer, off uintptr, v uint64) {
	binary.LittleEndian.PutUint64((*[8]byte)(unsafe.Add(r, off))[:], v)
}

// putValue copies s to r+pos, writes its (offset, length) at r+at, and returns the next pos;
// the caller has checked that s fits.
func putValue(r unsafe.Pointer, at uintptr, pos uint32, s string) uint32 {
	put64(r, at, uint64(len(s))<<32|uint64(pos))
	copyAt(r, pos, s)
	return pos + uint32(len(s))
}

// copyAt copies s to r+pos, which the caller has checked has room for it.
func copyAt(r unsafe.Pointer, pos uint32, s string) {
	copy(unsafe.Slice((*byte)(unsafe.Add(r, pos)), len(s)), s)
}

// growInbox asks the guest, through tb_v1_inbox, for an inbox of at least n bytes (a power of
// two, so that a plugin whose messages grow is asked a few times, not on every call) and
// checks the buffer it gives.
func (inst *instance) growInbox(ctx *callCtx, n uint32) error {
	want := uint32(inboxMin)
	if n > want {
		if n > 1<<31 {
			want = n
		} else {
			want = 1 << bits.Len32(n-1)
		}
	}
	inst.stack[0] = uint64(want)
	if err := inst.box.alloc.CallWithStack(ctx, inst.stack); err != nil {
		return err
	}
	ptr := uint32(inst.stack[0])
	size := len(inst.gmem.buf)
	switch {
	case ptr == 0:
		return inboxError{fmt.Sprintf("asked for %d bytes, it returned 0 (no buffer)", want)}
	case ptr%8 != 0:
		return inboxError{fmt.Sprintf("asked for %d bytes, it returned %d, which is not a multiple of 8", want, ptr)}
	case uint64(ptr)+uint64(want) > uint64(size):
		return inboxError{fmt.Sprintf("asked for %d bytes, it returned %d, whose %d bytes are outside the plugin's memory (%d bytes)", want, ptr, want, size)}
	}
	inst.box.ptr, inst.box.size = ptr, want
	return nil
}

// takeWrites applies the write list the guest left in its inbox, after a call that
// succeeded, with the checks the host functions make: a record out of bounds, of an unknown
// kind, or that the host function would refuse (it returns no status to the guest, which
// must check first what it can; docs/ABI.md) makes the answer malformed, and the call fails.
// Nothing of such a call is applied: the caller resets the call state.
func (inst *instance) takeWrites() error { return inst.takeWritesAt(uint64(inst.box.ptr)) }

// wroteSome reports whether the call may have left a write list: false only if its count in
// the inbox is 0, which is most calls, told with one load instead of a call of takeWrites.
func (inst *instance) wroteSome() bool {
	at := uint64(inst.box.ptr) + abi.InWritesCount
	mem := inst.gmem.buf
	return at+4 > uint64(len(mem)) || binary.LittleEndian.Uint32(mem[at:]) != 0
}

// takeWritesAt is takeWrites for the write list of the record at head, into the call state
// inst.st.
func (inst *instance) takeWritesAt(head uint64) error {
	mem := inst.gmem.buf
	if head+8 > uint64(len(mem)) {
		return writesError{"the inbox is outside the plugin's memory"}
	}
	le := binary.LittleEndian
	ptr, count := le.Uint32(mem[head+abi.InWritesPtr:]), le.Uint32(mem[head+abi.InWritesCount:])
	if count == 0 {
		return nil
	}
	end := uint64(ptr) + uint64(count)*abi.WriteSize
	if end > uint64(len(mem)) {
		return writesError{fmt.Sprintf("%d records at %d end at %d, outside the plugin's memory (%d bytes)", count, ptr, end, len(mem))}
	}
	st := inst.st
	recs := mem[ptr:end]
	for i := range uint64(count) {
		r := (*[abi.WriteSize]byte)(recs[i*abi.WriteSize:]) // one bounds check for the record's five fields
		op := le.Uint32(r[0:])
		a, aOK := span(mem, le.Uint32(r[4:]), le.Uint32(r[8:]))
		b, bOK := span(mem, le.Uint32(r[12:]), le.Uint32(r[16:]))
		if !aOK || !bOK {
			k := 0
			if aOK {
				k = 1
			}
			p, n := le.Uint32(r[4+8*k:]), le.Uint32(r[8+8*k:])
			return writesError{fmt.Sprintf("record %d: pointer %d length %d is outside the plugin's memory (%d bytes)", i, p, n, len(mem))}
		}
		var rc int32
		switch op {
		case abi.OpSetPayload:
			if rc = inst.payloadStatus(uint32(len(a))); rc == abi.StatusOK {
				inst.setPayload(a)
			}
		case abi.OpSetHeader:
			rc = inst.setHeader(inst.internBytes(a), inst.internBytes(b))
		case abi.OpDelHeader:
			rc = inst.delHeader(inst.internBytes(a))
		case abi.OpSetReason:
			st.dirty = true
			st.why = inst.internBytes(a)
		default:
			return writesError{fmt.Sprintf("record %d: unknown operation %d (1 set_payload, 2 set_header, 3 del_header, 4 set_reason)", i, op)}
		}
		if rc != abi.StatusOK {
			return writesError{fmt.Sprintf("record %d (%s) refused with status %d (%s): check it before writing it (docs/ABI.md, \"The write list\")", i, opNames[op], rc, statusName(rc))}
		}
	}
	return nil
}

// span returns mem[ptr, ptr+n), or false if it is out of bounds; an empty range is valid
// whatever ptr is, as in the host functions.
func span(mem []byte, ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	end := uint64(ptr) + uint64(n)
	if end > uint64(len(mem)) {
		return nil, false
	}
	return mem[ptr:end], true
}

func statusName(rc int32) string {
	switch rc {
	case abi.StatusInvalid:
		return "ERR_INVALID"
	case abi.StatusTooLarge:
		return "ERR_TOO_LARGE"
	case abi.StatusNotAllowed:
		return "ERR_NOT_ALLOWED"
	case abi.StatusLimit:
		return "ERR_LIMIT"
	case abi.StatusConflict:
		return "ERR_CONFLICT"
	}
	return "OK"
}
