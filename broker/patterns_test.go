package broker

import (
	"slices"
	"strings"
	"testing"
)

func TestPatternRelations(t *testing.T) {
	for _, c := range []struct {
		a, b             string
		covers, overlaps bool // a covers b; a and b overlap
	}{
		{">", "a", true, true},
		{">", "a.>", true, true},
		{"a.>", ">", false, true},
		{"a.>", "a", false, false},
		{"a.>", "a.b.c", true, true},
		{"a.*", "a.b", true, true},
		{"a.*", "a.b.c", false, false},
		{"a.*", "a.>", false, true},
		{"a.b", "a.*", false, true},
		{"a.b", "a.c", false, false},
		{"*.b", "a.*", false, true},
		{"*", "*", true, true},
		{"*.>", ">", false, true},
		{">", "*.>", true, true},
		{"a.*.c", "a.>", false, true},
		{"a.b.c", "a.b.c", true, true},
	} {
		if got := Pattern(c.a).Covers(c.b); got != c.covers {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.a, c.b, got, c.covers)
		}
		if got := Pattern(c.a).Overlaps(c.b); got != c.overlaps {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", c.a, c.b, got, c.overlaps)
		}
		if got := Pattern(c.b).Overlaps(c.a); got != c.overlaps {
			t.Errorf("Overlaps(%q, %q) = %v, want %v (symmetric)", c.b, c.a, got, c.overlaps)
		}
	}
}

// topicsUpTo returns every topic of 1..n tokens over alphabet: with the literal tokens of the
// patterns under test and one token neither uses, it is a complete set of witnesses for
// patterns of fewer than n tokens.
func topicsUpTo(alphabet []string, n int) []string {
	var out []string
	layer := []string{""}
	for range n {
		var next []string
		for _, p := range layer {
			for _, tok := range alphabet {
				t := tok
				if p != "" {
					t = p + "." + tok
				}
				next = append(next, t)
			}
		}
		out = append(out, next...)
		layer = next
	}
	return out
}

// FuzzPatternRelations holds Pattern.Covers and Pattern.Overlaps to their definitions, checked
// by brute force over every topic long enough to tell.
func FuzzPatternRelations(f *testing.F) {
	for _, s := range [][2]string{{">", "a"}, {"a.*", "a.>"}, {"*.b", "a.*"}, {"a.b.c", "a.*.>"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if Pattern(a).Validate() != nil || Pattern(b).Validate() != nil {
			return
		}
		na, nb := strings.Count(a, ".")+1, strings.Count(b, ".")+1
		if na > 4 || nb > 4 {
			return // the brute force grows as alphabet^tokens
		}
		alphabet := []string{"\x00fresh"}
		for _, tok := range strings.Split(a+"."+b, ".") {
			if tok != "*" && tok != ">" && !slices.Contains(alphabet, tok) {
				alphabet = append(alphabet, tok)
			}
		}
		covers, overlaps := true, false
		for _, topic := range topicsUpTo(alphabet, max(na, nb)+1) {
			ma, mb := Pattern(a).Match(topic), Pattern(b).Match(topic)
			if mb && !ma {
				covers = false
			}
			if ma && mb {
				overlaps = true
			}
		}
		if got := Pattern(a).Covers(b); got != covers {
			t.Errorf("Covers(%q, %q) = %v; brute force says %v", a, b, got, covers)
		}
		if got := Pattern(a).Overlaps(b); got != overlaps {
			t.Errorf("Overlaps(%q, %q) = %v; brute force says %v", a, b, got, overlaps)
		}
	})
}
