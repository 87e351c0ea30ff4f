package broker

import (
	"strings"
	"sync"
	"sync/atomic"
)

// target is what the index routes to: a fanout subscription or a consumer group.
type target interface {
	// admit reserves room for one message; false means the publish must be refused.
	admit() bool
	// unadmit releases a reservation made by admit when the publish is refused elsewhere.
	unadmit()
	// deliver hands over an admitted message. A non-nil channel asks the publisher to wait,
	// bounded, until it is closed (backpressure).
	deliver(m *Message) (room <-chan struct{})
}

// index maps topics to the targets whose patterns match them: a trie of pattern tokens, so
// matching costs O(topic tokens × wildcard branches), not O(subscriptions). Results are cached
// per topic until the next change to the trie.
//
// Lock order: index.mu is a leaf; nothing else is locked while it is held.
type index struct {
	mu   sync.RWMutex
	root *node
	gen  atomic.Uint64 // bumped (under mu) on every change; cache entries of older gens are stale

	cache     sync.Map // topic -> *cached
	cacheSize atomic.Int64
}

// maxCachedTopics bounds the match cache; past it the cache is cleared and refilled.
const maxCachedTopics = 8192

type cached struct {
	gen     uint64
	targets []target
}

type node struct {
	children map[string]*node
	star     *node    // the "*" child
	full     []target // patterns that end with ">" right after this node
	exact    []target // patterns that end at this node
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
			n.full = append(n.full, t)
			ix.changedLocked()
			return
		case "*":
			if n.star == nil {
				n.star = &node{}
			}
			n = n.star
		default:
			if n.children == nil {
				n.children = make(map[string]*node)
			}
			c := n.children[tok]
			if c == nil {
				c = &node{}
				n.children[tok] = c
			}
			n = c
		}
	}
	n.exact = append(n.exact, t)
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
		n.full = without(n.full, t)
	case tok == "*":
		if n.star != nil && ix.removeNext(n.star, rest, more, t) {
			n.star = nil
		}
	default:
		if c := n.children[tok]; c != nil && ix.removeNext(c, rest, more, t) {
			delete(n.children, tok)
		}
	}
	return len(n.children) == 0 && n.star == nil && len(n.full) == 0 && len(n.exact) == 0
}

func (ix *index) removeNext(n *node, rest string, more bool, t target) bool {
	if !more {
		n.exact = without(n.exact, t)
		return len(n.children) == 0 && n.star == nil && len(n.full) == 0 && len(n.exact) == 0
	}
	return ix.removeFrom(n, rest, t)
}

func without(ts []target, t target) []target {
	for i, x := range ts {
		if x == t {
			last := len(ts) - 1
			ts[i] = ts[last]
			ts[last] = nil
			return ts[:last]
		}
	}
	return ts
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
	ts = append(ts, n.full...) // rest is never empty here: ">" needs at least one token
	tok, tail, more := strings.Cut(rest, ".")
	if c := n.children[tok]; c != nil {
		if more {
			ts = collect(c, tail, ts)
		} else {
			ts = append(ts, c.exact...)
		}
	}
	if c := n.star; c != nil {
		if more {
			ts = collect(c, tail, ts)
		} else {
			ts = append(ts, c.exact...)
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
