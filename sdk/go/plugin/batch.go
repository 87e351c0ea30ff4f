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
// bug could give), and the broker calls tb_on_publish on each message instead.
func runPublishBatch(f func(*Message) Verdict) (rc int32) {
	b := box
	if len(b) < abi.BatchEntries {
		return 1
	}
	n := int(*(*uint32)(unsafe.Pointer(&b[abi.BatchCount])))
	if n > (len(b)-abi.BatchEntries)/abi.BatchEntry {
		return 1
	}
	for i := range n { // every record inside the inbox, before any message is run
		e := (*[2]uint32)(unsafe.Pointer(&b[abi.BatchEntries+abi.BatchEntry*i]))
		if uint64(e[0])+uint64(e[1]) > uint64(len(b)) || e[1] < abi.InHeaders || e[0]%8 != 0 {
			return 1
		}
	}
	beginWrites()
	returned := false
	defer finishBatch(&returned)
	current := (*uint32)(unsafe.Pointer(&b[abi.BatchCurrent]))
	call.hook = abi.HookPublish
	for i := range n {
		e := (*[4]uint32)(unsafe.Pointer(&b[abi.BatchEntries+abi.BatchEntry*i]))
		*current = uint32(i)
		inbox = b[e[0] : e[0]+e[1] : e[0]+e[1]]
		from = len(writes)
		// A call of its own for each message, as begin starts one: a Message kept from
		// one message and used in the next is caught.
		call.gen++
		if call.gen == 0 {
			call.gen = 1
		}
		var v int64
		if f != nil {
			vd := f(message(abi.HookPublish, call.gen))
			if vd.reason != "" {
				setReason(vd.reason)
			}
			v = int64(uint64(vd.action) | uint64(vd.arg)<<32)
		}
		*(*int64)(unsafe.Pointer(&e[2])) = v
	}
	if len(writes) > 0 {
		fixWrites(b, n)
	}
	returned = true
	return 0
}

// fixWrites points each of the batch's n write lists at its part of writes, where they all
// are in order: a message's list was set when it was written, but writes may have moved to a
// larger array since, which the broker must read.
func fixWrites(b []byte, n int) {
	at := 0
	for i := range n {
		e := (*[2]uint32)(unsafe.Pointer(&b[abi.BatchEntries+abi.BatchEntry*i]))
		rec := b[e[0] : e[0]+e[1]]
		c := int(*(*uint32)(unsafe.Pointer(&rec[abi.InWritesCount])))
		if c > 0 {
			setWrites(rec, writes[at:at+c])
			at += c
		}
	}
}

// finishBatch is finish for a batch: the inbox is whole again for the next call.
func finishBatch(returned *bool) {
	inbox, from = box, 0
	finish(returned)
}
