package plugins

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/abi"
)

// Batches are ABI v1's second optional fast path (docs/ABI.md, "Batches"): a plugin that
// exports tb_v1_on_publish_batch, with tb_v1_inbox and tb_v1_on_publish, is given a publish
// frame's messages in one call instead of one tb_v1_on_publish call each. The messages are
// written into the inbox one after the other, each as a single call's inbox (a record);
// each has a call state of its own on the host, which the host functions called during the
// batch act on (the guest says which message it is on in the batch's header), and each is
// decided as its own call would be. What it saves is the entry into the guest and the
// chain's bookkeeping per message: most of what a filter costs (BENCHMARKS.md).

const (
	// maxBatch is the most messages one batch call is given.
	maxBatch = 256
	// maxBatchInbox is the largest inbox asked for to fit a whole batch; past it, a frame is
	// split (one message alone may still need more).
	maxBatchInbox = 1 << 20
)

// batchState is an instance's batch in progress, if its plugin has batches.
type batchState struct {
	fn     api.Function // tb_v1_on_publish_batch; nil: the plugin has no batches
	states []callState  // one per message of the batch in progress, kept between batches
	n      uint32       // messages in the batch in progress; 0: none
}

// checkBatch verifies the signature of tb_v1_on_publish_batch, if the module exports it,
// and that the plugin has what a batch needs. Called after the hooks are known.
func (p *plugin) checkBatch(exports map[string]api.FunctionDefinition) error {
	def, ok := exports[abi.BatchExport]
	if !ok {
		return nil
	}
	if len(def.ParamTypes()) != 0 || len(def.ResultTypes()) != 1 || def.ResultTypes()[0] != i32 {
		return fmt.Errorf("export %s has signature %v -> %v; ABI v1 wants () -> i32 (see docs/ABI.md, \"Batches\")", abi.BatchExport, def.ParamTypes(), def.ResultTypes())
	}
	if !p.hasInbox {
		return fmt.Errorf("it exports %s but not %s, through which batches are given (see docs/ABI.md, \"Batches\")", abi.BatchExport, abi.InboxExport)
	}
	if p.exportName[abi.HookPublish] == "" {
		return fmt.Errorf("it exports %s but not tb_v1_on_publish, which the broker calls for a message published alone (see docs/ABI.md, \"Batches\")", abi.BatchExport)
	}
	p.hasBatch = p.has[abi.HookPublish] // not if the plugin's hooks leave on_publish out
	return nil
}

// batchIndexError traps a host call made in a batch whose current message is not one of it.
type batchIndexError struct{ current, count uint32 }

func (e batchIndexError) Error() string {
	return fmt.Sprintf("tinybroker ABI: a host call in a batch of %d messages with current = %d (docs/ABI.md, \"Batches\")", e.count, e.current)
}

// selectCurrent makes inst.st the call state of the batch's current message, which the
// guest keeps in the inbox: called before every host function in a batch. Not inlined: in
// each host function's body (enter) it is a call under a branch that is not taken outside a
// batch, rather than some 30 instructions and a write barrier's spills.
//
//go:noinline
func (inst *instance) selectCurrent() {
	mem := inst.gmem.buf
	at := uint64(inst.box.ptr) + abi.BatchCurrent
	cur := binary.LittleEndian.Uint32(mem[at : at+4]) // the inbox is inside memory (growInbox)
	if cur >= inst.batch.n {
		panic(batchIndexError{cur, inst.batch.n})
	}
	inst.st = &inst.batch.states[cur]
}

// batchOut is where publishBatch puts each message's outcome, by the message's index in the
// frame: as Chain.OnPublishBatch keeps them.
type batchOut struct {
	vs      []broker.PublishVerdict
	errs    []error
	stopped []bool
	owned   []bool
}

// one runs p on message i alone (tb_v1_on_publish), on *inst or an instance from the pool.
func (p *plugin) one(inst **instance, ds []broker.Draft, i int, out batchOut) {
	out.stopped[i], out.errs[i] = p.publish(inst, &ds[i], &out.vs[i], &out.owned[i])
}

// publishBatch runs p's on_publish on the messages ds[i] for i in idx, in batches on *inst
// or an instance from the pool, and leaves in *inst the instance for the caller to put back
// (nil if there is none). Each message's outcome is what publish would give it: a batch
// that fails as a whole (a trap) is run again one message at a time, so that the message
// that made it trap fails alone.
func (p *plugin) publishBatch(inst **instance, ds []broker.Draft, idx []int, out batchOut) {
	for len(idx) > 0 {
		if p.breakerOpen() {
			break // publish applies the breaker and the failure policy to each message
		}
		in := *inst
		if in == nil {
			var err error
			if in, err = p.pool.get(p); err != nil {
				break // publish tries again, and counts the failure, per message
			}
			*inst = in
		}
		m, err := in.fillBatch(ds, idx)
		var v uint64
		if err != nil {
			p.pool.discard(in)
			m = min(len(idx), maxBatch)
		} else {
			v, err = p.invokeBatch(in, m)
		}
		if err != nil { // the instance is gone: each message alone, on another
			*inst = nil
			p.failed(abi.HookPublish, err)
			for _, i := range idx[:m] {
				p.one(inst, ds, i, out)
			}
			idx = idx[m:]
			continue
		}
		if rc := int32(uint32(v)); rc != 0 { // declined: each message alone
			in.clearBatch(0, m)
			for _, i := range idx[:m] {
				p.one(inst, ds, i, out)
			}
			idx = idx[m:]
			continue
		}
		in.batched += uint64(m)
		p.settleBatch(in, ds, idx[:m], out)
		idx = idx[m:]
	}
	for _, i := range idx {
		p.one(inst, ds, i, out)
	}
}

// settleBatch takes each message's verdict and write list after a batch call of inst that
// succeeded, and applies them as publish would.
func (p *plugin) settleBatch(inst *instance, ds []broker.Draft, idx []int, out batchOut) {
	mem := inst.gmem.buf
	box := uint64(inst.box.ptr)
	le := binary.LittleEndian
	var memo headerMemo
	for k, i := range idx {
		st := &inst.batch.states[k]
		entry := mem[box+abi.BatchEntries+abi.BatchEntry*uint64(k):][:abi.BatchEntry]
		v := le.Uint64(entry[abi.EntryVerdict:])
		var err error
		if !validPublish(uint32(v), uint32(v>>32)) {
			err = malformedError{v}
		} else if rec := box + uint64(le.Uint32(entry[abi.EntryOffset:])); rec+8 > uint64(len(mem)) || le.Uint32(mem[rec+abi.InWritesCount:]) != 0 {
			inst.st = st // a write list to apply (or a record the guest moved out of memory)
			err = inst.takeWritesAt(rec)
			inst.st = &inst.own
		}
		if err != nil {
			st.reset()
			p.failed(abi.HookPublish, err)
			out.stopped[i], out.errs[i] = p.publishFailed(&ds[i], err)
			continue
		}
		p.succeeded()
		if st.passedClean(v) {
			out.stopped[i], out.errs[i] = false, nil
			continue
		}
		out.stopped[i], out.errs[i] = p.settle(st, v, &ds[i], &out.vs[i], &out.owned[i], &memo)
	}
}

// clearBatch resets the call states of a batch's messages [from, to), whose outcome is not
// taken.
func (inst *instance) clearBatch(from, to int) {
	for k := from; k < to; k++ {
		inst.batch.states[k].reset()
	}
}

// fillBatch writes as many of the messages ds[i], i in idx, as fit into the inbox as a
// batch, with a call state each, and returns how many: all of them (up to maxBatch) if an
// inbox of maxBatchInbox holds them, else as many as it holds, at least one (for which the
// guest is asked for an inbox as large as it needs).
func (inst *instance) fillBatch(ds []broker.Draft, idx []int) (int, error) {
	m := min(len(idx), maxBatch)
	if len(inst.batch.states) < m {
		inst.batch.states = append(inst.batch.states, make([]callState, m-len(inst.batch.states))...)
	}
	for k := range m {
		st := &inst.batch.states[k]
		d := &ds[idx[k]]
		st.hook, st.topic, st.payload, st.headers, st.key = abi.HookPublish, d.Topic, d.Payload, d.Headers, d.Key
	}
	if inst.box.size == 0 {
		if err := inst.growInbox(&inst.ctx, 0); err != nil {
			inst.clearBatch(0, m)
			return 0, err
		}
	}
	for {
		n, need := inst.writeBatch(m)
		var err error
		switch {
		case n == m:
			return m, nil
		case inst.box.size < maxBatchInbox: // a larger inbox, for this batch and the next ones
			err = inst.growInbox(&inst.ctx, uint32(min(need, maxBatchInbox)))
		case n > 0:
			inst.clearBatch(n, m)
			return n, nil
		case m > 1: // not even the first with the others' entries: the first alone
			inst.clearBatch(1, m)
			m = 1
		default:
			err = inst.growInbox(&inst.ctx, uint32(min(uint64(need), 1<<31)))
		}
		if err != nil {
			inst.clearBatch(0, m)
			return 0, err
		}
	}
}

// writeBatch writes the batch of the first m call states into the inbox, as many messages as
// fit, and returns how many; if not all, also the size the m of them need.
func (inst *instance) writeBatch(m int) (n, need int) {
	box := inst.box
	end := uint64(box.ptr) + uint64(box.size)
	b := inst.gmem.buf[box.ptr:end] // the inbox is inside memory (growInbox), which never shrinks
	le := binary.LittleEndian
	pos := align8(abi.BatchEntries + abi.BatchEntry*m)
	for n < m && pos < len(b) {
		l, ok := inst.writeRecord(unsafe.Pointer(&b[pos]), len(b)-pos, &inst.batch.states[n])
		if !ok {
			break
		}
		e := b[abi.BatchEntries+abi.BatchEntry*n:][:abi.BatchEntry]
		le.PutUint32(e[abi.EntryOffset:], uint32(pos))
		le.PutUint32(e[abi.EntryLength:], uint32(l))
		le.PutUint64(e[abi.EntryVerdict:], 0)
		pos = align8(pos + l)
		n++
	}
	if n > 0 {
		le.PutUint32(b[abi.BatchCount:], uint32(n))
		le.PutUint32(b[abi.BatchCurrent:], 0)
		le.PutUint64(b[8:], 0)
	}
	if n == m {
		return n, 0
	}
	need = max(pos, align8(abi.BatchEntries+abi.BatchEntry*m))
	for k := n; k < m; k++ {
		need += align8(recordNeeds(&inst.batch.states[k]))
	}
	return n, need
}

func align8(n int) int { return (n + 7) &^ 7 }

// invokeBatch calls tb_v1_on_publish_batch on inst, whose inbox holds a batch of m messages,
// and returns what it returned. A call that fails discards inst.
func (p *plugin) invokeBatch(inst *instance, m int) (uint64, error) {
	inst.uncounted[abi.HookPublish] += uint64(m) // each message is a call of on_publish
	before := inst.sampled
	inst.sampled += uint64(m)
	var start time.Time
	sample := before == 0 || before/latencySample != inst.sampled/latencySample
	if sample {
		start = time.Now()
	}
	inst.batch.n = uint32(m)
	inst.stack[0] = 0
	err := p.host.cores.acquire(p)
	if err == nil {
		inst.phase.Add(1) // call_timeout limits the batch's call as a whole
		err = inst.batch.fn.CallWithStack(&inst.ctx, inst.stack)
		inst.phase.Add(1)
		p.host.cores.release()
		err = inst.stoppedWhy(err)
	}
	inst.batch.n = 0
	inst.st = &inst.own
	if sample {
		p.metrics.observeEach(abi.HookPublish, start, m)
	}
	if inst.gmem.refused != 0 {
		err = inst.memoryRefused()
	}
	if err != nil {
		inst.clearBatch(0, m)
		p.pool.discard(inst)
		return 0, err
	}
	return inst.stack[0], nil
}
