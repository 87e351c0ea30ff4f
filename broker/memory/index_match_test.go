package memory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// probe is a target that records nothing; the index only compares identities.
type probe struct{ name string }

func (*probe) deliver(*message) (<-chan struct{}, error) { return nil, nil }
func (p *probe) String() string                          { return p.name }

// checkIndex compares the index with MatchPattern for one topic.
func checkIndex(t testing.TB, ix *index, subs map[*probe][]string, topic string) {
	t.Helper()
	var want []string
	for p, patterns := range subs {
		for _, pat := range patterns {
			if broker.Pattern(pat).Match(topic) {
				want = append(want, p.name)
				break
			}
		}
	}
	var got []string
	for _, tg := range ix.match(topic) {
		got = append(got, tg.(*probe).name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("topic %q: index matched %v, want %v (subs %v)", topic, got, want, subs)
	}
}

// The index agrees with MatchPattern through random adds and removes.
func TestIndexAgreesWithMatchPattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} // more than maxKids: nodes move their children to a map and back
	randSubject := func(wild bool) string {
		n := 1 + rng.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = tokens[rng.IntN(len(tokens))]
			if wild && rng.IntN(4) == 0 {
				parts[i] = "*"
			}
		}
		if wild && rng.IntN(4) == 0 {
			parts[n-1] = ">"
		}
		return strings.Join(parts, ".")
	}
	ix := newIndex()
	subs := map[*probe][]string{}
	var all []*probe
	for step := range 3000 {
		switch {
		case rng.IntN(3) > 0 || len(all) == 0:
			p := &probe{name: fmt.Sprint("s", step)}
			n := 1 + rng.IntN(3)
			var pats []string
			for range n {
				pats = append(pats, randSubject(true))
			}
			slices.Sort(pats)
			pats = slices.Compact(pats)
			for _, pat := range pats {
				ix.add(pat, p)
			}
			subs[p] = pats
			all = append(all, p)
		default:
			i := rng.IntN(len(all))
			p := all[i]
			for _, pat := range subs[p] {
				ix.remove(pat, p)
			}
			delete(subs, p)
			all = slices.Delete(all, i, i+1)
		}
		checkIndex(t, ix, subs, randSubject(false))
	}
	for _, p := range all {
		for _, pat := range subs[p] {
			ix.remove(pat, p)
		}
	}
	if !ix.root.empty() {
		t.Fatalf("index not empty after removing everything: %+v", ix.root)
	}
}

// FuzzTopicMatch: validation never panics, wildcards never pass as topics, and for every
// valid pattern and topic the index agrees with MatchPattern.
func FuzzTopicMatch(f *testing.F) {
	for _, s := range [][2]string{{"jobs.*", "jobs.a"}, {"jobs.>", "jobs"}, {">", "a.b"}, {"a.*.c", "a.b.c"}, {"a..b", "a.b"}, {"*", "\xff"}, {"*0", "*0"}, {"orders.*x", "orders.*x"}, {"a.b>", "a.b>"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		perr, terr := broker.Pattern(pattern).Validate(), broker.ValidateTopic(topic)
		if terr == nil && broker.Pattern(topic).Validate() != nil {
			t.Fatalf("topic %q valid but not as a pattern", topic)
		}
		if terr == nil && strings.ContainsAny(topic, "*>") {
			t.Fatalf("topic %q with a wildcard character accepted", topic)
		}
		if terr == nil { // one grammar: every publishable topic can be subscribed to exactly
			ix := newIndex()
			p := &probe{name: "exact"}
			ix.add(topic, p)
			if got := ix.match(topic); len(got) != 1 || !broker.Pattern(topic).Match(topic) {
				t.Fatalf("topic %q is not matched by itself as a pattern (index %v)", topic, got)
			}
		}
		if perr != nil || terr != nil {
			return
		}
		ix := newIndex()
		p := &probe{name: "p"}
		ix.add(pattern, p)
		checkIndex(t, ix, map[*probe][]string{p: {pattern}}, topic)
		ix.remove(pattern, p)
		if got := ix.match(topic); len(got) != 0 {
			t.Fatalf("still matched after remove: %v", got)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		ix := newIndex()
		for i := range n {
			ix.add(fmt.Sprintf([...]string{"s.%d.x", "s.*.y%d", "t.%d.>"}[i%3], i), &probe{})
		}
		for _, pat := range []string{"bench.w5.match", "bench.*.match", "bench.>", "bench.w5.>"} {
			ix.add(pat, &probe{})
		}
		b.Run(fmt.Sprint("subs=", n, "/cached"), func(b *testing.B) {
			for b.Loop() {
				if len(ix.match("bench.w5.match")) != 4 {
					b.Fatal("want 4")
				}
			}
		})
		b.Run(fmt.Sprint("subs=", n, "/uncached"), func(b *testing.B) {
			for b.Loop() {
				ix.mu.RLock()
				ts := collect(ix.root, "bench.w5.match", nil)
				ix.mu.RUnlock()
				if len(dedupe(ts)) != 4 {
					b.Fatal("want 4")
				}
			}
		})
	}
}
