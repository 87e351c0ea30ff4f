package broker

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sorted reports whether h is sorted by key with each key once, as Headers must be.
func sorted(h Headers) bool {
	for i := 1; i < len(h); i++ {
		if h[i-1].Key >= h[i].Key {
			return false
		}
	}
	return true
}

// FuzzHeaders drives Headers with any sequence of sets and deletes, against a map: With and
// Without never change what they are given, Set and Delete agree with them, Get and Map with
// the map, and the headers stay sorted with each key once. Keys are drawn so that both the
// scan (up to 8 headers) and the binary search are used.
func FuzzHeaders(f *testing.F) {
	f.Add([]byte("\x01a\x02b\x81a\x03c"))
	f.Add([]byte("0123456789abcdefghij\x85\x8a"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		var h, inPlace Headers
		model := map[string]string{}
		for i, op := range ops {
			key := string(rune('a' + op&0x1f))
			shared := slices.Clone(h) // h as a message holds it: With and Without must leave it
			held := h
			if op&0x80 != 0 {
				h = h.Without(key)
				inPlace = inPlace.Delete(key)
				delete(model, key)
			} else {
				v := fmt.Sprint(i)
				h = h.With(key, v)
				inPlace = inPlace.Set(key, v)
				model[key] = v
			}
			if !slices.Equal(held, shared) {
				t.Fatalf("op %d changed the headers it was given: %v, was %v", i, held, shared)
			}
			if !sorted(h) || !h.Equal(inPlace) && !(len(h) == 0 && len(inPlace) == 0) {
				t.Fatalf("after op %d: %v (in place %v)", i, h, inPlace)
			}
			if m := h.Map(); !maps.Equal(m, model) {
				t.Fatalf("after op %d: %v, want %v", i, m, model)
			}
			for k := range 32 {
				key := string(rune('a' + k))
				v, ok := h.Get(key)
				if w, wok := model[key]; v != w || ok != wok {
					t.Fatalf("Get(%q) = %q %v, want %q %v", key, v, ok, w, wok)
				}
			}
		}
	})
}

// With and Without return new headers and leave theirs as they were: a message's headers are
// shared.
func TestHeadersNeverChangedInPlace(t *testing.T) {
	h := MakeHeaders(map[string]string{"b": "2", "d": "4"})
	orig := slices.Clone(h)
	for _, got := range []Headers{h.With("a", "1"), h.With("b", "two"), h.With("e", "5"), h.Without("b"), h.Without("d")} {
		if !h.Equal(orig) {
			t.Fatalf("%v changed to %v", orig, h)
		}
		if !sorted(got) {
			t.Fatalf("%v is not sorted", got)
		}
	}
	if got := h.Without("x"); !got.Equal(h) {
		t.Errorf("Without an absent key: %v", got)
	}
}

// Headers.Sorted sorts pairs given in any order and keeps a repeated key's last value, as
// protobuf does for a map field given a key twice.
func TestSortHeaders(t *testing.T) {
	got := (Headers{{"c", "1"}, {"a", "1"}, {"c", "2"}, {"b", "1"}, {"a", "2"}, {"c", "3"}}).Sorted()
	want := Headers{{"a", "2"}, {"b", "1"}, {"c", "3"}}
	if !got.Equal(want) {
		t.Errorf("Sorted = %v, want %v", got, want)
	}
	if got := MakeHeaders(nil); got != nil {
		t.Errorf("MakeHeaders(nil) = %v", got)
	}
}

// CheckHeaders refuses headers out of order or given twice (a caller of PublishBatch that
// built them by hand), with a message that says how to build them.
func TestCheckHeadersOrder(t *testing.T) {
	l := Limits{}.WithDefaults()
	for _, h := range []Headers{{{"b", "1"}, {"a", "1"}}, {{"a", "1"}, {"a", "2"}}} {
		_, err := l.CheckHeaders(h)
		if !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), "Headers.Sorted") {
			t.Errorf("%v: %v, want refused naming Headers.Sorted", h, err)
		}
	}
	if hb, err := l.CheckHeaders(Headers{{"a", "1"}, {"bb", "22"}}); err != nil || hb != 6 {
		t.Errorf("sorted headers: %d %v", hb, err)
	}
}

// Headers.Sorted agrees with a stable sort, keeping a repeated key's last value, at every size
// (the larger ones are sorted another way) and with many repeats.
func TestSortHeadersLarge(t *testing.T) {
	for _, n := range []int{2, 31, 32, 33, 100, 1000} {
		for _, keys := range []int{3, n} {
			h := make(Headers, n)
			for i := range h {
				h[i] = Header{fmt.Sprint("k", (i*7919)%keys), fmt.Sprint(i)}
			}
			want := map[string]string{}
			for _, x := range h {
				want[x.Key] = x.Value
			}
			got := slices.Clone(h).Sorted()
			if !sorted(got) || !maps.Equal(got.Map(), want) {
				t.Fatalf("%d headers, %d keys: %v", n, keys, got)
			}
		}
	}
}

// BenchmarkSortHeaders1000 sorts 1,000 headers in random order (a message at the default
// max_headers, as the server decodes it): a stable sort of the headers, and sortLarge.
func BenchmarkSortHeaders1000(b *testing.B) {
	h := make(Headers, 1000)
	for i := range h {
		h[i] = Header{fmt.Sprintf("header-%06d", i), "v"}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
	work := make(Headers, len(h))
	b.Run("stable", func(b *testing.B) {
		for b.Loop() {
			copy(work, h)
			slices.SortStableFunc(work, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
		}
	})
	b.Run("large", func(b *testing.B) {
		for b.Loop() {
			copy(work, h)
			sortLarge(work)
		}
	})
}
