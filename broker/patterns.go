package broker

import "strings"

// Relations between patterns, for permissions: a user allowed "orders.>" may subscribe to
// "orders.*.eu" (covered) but not to ">" (only overlapping). Both take valid patterns (and
// topics, which are patterns that match themselves). RATIONALE.md, "Security", says how
// permissions use them.

// Covers reports whether every topic inner matches is also matched by p.
func (p Pattern) Covers(inner string) bool {
	outer := string(p)
	for {
		otok, orest, omore := strings.Cut(outer, ".")
		itok, irest, imore := strings.Cut(inner, ".")
		switch {
		case otok == ">":
			return true // inner has a token left here, and ">" takes any one or more
		case itok == ">":
			return false // inner takes any number of tokens where outer takes a fixed one
		case otok == "*":
			// any one token, wildcard or not
		case itok == "*" || itok != otok:
			return false
		}
		if !omore || !imore {
			return !omore && !imore
		}
		outer, inner = orest, irest
	}
}

// Overlaps reports whether some topic matches both p and b.
func (p Pattern) Overlaps(b string) bool {
	a := string(p)
	for {
		atok, arest, amore := strings.Cut(a, ".")
		btok, brest, bmore := strings.Cut(b, ".")
		if atok == ">" || btok == ">" {
			return true // the other has a token left here: make the topic its instance
		}
		if atok != "*" && btok != "*" && atok != btok {
			return false
		}
		if !amore || !bmore {
			return !amore && !bmore // one needs more tokens than the other can take
		}
		a, b = arest, brest
	}
}
