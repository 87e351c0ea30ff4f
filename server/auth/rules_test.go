package auth

import (
	"slices"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

func TestRules(t *testing.T) {
	r := Rules{Allow: []string{"orders.>", "jobs.*"}, Deny: []string{"orders.secret.>"}}
	for _, c := range []struct {
		topic string
		ok    bool
	}{{"orders.1", true}, {"orders.a.b", true}, {"orders.secret.x", false}, {"orders.secret", true},
		{"jobs.x", true}, {"jobs.x.y", false}, {"other", false}} {
		if ok, _ := r.Topic(c.topic); ok != c.ok {
			t.Errorf("Topic(%q) = %v, want %v", c.topic, ok, c.ok)
		}
	}
	for _, c := range []struct {
		pattern string
		ok      bool
		why     string
	}{{"orders.*", true, ""}, {"orders.eu.>", true, ""}, {"orders.>", false, `deny "orders.secret.>"`},
		{">", false, "deny"}, {"jobs.*", true, ""}, {"jobs.>", false, "no allow pattern covers it"},
		{"*.x", false, "no allow pattern"}} {
		ok, why := r.Pattern(c.pattern)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("Pattern(%q) = %v %q, want %v %q", c.pattern, ok, why, c.ok, c.why)
		}
	}
	if ok, why := (Rules{}).Topic("a"); ok || !strings.Contains(why, "no allow rule") {
		t.Errorf("the zero Rules allowed a topic: %v %q", ok, why)
	}
}

// words returns every topic of 1..n tokens over alphabet, depth first.
func words(alphabet []string, n int, prefix string, out []string) []string {
	if n == 0 {
		return out
	}
	for _, tok := range alphabet {
		t := tok
		if prefix != "" {
			t = prefix + "." + tok
		}
		out = words(alphabet, n-1, t, append(out, t))
	}
	return out
}

// FuzzRules holds Rules to a brute-force reference over every topic long enough to tell:
// Topic is "some allow matches, no deny matches"; Pattern is "some allow matches every topic
// the pattern does, and no deny matches any of them" — so that a subscription allowed never
// receives a topic its user may not read.
func FuzzRules(f *testing.F) {
	f.Add("orders.>", "jobs.*", "orders.secret.>", "orders.*")
	f.Add(">", "", "a.b", "*.b")
	f.Add("a.*", "*.b", "", "a.b")
	f.Fuzz(func(t *testing.T, allow1, allow2, deny, query string) {
		var r Rules
		for _, p := range []string{allow1, allow2} {
			if p != "" {
				r.Allow = append(r.Allow, p)
			}
		}
		if deny != "" {
			r.Deny = []string{deny}
		}
		if r.Check() != nil || broker.Pattern(query).Validate() != nil {
			return
		}
		depth := 0
		alphabet := []string{"\x00fresh"}
		for _, p := range append(append([]string{query}, r.Allow...), r.Deny...) {
			toks := strings.Split(p, ".")
			depth = max(depth, len(toks))
			for _, tok := range toks {
				if tok != "*" && tok != ">" && !slices.Contains(alphabet, tok) {
					alphabet = append(alphabet, tok)
				}
			}
		}
		if depth > 3 || len(alphabet) > 5 {
			return // the brute force grows as alphabet^depth
		}
		universe := words(alphabet, depth+1, "", nil)
		topicOK := func(topic string) bool {
			allowed := false
			for _, a := range r.Allow {
				allowed = allowed || broker.Pattern(a).Match(topic)
			}
			for _, d := range r.Deny {
				if broker.Pattern(d).Match(topic) {
					return false
				}
			}
			return allowed
		}
		// Topic, for a query that is a topic.
		if broker.ValidateTopic(query) == nil {
			if got, _ := r.Topic(query); got != topicOK(query) {
				t.Errorf("%+v.Topic(%q) = %v, reference %v", r, query, got, topicOK(query))
			}
		}
		// Pattern: one allow covers it and no deny overlaps it.
		covered, denied := false, false
		for _, a := range r.Allow {
			all := true
			for _, topic := range universe {
				if broker.Pattern(query).Match(topic) && !broker.Pattern(a).Match(topic) {
					all = false
				}
			}
			covered = covered || all
		}
		for _, topic := range universe {
			for _, d := range r.Deny {
				denied = denied || (broker.Pattern(query).Match(topic) && broker.Pattern(d).Match(topic))
			}
		}
		got, _ := r.Pattern(query)
		if got != (covered && !denied) {
			t.Errorf("%+v.Pattern(%q) = %v, reference %v", r, query, got, covered && !denied)
		}
		if got { // safety: nothing a subscription allowed can receive is refused to the user
			for _, topic := range universe {
				if broker.Pattern(query).Match(topic) && !topicOK(topic) {
					t.Fatalf("%+v allows subscribing to %q, which matches %q, a topic it refuses", r, query, topic)
				}
			}
		}
	})
}
