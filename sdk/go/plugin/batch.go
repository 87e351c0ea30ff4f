package plugin

import (
	"unsafe"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// Batches (docs/ABI.md, "Batches"): built with the inbox, package onpublish also exports
// tb_v1_on_publish_batch, through which the broker gives a publish frame's messages in one
// call. The inbox then starts with a header (the count, and the current message, the one
// host calls act on), an entry per message (its record's offset and length, and its verdict,
// ours to write), then the records, each laid out as a single call's inbox with offsets from
// its own start. runPublishBatch runs the plugin's on_publish function on each message in
// turn, with inbox pointing at its record: every reader and writer works on that message
// as in a call of its own, and the Go runtime's entry into the plugin is paid once per batch.

// runPublishBatch implements tb_v1_on_publish_batch: 0 when every entry holds its message's
// verdict; 1 declines the batch (a batch that does not fit the inbox, which only a broker's
// bug could give), and the broker calls tb_v1_on_publish on each message instead. It is
// bridge.RunPublishBatch itself; fn is the function given to onpublish.Handle.
//
// What every message pays is the loop's body and the plugin's function: the checks are made
// once for the batch, the Message is reset only if the last message left something in it, and
// each record is pointed at its write list once, when its message is done.
func runPublishBatch(fn any) (rc int32) {
	f, _ := fn.(func(*Message) Verdict)
	b := box
	if len(b) < abi.BatchEntries {
		return 1
	}
	n := uint64(*(*uint32)(unsafe.Pointer(&b[abi.BatchCount])))
	if n > uint64(len(b)-abi.BatchEntries)/abi.BatchEntry {
		return 1
	}
	// The entries: (record offset, record length, verdict as two u32s), 8-byte aligned (the
	// inbox is, and abi.BatchEntries and abi.BatchEntry are multiples of 8).
	entries := unsafe.Slice((*[4]uint32)(unsafe.Pointer(&b[abi.BatchEntries])), n)
	for _, e := range entries { // every record inside the inbox, before any message is run
		if uint64(e[0])+uint64(e[1]) > uint64(len(b)) || e[1] < abi.InHeaders || e[0]%8 != 0 {
			return 1
		}
	}
	beginWrites()
	array := unsafe.SliceData(writes) // where the write lists are, unless writes grows
	returned := false
	defer func() {
		inbox, from = box, 0 // the inbox is whole again for the next call
		if !returned {
			repanic(recover())
		}
		end()
	}()
	current := (*uint32)(unsafe.Pointer(&b[abi.BatchCurrent]))
	call.hook = abi.HookPublish
	m := &messages[0] // on_publish's (messages is indexed from abi.HookPublish)
	for i := range entries {
		e := &entries[i]
		*current = uint32(i)
		rec := b[e[0] : e[0]+e[1] : e[0]+e[1]]
		inbox, from = rec, len(writes)
		// A call of its own for each message, as begin starts one: a Message kept from
		// one message and used in the next is caught.
		call.gen++
		if call.gen == 0 {
			call.gen = 1
		}
		if m.have != 0 || len(m.changes) != 0 || len(m.headers) != 0 { // message, written out
			m.reset()
		}
		m.gen = call.gen
		var v int64
		if f != nil {
			vd := f(m)
			if vd.reason != "" {
				setReason(vd.reason)
			}
			v = int64(uint64(vd.action) | uint64(vd.arg)<<32)
		}
		if len(writes) > from {
			setWrites(rec, writes[from:])
		}
		*(*int64)(unsafe.Pointer(&e[2])) = v
	}
	if len(writes) > 0 && unsafe.SliceData(writes) != array {
		fixWrites(entries, b)
	}
	returned = true
	return 0
}

// fixWrites points each of the batch's write lists at its part of writes, where they all are
// in order: a message's list was set when it was done, but writes has moved to a larger array
// since, which the broker must read.
func fixWrites(entries [][4]uint32, b []byte) {
	at := 0
	for _, e := range entries {
		rec := b[e[0] : e[0]+e[1]]
		c := int(*(*uint32)(unsafe.Pointer(&rec[abi.InWritesCount])))
		if c > 0 {
			setWrites(rec, writes[at:at+c])
			at += c
		}
	}
}
