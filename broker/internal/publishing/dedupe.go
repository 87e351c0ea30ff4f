package publishing

import (
	"fmt"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
)

// Dedupe is an engine's table of the message ids (broker.Draft.ID) published within its
// window, with each one's result, so that a publisher's retry of a message whose answer it
// lost is answered with the first publish's result instead of being published again.
//
// An id is entered when its message passes the gate's checks, before the hooks run (a
// duplicate never runs the plugins again, nor re-emits what they emitted), and holds the
// result once the engine has routed the message. A publish of an id still being routed
// waits for it (Batch.Settle, after the publisher's own messages are settled, so that two
// frames that share ids never wait for each other). An id whose publish failed is
// forgotten: its retry publishes.
//
// The table is bounded in bytes (entryCost): past the bound the oldest ids are forgotten
// early and counted (Evicted), never a publish refused. Ids expire in the order they were
// entered, so the oldest is at the head of one queue; expired ones go as new ones come.
type Dedupe struct {
	window   time.Duration
	maxBytes int64
	charge   func(int64) // the engine's memory budget (nil: none)
	now      func() time.Time
	evicted  func(total uint64) // told of each eviction (the engine logs)

	mu      lockrank.Mutex[lockrank.Dedupe]
	ids     map[string]*idEntry
	queue   []*idEntry // oldest first, from head
	head    int
	bytes   int64
	evicts  uint64
	expired uint64
}

// idEntry is one id in the table.
type idEntry struct {
	key     string
	at      time.Time // when it was entered
	cost    int64
	res     broker.PublishResult
	ok      bool          // the first publish succeeded: res is its result
	settled bool          // the first publish is settled (Dedupe.mu)
	wait    chan struct{} // made for the first duplicate that comes before it is settled; closed then
	gone    bool          // no longer in ids (Dedupe.mu)
}

// entryOverhead is what an id costs the table besides its key and system_id: the entry, its
// map slot and queue slot, its channel (measured with testing.AllocsPerRun-sized
// allocations: about 260 bytes on 64-bit).
const entryOverhead = 288

func entryCost(key string) int64 {
	return int64(len(key)) + 32 + entryOverhead // 32: a system_id
}

// NewDedupe makes a table of the ids of the last window, of at most maxBytes; charge, if
// not nil, is told of every byte the table takes and gives back; evicted, if not nil, of
// every id forgotten before its window ended (with the total so far).
func NewDedupe(window time.Duration, maxBytes int64, charge func(int64), evicted func(total uint64)) *Dedupe {
	return &Dedupe{window: window, maxBytes: maxBytes, charge: charge, evicted: evicted, now: time.Now, ids: make(map[string]*idEntry)}
}

// begin enters key, or returns the entry of the publish that holds it already (mine false)
// and, if that publish is not settled yet, a channel closed when it is.
func (d *Dedupe) begin(key string) (e *idEntry, mine bool, wait <-chan struct{}) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expireLocked(now)
	if e := d.ids[key]; e != nil {
		if !e.settled && e.wait == nil {
			e.wait = make(chan struct{}) // only for a duplicate that overtakes its first
		}
		if !e.settled {
			wait = e.wait
		}
		return e, false, wait
	}
	e = &idEntry{key: key, at: now, cost: entryCost(key)}
	d.ids[key] = e
	d.queue = append(d.queue, e)
	d.bytes += e.cost
	added := e.cost
	var evicted uint64
	for d.bytes > d.maxBytes && d.head < len(d.queue)-1 {
		added -= d.dropHeadLocked()
		evicted++
	}
	d.evicts += evicted
	total := d.evicts
	if d.charge != nil {
		d.charge(added)
	}
	if evicted > 0 && d.evicted != nil {
		d.evicted(total)
	}
	return e, true, nil
}

// expireLocked forgets the ids entered more than the window before now.
func (d *Dedupe) expireLocked(now time.Time) {
	freed := int64(0)
	for d.head < len(d.queue) && now.Sub(d.queue[d.head].at) >= d.window {
		freed += d.dropHeadLocked()
		d.expired++
	}
	if freed != 0 && d.charge != nil {
		d.charge(-freed)
	}
}

// dropHeadLocked forgets the oldest id and returns its cost.
func (d *Dedupe) dropHeadLocked() int64 {
	e := d.queue[d.head]
	d.queue[d.head] = nil
	d.head++
	if d.head > len(d.queue)/2 && d.head > 64 { // compact: the queue keeps what it holds
		n := copy(d.queue, d.queue[d.head:])
		clear(d.queue[n:])
		d.queue, d.head = d.queue[:n], 0
	}
	if !e.gone {
		delete(d.ids, e.key)
		e.gone = true
	}
	d.bytes -= e.cost
	return e.cost
}

// settle records the outcome of e's first publish: its result, or, if it failed, that the
// id is free again (a retry publishes).
func (d *Dedupe) settle(e *idEntry, res broker.PublishResult, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.settled = true
	if err == nil {
		e.res, e.ok = res, true
	} else if !e.gone && d.ids[e.key] == e {
		delete(d.ids, e.key)
		e.gone = true
	}
	if e.wait != nil {
		close(e.wait)
	}
}

// errConcurrentFailed answers a publish whose id's first publish, under way when it came,
// failed: the publisher's retry will publish it.
var errConcurrentFailed = fmt.Errorf("%w: a publish of the same message_id was under way and failed; retry", broker.ErrUnavailable)

// duplicate waits for the first publish of e (wait, from begin) and returns the answer to
// a duplicate of it. (e's result was written under Dedupe.mu before begin read settled, or
// before wait was closed: it is read without the lock.)
func duplicate(e *idEntry, wait <-chan struct{}) (broker.PublishResult, error) {
	if wait != nil {
		<-wait
	}
	if !e.ok {
		return broker.PublishResult{}, errConcurrentFailed
	}
	res := e.res
	res.Duplicate = true
	return res, nil
}

// DedupeStats is what a Dedupe holds, for tests and the engines' logs.
type DedupeStats struct {
	IDs              int
	Bytes            int64
	Evicted, Expired uint64
}

// Stats returns what d holds now.
func (d *Dedupe) Stats() DedupeStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DedupeStats{IDs: len(d.ids), Bytes: d.bytes, Evicted: d.evicts, Expired: d.expired}
}
