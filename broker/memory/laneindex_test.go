package memory

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// checkLaneIndex fails unless x holds exactly the lanes of want, each found by its key, no
// key of gone found, and every slot's lane reachable from its hash's slot without a hole.
func checkLaneIndex(t *testing.T, x *laneIndex, want map[string]*lane, gone []string) {
	t.Helper()
	if x.len() != len(want) {
		t.Fatalf("holds %d lanes, want %d", x.len(), len(want))
	}
	if len(x.slots) > 0 && x.n*2 > len(x.slots) {
		t.Fatalf("%d lanes in %d slots: over half full", x.n, len(x.slots))
	}
	n := 0
	for l := range x.all() {
		n++
		if want[l.key] != l {
			t.Fatalf("holds lane %q, which it should not", l.key)
		}
	}
	if n != len(want) {
		t.Fatalf("all yields %d lanes, want %d", n, len(want))
	}
	for key, l := range want {
		if got := x.get(key, x.hash(key)); got != l {
			t.Fatalf("get(%q) = %p, want %p", key, got, l)
		}
	}
	for _, key := range gone {
		if want[key] == nil && x.get(key, x.hash(key)) != nil {
			t.Fatalf("get(%q) found a lane let go of", key)
		}
	}
	mask := uint64(len(x.slots) - 1)
	for i, s := range x.slots {
		if s.l == nil {
			continue
		}
		for j := s.h & mask; j != uint64(i); j = (j + 1) & mask {
			if x.slots[j].l == nil {
				t.Fatalf("lane %q in slot %d, past a hole at %d from its home %d", s.l.key, i, j, s.h&mask)
			}
		}
	}
}

// The index against a Go map, under churn of the kind ordered groups make (adds and removes
// at random over a key space that grows and shrinks), with collisions forced by a tiny table.
func TestLaneIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newLaneIndex()
	want := map[string]*lane{}
	var keys []string
	for i := range 4000 {
		keys = append(keys, "key-"+strconv.Itoa(i))
	}
	for round := range 40 {
		space := keys[:1+rng.IntN(len(keys))] // sometimes a few keys, sometimes all of them
		for range 2000 {
			key := space[rng.IntN(len(space))]
			if l := want[key]; l != nil {
				x.remove(l)
				delete(want, key)
			} else {
				l = &lane{key: key, ordered: true}
				x.add(l, x.hash(key))
				want[key] = l
			}
		}
		checkLaneIndex(t, &x, want, space)
		if round%10 == 9 { // empty it: it shrinks back to its least
			for _, l := range want {
				x.remove(l)
			}
			clear(want)
			checkLaneIndex(t, &x, want, space)
			if len(x.slots) > laneIndexKeep {
				t.Fatalf("empty, it keeps %d slots, want at most %d", len(x.slots), laneIndexKeep)
			}
		}
	}
}

// Hashes chosen to collide and to wrap around the end of the table: removing any lane of a
// run leaves every other findable (the backward shift's condition, on both sides of the wrap).
func TestLaneIndexRemoveInRuns(t *testing.T) {
	for victim := range 6 {
		x := laneIndex{slots: make([]laneSlot, laneIndexMin)}
		homes := []uint64{14, 14, 15, 0, 14, 1} // a run from 14 that wraps past 0 and 1
		var ls []*lane
		want := map[string]*lane{}
		for i, h := range homes {
			l := &lane{key: "k" + strconv.Itoa(i), h: h}
			x.put(l)
			x.n++
			ls = append(ls, l)
			want[l.key] = l
		}
		x.remove(ls[victim])
		delete(want, ls[victim].key)
		for key, l := range want {
			found := false
			mask := uint64(len(x.slots) - 1)
			for i := l.h & mask; x.slots[i].l != nil; i = (i + 1) & mask {
				if x.slots[i].l.key == key {
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("removing lane %d of the run lost lane %q", victim, key)
			}
		}
		if x.len() != len(homes)-1 {
			t.Fatalf("holds %d lanes, want %d", x.len(), len(homes)-1)
		}
	}
}

// What a lane made and let go of per message costs in the index and in a Go map, over a
// window of 10,000 live keys sliding along (W2 over 10,000 keys): a lookup of a key that is
// not there, an insert, and the delete of the key 10,000 back.
func BenchmarkLaneChurn(b *testing.B) {
	const live = 10_000
	keys := make([]string, 4*live)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	lanes := make([]lane, len(keys))
	for i := range lanes {
		lanes[i].key = keys[i]
	}
	b.Run("index", func(b *testing.B) {
		x := newLaneIndex()
		i := 0
		for b.Loop() {
			key := keys[i%len(keys)]
			h := x.hash(key)
			if x.get(key, h) == nil {
				x.add(&lanes[i%len(keys)], h)
			}
			if i >= live {
				x.remove(&lanes[(i-live)%len(keys)])
			}
			i++
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[string]*lane{}
		i := 0
		for b.Loop() {
			key := keys[i%len(keys)]
			if m[key] == nil {
				m[key] = &lanes[i%len(keys)]
			}
			if i >= live {
				delete(m, keys[(i-live)%len(keys)])
			}
			i++
		}
	})
}
