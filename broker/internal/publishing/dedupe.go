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
// The table is two generations of ids, each a map: new ids go into the current one, and
// lookups read both. The current becomes the previous one (and the previous is dropped) once
// it holds half the bound in bytes, or has been current for a whole window (every id of the
// previous is then expired). So the table holds at most maxBytes (entryCost); past it, the
// oldest half of the ids is forgotten early and counted (Evicted), never a publish refused;
// an id older than the window is ignored where it is, and dropped with its generation. Maps
// that are only added to and dropped whole cost a fraction of one map with an insert and a
// delete per publish, whose tombstones made every lookup probe further (a third of the
// publish path's CPU in BenchmarkPublishBatchIDs).
type Dedupe struct {
	window   time.Duration
	maxBytes int64
	charge   func(int64) // the engine's memory budget (nil: none)
	now      func() time.Time
	evicted  func(total uint64) // told of each eviction (the engine logs)

	mu        lockrank.Mutex[lockrank.Dedupe]
	cur, prev generation
	evicts    uint64
	expired   uint64
}

// generation is one map of ids of the table.
type generation struct {
	ids   map[string]*idEntry
	bytes int64
	start time.Time // when it became current
	last  time.Time // when its newest id was entered
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
}

// entryOverhead is what an id costs the table besides its key and system_id: the entry (112
// bytes), its map slot, and the map's slack.
const entryOverhead = 288

func entryCost(key string) int64 {
	return int64(len(key)) + 32 + entryOverhead // 32: a system_id
}

// NewDedupe makes a table of the ids of the last window, of at most maxBytes; charge, if
// not nil, is told of every byte the table takes and gives back; evicted, if not nil, of
// every eviction of ids before their window ended (with the total so far).
func NewDedupe(window time.Duration, maxBytes int64, charge func(int64), evicted func(total uint64)) *Dedupe {
	return &Dedupe{window: window, maxBytes: maxBytes, charge: charge, evicted: evicted, now: time.Now}
}

// begin enters key, or returns the entry of the publish that holds it already (mine false)
// and, if that publish is not settled yet, a channel closed when it is.
func (d *Dedupe) begin(key string, now time.Time) (e *idEntry, mine bool, wait <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur.ids == nil || now.Sub(d.cur.start) >= d.window {
		d.rotateLocked(now)
	}
	e = d.cur.ids[key]
	if e == nil {
		e = d.prev.ids[key]
	}
	if e != nil && now.Sub(e.at) < d.window {
		if !e.settled && e.wait == nil {
			e.wait = make(chan struct{}) // only for a duplicate that overtakes its first
		}
		if !e.settled {
			wait = e.wait
		}
		return e, false, wait
	}
	added := entryCost(key)
	if old := d.cur.ids[key]; old != nil { // expired, in the current generation still
		d.cur.bytes -= old.cost
		added -= old.cost
	}
	e = &idEntry{key: key, at: now, cost: entryCost(key)}
	d.cur.ids[key] = e
	d.cur.bytes += e.cost
	d.cur.last = now
	if d.charge != nil {
		d.charge(added)
	}
	if d.cur.bytes >= d.maxBytes/2 {
		d.rotateLocked(now)
	}
	return e, true, nil
}

// rotateLocked drops the previous generation and makes the current one the previous. The
// ids dropped count as evicted if the newest of them was within the window (some may have
// expired already: reading every entry's time would cost a cache miss an id), as expired
// otherwise.
func (d *Dedupe) rotateLocked(now time.Time) {
	evicted := uint64(0)
	if now.Sub(d.prev.last) < d.window {
		evicted = uint64(len(d.prev.ids))
	} else {
		d.expired += uint64(len(d.prev.ids))
	}
	if d.charge != nil && d.prev.bytes != 0 {
		d.charge(-d.prev.bytes)
	}
	n := len(d.cur.ids)
	d.prev, d.cur = d.cur, generation{ids: make(map[string]*idEntry, n), start: now}
	if evicted > 0 {
		d.evicts += evicted
		if d.evicted != nil {
			d.evicted(d.evicts)
		}
	}
}

// settle records the outcome of the first publish of each of own: its result, or, if it
// failed, that the id is free again (a retry publishes).
func (d *Dedupe) settle(own []idAt, res []broker.PublishResult, errs []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range own {
		d.settleLocked(x.e, res[x.i], errs[x.i])
	}
}

func (d *Dedupe) settleLocked(e *idEntry, res broker.PublishResult, err error) {
	e.settled = true
	if err == nil {
		e.res, e.ok = res, true
	} else {
		for _, g := range []*generation{&d.cur, &d.prev} {
			if g.ids[e.key] == e {
				delete(g.ids, e.key)
				g.bytes -= e.cost
				if d.charge != nil {
					d.charge(-e.cost)
				}
			}
		}
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
	IDs              int // expired ones included, until their generation is dropped
	Bytes            int64
	Evicted, Expired uint64
}

// Stats returns what d holds now.
func (d *Dedupe) Stats() DedupeStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DedupeStats{IDs: len(d.cur.ids) + len(d.prev.ids), Bytes: d.cur.bytes + d.prev.bytes, Evicted: d.evicts, Expired: d.expired}
}
