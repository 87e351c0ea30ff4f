package broker

import (
	"slices"
	"strings"
)

// Header is one header of a message.
type Header struct{ Key, Value string }

// Headers are a message's headers: sorted by key, each key once. A slice rather than a map
// because a message's headers are walked far more often than they are looked up (checked,
// encoded for every delivery, written into a plugin's inbox), which a map cannot do cheaply,
// and because a message has few of them (RATIONALE.md, "Why are headers a sorted slice?").
//
// A message's Headers may be shared: by the publisher, by every delivery of the message, by
// the message a plugin changed. They are never changed in place: With and Without return new
// ones.
type Headers []Header

// MakeHeaders returns m as Headers (nil if m is empty).
func MakeHeaders(m map[string]string) Headers {
	if len(m) == 0 {
		return nil
	}
	h := make(Headers, 0, len(m))
	for k, v := range m {
		h = append(h, Header{k, v})
	}
	if len(h) > 1 {
		slices.SortFunc(h, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
	}
	return h
}

// Sorted sorts h, built in any order, by key, keeping of a key that occurs more than
// once its last value (as protobuf does for a map field), and returns it.
func (h Headers) Sorted() Headers {
	if len(h) < 2 {
		return h
	}
	if len(h) <= 32 {
		slices.SortStableFunc(h, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
	} else {
		sortLarge(h)
	}
	out := h[:1]
	for _, x := range h[1:] {
		if x.Key == out[len(out)-1].Key {
			out[len(out)-1] = x
		} else {
			out = append(out, x)
		}
	}
	clear(h[len(out):])
	return out
}

// sortLarge sorts h stably by key. A stable sort of the headers themselves (an insertion
// sort, then merges by rotation that move 32-byte headers again and again) made sorting a
// message's 1,000 headers two fifths of decoding it; this sorts their positions by key and
// position (pdqsort on 4-byte indices), then moves each header once, following the
// permutation's cycles.
func sortLarge(h Headers) {
	idx := make([]int32, len(h))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := strings.Compare(h[a].Key, h[b].Key); c != 0 {
			return c
		}
		return int(a - b)
	})
	// h[k] takes h[idx[k]]; idx[k] = -1 once done.
	for k := range idx {
		if idx[k] < 0 {
			continue
		}
		first := h[k]
		j := k
		for {
			src := int(idx[j])
			idx[j] = -1
			if src == k {
				h[j] = first
				break
			}
			h[j] = h[src]
			j = src
		}
	}
}

// Map returns h as a new map (nil if h is empty).
func (h Headers) Map() map[string]string {
	if len(h) == 0 {
		return nil
	}
	m := make(map[string]string, len(h))
	for _, x := range h {
		m[x.Key] = x.Value
	}
	return m
}

// index is the position of key in h, or where it would go, and whether it is there.
func (h Headers) index(key string) (int, bool) {
	if len(h) <= 8 { // a message's usual few: a scan is cheaper than a search
		for i := range h {
			if c := strings.Compare(h[i].Key, key); c >= 0 {
				return i, c == 0
			}
		}
		return len(h), false
	}
	return slices.BinarySearchFunc(h, key, func(x Header, k string) int { return strings.Compare(x.Key, k) })
}

// Get returns the value of key, and whether h has it.
func (h Headers) Get(key string) (string, bool) {
	if i, ok := h.index(key); ok {
		return h[i].Value, true
	}
	return "", false
}

// With returns h with key set to value, as a new slice (h is unchanged).
func (h Headers) With(key, value string) Headers {
	i, ok := h.index(key)
	if ok {
		out := slices.Clone(h)
		out[i].Value = value
		return out
	}
	out := make(Headers, len(h)+1)
	copy(out, h[:i])
	out[i] = Header{key, value}
	copy(out[i+1:], h[i:])
	return out
}

// Without returns h without key, as a new slice if h has it (h is unchanged).
func (h Headers) Without(key string) Headers {
	i, ok := h.index(key)
	if !ok {
		return h
	}
	if len(h) == 1 {
		return nil
	}
	out := make(Headers, 0, len(h)-1)
	return append(append(out, h[:i]...), h[i+1:]...)
}

// Set sets key to value in h, in place, and returns h: for headers this code has just made
// and no one else holds.
func (h Headers) Set(key, value string) Headers {
	i, ok := h.index(key)
	if ok {
		h[i].Value = value
		return h
	}
	return slices.Insert(h, i, Header{key, value})
}

// Delete removes key from h, in place, and returns h: as Set.
func (h Headers) Delete(key string) Headers {
	if i, ok := h.index(key); ok {
		return slices.Delete(h, i, i+1)
	}
	return h
}

// Equal reports whether h and o hold the same headers.
func (h Headers) Equal(o Headers) bool { return slices.Equal(h, o) }
