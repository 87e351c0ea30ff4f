package publishing

import (
	"fmt"
	"hash/maphash"
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
	seeds    [2]maphash.Seed

	mu        lockrank.Mutex[lockrank.Dedupe]
	cur, prev generation
	waits     map[idKey]chan struct{} // closed when the id's first publish is settled
	evicts    uint64
	expired   uint64
}

// idKey is a key's 128 bits under the table's random seeds (maphash): the table keeps no
// string, and its maps hold no pointer, so the garbage collector never scans them. Two keys
// share an idKey with a probability of 2^-128; a publisher cannot aim at one without the
// seeds, which never leave the process.
type idKey [2]uint64

// generation is one map of ids of the table.
type generation struct {
	ids   map[idKey]idEntry
	drops map[idKey]dropped // the results that name a plugin's drop (rare: strings kept apart)
	bytes int64
	start time.Time // when it became current
	last  time.Time // when its newest id was entered
}

// idEntry is one id in the table, and its first publish's result once settled.
type idEntry struct {
	at      int64 // when it was entered, in Unix nanoseconds
	seq     uint64
	routed  int32
	settled bool
	idLen   uint8
	sysID   [maxSystemID]byte
}

// dropped is the plugin verdict of a result.
type dropped struct{ by, reason string }

// maxSystemID is the longest system_id the table keeps in place (a sysid's 22 characters);
// a result with a longer one is not remembered (its id's retry publishes again).
const maxSystemID = 32

// entryCost is what an id costs the table: its slot (key and entry, 72 bytes) in a map kept
// at most 7/8 full and grown by doubling.
const entryCost = 160

// NewDedupe makes a table of the ids of the last window, of at most maxBytes; charge, if
// not nil, is told of every byte the table takes and gives back; evicted, if not nil, of
// every eviction of ids before their window ended (with the total so far).
func NewDedupe(window time.Duration, maxBytes int64, charge func(int64), evicted func(total uint64)) *Dedupe {
	return &Dedupe{window: window, maxBytes: maxBytes, charge: charge, evicted: evicted, now: time.Now,
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
}

func (d *Dedupe) key(s string) idKey {
	return idKey{maphash.String(d.seeds[0], s), maphash.String(d.seeds[1], s)}
}

// begin enters key s, or says that a publish holds it already (mine false), with that
// publish's result if it is settled, or else a channel closed when it is.
func (d *Dedupe) begin(s string, now time.Time) (k idKey, mine bool, wait <-chan struct{}, res broker.PublishResult) {
	k = d.key(s)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur.ids == nil || now.Sub(d.cur.start) >= d.window {
		d.rotateLocked(now)
	}
	g := &d.cur
	e, found := d.cur.ids[k]
	if !found {
		g = &d.prev
		e, found = d.prev.ids[k]
	}
	if found && now.UnixNano()-e.at < int64(d.window) {
		if e.settled {
			return k, false, nil, g.resultLocked(k, &e)
		}
		w := d.waits[k]
		if w == nil { // only for a duplicate that overtakes its first
			if d.waits == nil {
				d.waits = make(map[idKey]chan struct{})
			}
			w = make(chan struct{})
			d.waits[k] = w
		}
		return k, false, w, broker.PublishResult{}
	}
	added := int64(entryCost)
	if _, old := d.cur.ids[k]; old { // expired, in the current generation still
		added = 0
	} else {
		d.cur.bytes += entryCost
	}
	d.cur.ids[k] = idEntry{at: now.UnixNano()}
	d.cur.last = now
	if d.charge != nil && added != 0 {
		d.charge(added)
	}
	if d.cur.bytes >= d.maxBytes/2 {
		d.rotateLocked(now)
	}
	return k, true, nil, broker.PublishResult{}
}

// resultLocked is the result e (of k, in g) records.
func (g *generation) resultLocked(k idKey, e *idEntry) broker.PublishResult {
	res := broker.PublishResult{Seq: e.seq, SystemID: string(e.sysID[:e.idLen]), Routed: int(e.routed), Duplicate: true}
	if dr, ok := g.drops[k]; ok {
		res.DroppedBy, res.DropReason = dr.by, dr.reason
	}
	return res
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
	d.prev, d.cur = d.cur, generation{ids: make(map[idKey]idEntry, n), start: now}
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
		d.settleLocked(x.k, res[x.i], errs[x.i])
	}
}

func (d *Dedupe) settleLocked(k idKey, res broker.PublishResult, err error) {
	g := &d.cur
	e, found := d.cur.ids[k]
	if !found {
		g = &d.prev
		e, found = d.prev.ids[k]
	}
	if found && !e.settled {
		if err == nil && len(res.SystemID) <= maxSystemID {
			e.settled, e.seq, e.routed = true, res.Seq, int32(res.Routed)
			e.idLen = uint8(copy(e.sysID[:], res.SystemID))
			g.ids[k] = e
			if res.DroppedBy != "" || res.DropReason != "" {
				if g.drops == nil {
					g.drops = make(map[idKey]dropped)
				}
				g.drops[k] = dropped{res.DroppedBy, res.DropReason}
			}
		} else {
			delete(g.ids, k)
			g.bytes -= entryCost
			if d.charge != nil {
				d.charge(-entryCost)
			}
		}
	}
	if w := d.waits[k]; w != nil {
		delete(d.waits, k)
		close(w)
	}
}

// errConcurrentFailed answers a publish whose id's first publish, under way when it came,
// failed: the publisher's retry will publish it.
var errConcurrentFailed = fmt.Errorf("%w: a publish of the same message_id was under way and failed; retry", broker.ErrUnavailable)

// duplicate returns the answer to a duplicate of the id x names: its first publish's result
// (x.res, or after waiting on x.wait the table's), or errConcurrentFailed if that failed.
func (d *Dedupe) duplicate(x idAt) (broker.PublishResult, error) {
	if x.wait == nil {
		return x.res, nil
	}
	<-x.wait
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range []*generation{&d.cur, &d.prev} {
		if e, ok := g.ids[x.k]; ok && e.settled {
			return g.resultLocked(x.k, &e), nil
		}
	}
	return broker.PublishResult{}, errConcurrentFailed
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
