package plugin

import (
	"math"
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
//
//lint:ignore U1000 called by tb_v1_inbox in host_inbox_wasip1.go, which the host's pass does not build
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

// inHeader returns the value of header key, not copied. Header has the common case, a key
// that is not empty, written out; this is for the rest.
func inHeader(key string) ([]byte, bool) {
	b := inbox
	if len(b) < abi.InHeaders {
		return nil, false
	}
	for _, e := range inEntries(b) {
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

// inEntries returns the header entries (name offset, name length, value offset, value
// length) of rec, an inbox or a batch's record at least abi.InHeaders long: as many as its
// count says, but no more than rec holds, so that ranging over them needs no bounds check.
// The entries are 4-byte aligned: rec is 8-byte aligned (as the inbox, and a batch's records
// are checked to be) and abi.InHeaders a multiple of 8. They are sliced from an array pointer
// rather than made with unsafe.Slice, which would call the runtime to check n*16.
func inEntries(rec []byte) [][4]uint32 {
	n := uint64(*(*uint32)(unsafe.Pointer(&rec[abi.InHeaderCount])))
	n = min(n, uint64(len(rec)-abi.InHeaders)/abi.InEntry)
	return (*[maxInEntries][4]uint32)(unsafe.Pointer(&rec[abi.InHeaders]))[:n:n]
}

// maxInEntries bounds the entries of an inbox: more would not fit the 4 GiB of a wasm32 memory.
// Where int has 32 bits (plugintest on 386 or arm), an array type of 4 GiB is larger than the
// address space: there the bound is 1 GiB of entries, far above the broker's max_headers.
const maxInEntries = min(1<<28, math.MaxInt/32)

// sameBytes reports whether the n bytes at p and at q are equal, with no function call
// (comparing strings with == calls runtime.memequal, which calls memeqbody: two calls, which
// cost a Go plugin more than the comparison) and few branches, each of which may cost a Go
// plugin a jump through its function's br_table: 8 bytes at a time, then the rest in one or
// two 4-byte words (the last of which may overlap bytes already compared); under 4 bytes,
// byte by byte. Both must hold n bytes: every pointer it forms points inside them. Equality
// does not depend on the byte order, and WebAssembly loads unaligned words (as do the native
// targets the tests run on). Small enough to be inlined.
func sameBytes(p, q unsafe.Pointer, n uintptr) bool {
	i := uintptr(0)
	for ; i+8 <= n; i += 8 {
		if *(*uint64)(unsafe.Add(p, i)) != *(*uint64)(unsafe.Add(q, i)) {
			return false
		}
	}
	if n >= 4 {
		return (i+4 >= n || *(*uint32)(unsafe.Add(p, i)) == *(*uint32)(unsafe.Add(q, i))) &&
			*(*uint32)(unsafe.Add(p, n-4)) == *(*uint32)(unsafe.Add(q, n-4))
	}
	for j := range n {
		if *(*byte)(unsafe.Add(p, j)) != *(*byte)(unsafe.Add(q, j)) {
			return false
		}
	}
	return true
}

// beginWrites empties the write list: each call starts one of its own.
func beginWrites() {
	if len(writes) > 0 {
		// What the last call kept is let go: by a loop for the few a call or two keep, cheaper
		// than clear's three function calls (a loop of kept[i] = "" would be compiled into
		// clear).
		if len(kept) <= 16 {
			for i := range kept {
				k := &kept[i]
				*k = ""
			}
		} else {
			clear(kept)
		}
		writes, kept, from = writes[:0], kept[:0], 0
	}
}

func addrOf(s string) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))) }

// write lists a write whose values are a and b: the current message's list is writes[from:].
// The inbox (or the batch's record) is pointed at the list once the hook has returned
// (endWrites, and the batch loop), not at every write: writes may still move to a larger
// array.
func write(op uint32, a, b string) {
	kept = append(kept, a, b)
	writes = append(writes, [5]uint32{op, addrOf(a), uint32(len(a)), addrOf(b), uint32(len(b))})
}

// endWrites points the inbox at the call's write list, if it has one, when the hook has
// returned (not in a batch: the batch loop points each record at its own).
func endWrites() {
	if len(writes) > 0 {
		setWrites(inbox, writes)
	}
}

// setWrites points the write list of rec, an inbox or a batch's record, at list: its address
// and its length, the two u32s at abi.InWritesPtr, in one little-endian store (WebAssembly is
// little-endian, and so are the hosts the SDK's native tests run on, as inU32 assumes).
func setWrites(rec []byte, list [][5]uint32) {
	_ = rec[abi.InWritesPtr+7]
	p := uint64(uint32(uintptr(unsafe.Pointer(unsafe.SliceData(list)))))
	*(*uint64)(unsafe.Pointer(&rec[abi.InWritesPtr])) = p | uint64(len(list))<<32
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
