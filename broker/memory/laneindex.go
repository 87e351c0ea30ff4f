package memory

import (
	"hash/maphash"
	"iter"
)

// laneIndex finds a keyed queue's ordered lanes by their keys. It is a hash table of open
// addressing with linear probing and backward-shift deletion, kept at most half full, rather
// than a Go map, because of how ordered groups use it: keys that come one message at a time
// (W2 over 10,000 keys) have a lane made and let go of per message, so nearly every lookup is
// of a key that is not there, followed by an insert and, a little later, a delete. A Go map
// deletes by leaving a tombstone, and a lookup of an absent key probes past tombstones until
// it finds an empty slot: under that churn the map sat close to its load limit in live
// entries plus tombstones and a lookup probed group after group (runtime.mapaccess1_faststr
// was 0.36 s of the 1.5 s more that W2 ordered cost the server than W2 with the same keys
// unordered). Backward-shift deletion leaves no tombstone, so an absent key costs what it
// would in a fresh table: a probe of a slot or two, four slots to a cache line. A slot keeps
// the key's hash, so a probe reads a lane's key only when the hashes match. The hash is
// hash/maphash's with a seed of each table's own, so a client cannot choose keys that
// collide (and make every probe walk a long run). See RATIONALE.md,
// "Ordering keys and fair dispatch".
type laneIndex struct {
	slots []laneSlot // a power of two long (or empty); a slot with a nil lane is empty
	n     int        // lanes in slots
	seed  maphash.Seed
}

type laneSlot struct {
	h uint64 // the hash of l.key
	l *lane
}

// A table starts at laneIndexMin slots and doubles as it fills. It shrinks, to four slots a
// lane, once it is down to an eighth full, but never below laneIndexKeep: a group whose lanes
// come and go by the hundred (a frame's worth, made and acked) would otherwise grow and shrink
// its table with every frame. So the index of a group that once held many keys costs at
// most 32 KiB once they are gone.
const (
	laneIndexMin  = 16
	laneIndexKeep = 2048
)

func newLaneIndex() laneIndex { return laneIndex{seed: maphash.MakeSeed()} }

// hash returns the hash by which key is found.
func (x *laneIndex) hash(key string) uint64 { return maphash.String(x.seed, key) }

// find returns the lane of key, or nil, and key's hash (for add).
func (x *laneIndex) find(key string) (*lane, uint64) {
	h := x.hash(key)
	return x.get(key, h), h
}

// get returns the lane of key, whose hash is h, or nil.
func (x *laneIndex) get(key string, h uint64) *lane {
	if len(x.slots) == 0 {
		return nil
	}
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.l == nil {
			return nil
		}
		if s.h == h && s.l.key == key {
			return s.l
		}
	}
}

// add puts l, whose key is not in x, under its key, whose hash is h (kept in l.h).
func (x *laneIndex) add(l *lane, h uint64) {
	if (x.n+1)*2 > len(x.slots) {
		x.resize(max(laneIndexMin, 2*len(x.slots)))
	}
	l.h = h
	x.put(l)
	x.n++
}

// put puts l in the first empty slot from its hash's.
func (x *laneIndex) put(l *lane) {
	mask := uint64(len(x.slots) - 1)
	i := l.h & mask
	for x.slots[i].l != nil {
		i = (i + 1) & mask
	}
	x.slots[i] = laneSlot{h: l.h, l: l}
}

// remove takes l, which x holds, out of it; the slots after it that are not in theirs move
// back, so that no lookup ever has to probe past a hole.
func (x *laneIndex) remove(l *lane) {
	mask := uint64(len(x.slots) - 1)
	i := l.h & mask
	for x.slots[i].l != l {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := x.slots[j]
		if s.l == nil {
			break
		}
		// s may move back into hole i if its home slot is not within (i, j]: it was
		// probed past i to get to j.
		if home := s.h & mask; (j-home)&mask >= (j-i)&mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = laneSlot{}
	x.n--
	if len(x.slots) > laneIndexKeep && x.n*8 < len(x.slots) {
		x.resize(max(laneIndexKeep, ceilPow2(4*x.n)))
	}
}

// resize makes x's table n slots long (a power of two) and puts its lanes back in.
func (x *laneIndex) resize(n int) {
	old := x.slots
	x.slots = make([]laneSlot, n)
	for _, s := range old {
		if s.l != nil {
			x.put(s.l)
		}
	}
}

// len returns how many lanes x holds.
func (x *laneIndex) len() int { return x.n }

// all yields every lane x holds, in no particular order; f must not change x.
func (x *laneIndex) all() iter.Seq[*lane] {
	return func(yield func(*lane) bool) {
		for _, s := range x.slots {
			if s.l != nil && !yield(s.l) {
				return
			}
		}
	}
}

// ceilPow2 returns the least power of two at least n (n > 0).
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
