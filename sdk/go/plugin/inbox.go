package plugin

import (
	"unsafe"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The inbox (docs/ABI.md, "The inbox"): the broker writes each call's message and event into
// a buffer the SDK gives it (tb_v1_inbox, in host_wasip1.go), before the call. The readers
// take them from there, copied (interned when short) as if read with a host call, because a
// plugin may keep what it read and the broker overwrites the inbox at the next call. The
// setters of the payload and headers, and the reason, are listed in the write list for the
// broker to apply when the hook returns. A broker that never asks for the inbox is served
// with host calls, as before: inbox stays nil.

var (
	inbox  []byte      // nil: the broker did not ask for one; in a batch, the current message's record
	box    []byte      // the whole inbox, which a batch's records are in (batch.go)
	writes [][5]uint32 // the write list of the call in progress (of a batch: of all its messages)
	from   int         // the first record of the current message's write list: 0 but in a batch
	kept   []string    // what its records point to, kept alive until the next call
)

// newInbox implements tb_v1_inbox: a buffer of size bytes, 8-byte aligned (the words of a
// []uint64), which the Go runtime never moves.
func newInbox(size uint32) uint32 {
	words := make([]uint64, (uint64(size)+7)/8)
	inbox = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)
	box = inbox
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(inbox))))
}

// inU32 reads the u32 at off: WebAssembly is little-endian, and the inbox 8-byte aligned.
func inU32(off int) uint32 {
	_ = inbox[off+3]
	return *(*uint32)(unsafe.Pointer(&inbox[off]))
}

// inField returns the value whose (offset, length) pair is at off, not copied; ok is false
// if it is absent.
func inField(off int) (b []byte, ok bool) {
	at, n := inU32(off), inU32(off+4)
	if n == ^uint32(0) || uint64(at)+uint64(n) > uint64(len(inbox)) {
		return nil, false
	}
	return inbox[at : at+n], true
}

// inString returns the value at off as a string of its own.
func inString(off int) (string, bool) {
	b, ok := inField(off)
	return intern(b), ok
}

// inHeader returns the value of header key, not copied. Written out, with no call but the
// comparison: a function call costs a Go plugin 20–30 ns.
func inHeader(key string) ([]byte, bool) {
	b := inbox
	if len(b) < abi.InHeaders {
		return nil, false
	}
	n := int(*(*uint32)(unsafe.Pointer(&b[abi.InHeaderCount])))
	for i := range n {
		at := abi.InHeaders + abi.InEntry*i
		_ = b[at+abi.InEntry-1] // the entry is inside the inbox: read it whole
		e := (*[4]uint32)(unsafe.Pointer(&b[at]))
		if int(e[1]) != len(key) || uint64(e[0])+uint64(e[1]) > uint64(len(b)) {
			continue
		}
		if string(b[e[0]:e[0]+e[1]]) == key { // compared in place
			if uint64(e[2])+uint64(e[3]) > uint64(len(b)) {
				return nil, false
			}
			return b[e[2] : e[2]+e[3]], true
		}
	}
	return nil, false
}

// beginWrites empties the write list: each call starts one of its own.
func beginWrites() {
	if len(writes) > 0 {
		clear(kept)
		writes, kept, from = writes[:0], kept[:0], 0
	}
}

func addrOf(s string) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))) }

// write lists a write whose values are a and b: the current message's list is writes[from:].
func write(op uint32, a, b string) {
	kept = append(kept, a, b)
	writes = append(writes, [5]uint32{op, addrOf(a), uint32(len(a)), addrOf(b), uint32(len(b))})
	setWrites(inbox, writes[from:])
}

// setWrites points the write list of rec, an inbox or a batch's record, at list.
func setWrites(rec []byte, list [][5]uint32) {
	w := rec[abi.InWritesPtr : abi.InWritesPtr+8]
	p, n := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(list)))), uint32(len(list))
	w[0], w[1], w[2], w[3] = byte(p), byte(p>>8), byte(p>>16), byte(p>>24)
	w[4], w[5], w[6], w[7] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
}

// The writers check what the broker would (the write list carries no statuses) and return
// the status the host function would have.

func inSetPayload(p []byte) int32 {
	switch {
	case inU32(abi.InHook) != uint32(abi.HookPublish):
		return abi.StatusNotAllowed
	case uint64(len(p)) > uint64(inU32(abi.InMaxMessage)):
		return abi.StatusTooLarge
	}
	write(abi.OpSetPayload, unsafe.String(unsafe.SliceData(p), len(p)), "") // kept: the Message holds p
	return abi.StatusOK
}

func mayChangeHeaders() bool {
	h := inU32(abi.InHook)
	return h == uint32(abi.HookPublish) || h == uint32(abi.HookRedeliver)
}

func inSetHeader(key, value string) int32 {
	switch {
	case !mayChangeHeaders():
		return abi.StatusNotAllowed
	case key == "":
		return abi.StatusInvalid
	case uint64(len(key))+uint64(len(value)) > uint64(inU32(abi.InMaxHeader)):
		return abi.StatusTooLarge
	}
	write(abi.OpSetHeader, key, value)
	return abi.StatusOK
}

func inDelHeader(key string) int32 {
	if !mayChangeHeaders() {
		return abi.StatusNotAllowed
	}
	write(abi.OpDelHeader, key, "")
	return abi.StatusOK
}

// setReason sets the reason of the call's verdict.
func setReason(reason string) {
	if inbox == nil {
		hostSetReason(reason)
		return
	}
	write(abi.OpSetReason, reason, "")
}
