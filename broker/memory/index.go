package memory

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
)

// target is what the index routes to: a fanout subscription or a consumer group.
type target interface {
	// deliver hands over a message, or refuses it with an error that says why (a consumer
	// group at its bounds); a refusal by one target does not affect the others. A non-nil
	// channel asks the publisher to wait, bounded, until it is closed (backpressure).
	deliver(m *message) (room <-chan struct{}, err error)
}

// index maps topics to the targets whose patterns match them: a trie of pattern tokens, so
// matching costs O(topic tokens × wildcard branches), not O(subscriptions). Results are cached
// per topic until the next change to the trie.
//
// Locks (lockrank): index.mu is a leaf; nothing else is locked while it is held.
type index struct {
	mu   lockrank.RWMutex[lockrank.Index]
	root *node
	gen  atomic.Uint64 // bumped (under mu) on every change; cache entries of older gens are stale

	cache     sync.Map // topic -> *cached
	cacheSize atomic.Int64

	removeWork int // under mu: entries removals read or copied (see node.removeEnd)
}

// maxCachedTopics bounds the match cache; past it the cache is cleared and refilled.
const maxCachedTopics = 8192

type cached struct {
	gen     uint64
	targets []target
}

// node is one token position of the trie. It is kept small, since a subscription with a
// pattern of its own adds a node or two (W5 holds 100,000 of them): children live in a short
// slice until there are many, and the targets ending here share one slice.
type node struct {
	kids []kid            // children by token, while there are at most maxKids
	many map[string]*node // children by token, once there are more
	star *node            // the "*" child
	ends []end            // patterns that end here (or with ">" right after here)
	at   map[end]int      // the position of each of ends, once there are more than maxScanEnds
}

type kid struct {
	tok string
	n   *node
}

type end struct {
	t    target
	full bool // the pattern ends with ">" after this node: it matches one or more tokens more
}

// maxKids is how many children a node keeps in its slice before it moves them to a map.
const maxKids = 8

func (n *node) child(tok string) *node {
	if n.many != nil {
		return n.many[tok]
	}
	for _, k := range n.kids {
		if k.tok == tok {
			return k.n
		}
	}
	return nil
}

func (n *node) setChild(tok string, c *node) {
	if n.many == nil && len(n.kids) < maxKids {
		n.kids = append(n.kids, kid{tok, c})
		return
	}
	if n.many == nil {
		n.many = make(map[string]*node, 2*maxKids)
		for _, k := range n.kids {
			n.many[k.tok] = k.n
		}
		n.kids = nil
	}
	n.many[tok] = c
}

func (n *node) deleteChild(tok string) {
	if n.many != nil {
		delete(n.many, tok)
		return
	}
	for i, k := range n.kids {
		if k.tok == tok {
			n.kids = slices.Delete(n.kids, i, i+1)
			if len(n.kids) == 0 {
				n.kids = nil
			}
			return
		}
	}
}

// maxScanEnds is how many targets a node finds by scanning its ends before it indexes their
// positions in a map: 100,000 subscriptions on one pattern took 15.8 s of a core to detach
// when each removal scanned the slice; with the map each removal costs the same at any count.
const maxScanEnds = 32

// addEnd registers e at n.
func (n *node) addEnd(e end) {
	n.ends = append(n.ends, e)
	switch {
	case n.at != nil:
		n.at[e] = len(n.ends) - 1
	case len(n.ends) > maxScanEnds:
		n.at = make(map[end]int, 2*len(n.ends))
		for i, x := range n.ends {
			n.at[x] = i
		}
	}
}

// removeEnd unregisters e from n, in constant time: the last end takes its place.
// removeEnd removes e from n; work counts the entries it read or copied, the measure of its
// cost that TestIndexRemoveLinear holds to a constant per removal.
func (n *node) removeEnd(e end) (work int) {
	i := -1
	if n.at != nil {
		if j, ok := n.at[e]; ok {
			i = j
			delete(n.at, e)
		}
		work = 1
	} else {
		i = slices.Index(n.ends, e)
		work = len(n.ends)
		if i >= 0 {
			work = i + 1
		}
	}
	if i < 0 {
		return work
	}
	last := len(n.ends) - 1
	if i != last {
		n.ends[i] = n.ends[last]
		if n.at != nil {
			n.at[n.ends[i]] = i
		}
	}
	n.ends[last] = end{}
	n.ends = n.ends[:last]
	switch {
	case last == 0:
		n.ends, n.at = nil, nil
	case cap(n.ends) > 64 && last < cap(n.ends)/4: // give back the memory of a crowd that left
		n.ends = slices.Clone(n.ends)
		work += last
	}
	if n.at != nil && last <= maxScanEnds/2 {
		n.at = nil
	}
	return work
}

func (n *node) empty() bool {
	return len(n.kids) == 0 && len(n.many) == 0 && n.star == nil && len(n.ends) == 0
}

func newIndex() *index { return &index{root: &node{}} }

// add registers t under pattern (assumed valid).
func (ix *index) add(pattern string, t target) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := ix.root
	for tok := range strings.SplitSeq(pattern, ".") {
		switch tok {
		case ">":
			n.addEnd(end{t, true})
			ix.changedLocked()
			return
		case "*":
			if n.star == nil {
				n.star = &node{}
			}
			n = n.star
		default:
			c := n.child(tok)
			if c == nil {
				c = &node{}
				n.setChild(tok, c)
			}
			n = c
		}
	}
	n.addEnd(end{t, false})
	ix.changedLocked()
}

// remove unregisters t from pattern and prunes nodes left empty.
func (ix *index) remove(pattern string, t target) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeFrom(ix.root, pattern, t)
	ix.changedLocked()
}

// removeFrom reports whether n is left empty.
func (ix *index) removeFrom(n *node, pattern string, t target) bool {
	tok, rest, more := strings.Cut(pattern, ".")
	switch {
	case tok == ">":
		ix.removeWork += n.removeEnd(end{t, true})
	case tok == "*":
		if n.star != nil && ix.removeNext(n.star, rest, more, t) {
			n.star = nil
		}
	default:
		if c := n.child(tok); c != nil && ix.removeNext(c, rest, more, t) {
			n.deleteChild(tok)
		}
	}
	return n.empty()
}

func (ix *index) removeNext(n *node, rest string, more bool, t target) bool {
	if !more {
		ix.removeWork += n.removeEnd(end{t, false})
		return n.empty()
	}
	return ix.removeFrom(n, rest, t)
}

// changedLocked invalidates the match cache. ix.mu must be held for writing.
func (ix *index) changedLocked() {
	ix.gen.Add(1)
	ix.cache.Clear()
	ix.cacheSize.Store(0)
}

// match returns the distinct targets whose patterns match topic (assumed valid). The returned
// slice is shared: callers must not modify it.
func (ix *index) match(topic string) []target {
	if v, ok := ix.cache.Load(topic); ok {
		if c := v.(*cached); c.gen == ix.gen.Load() {
			return c.targets
		}
	}
	ix.mu.RLock()
	gen := ix.gen.Load()
	var ts []target
	ts = collect(ix.root, topic, ts)
	ix.mu.RUnlock()
	ts = dedupe(ts)
	if ix.cacheSize.Add(1) > maxCachedTopics {
		ix.cache.Clear()
		ix.cacheSize.Store(0)
	}
	ix.cache.Store(topic, &cached{gen: gen, targets: ts})
	return ts
}

// collect appends the targets of the patterns under n that match the rest of a topic.
func collect(n *node, rest string, ts []target) []target {
	for _, e := range n.ends { // rest is never empty here: ">" needs at least one token
		if e.full {
			ts = append(ts, e.t)
		}
	}
	tok, tail, more := strings.Cut(rest, ".")
	if c := n.child(tok); c != nil {
		ts = collectNext(c, tail, more, ts)
	}
	if c := n.star; c != nil {
		ts = collectNext(c, tail, more, ts)
	}
	return ts
}

func collectNext(c *node, tail string, more bool, ts []target) []target {
	if more {
		return collect(c, tail, ts)
	}
	for _, e := range c.ends {
		if !e.full {
			ts = append(ts, e.t)
		}
	}
	return ts
}

// dedupe removes repeats: a subscription with overlapping patterns gets a message once.
func dedupe(ts []target) []target {
	if len(ts) < 2 {
		return ts
	}
	if len(ts) <= 16 {
		out := ts[:0]
	outer:
		for _, t := range ts {
			for _, o := range out {
				if o == t {
					continue outer
				}
			}
			out = append(out, t)
		}
		return out
	}
	seen := make(map[target]struct{}, len(ts))
	out := ts[:0]
	for _, t := range ts {
		if _, ok := seen[t]; !ok {
			seen[t] = struct{}{}
			out = append(out, t)
		}
	}
	return out
}
