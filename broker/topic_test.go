package broker

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTopic(t *testing.T) {
	for _, ok := range []string{"a", "jobs.thumb.1", "a-b_c.$sys.ü", strings.Repeat("a", maxTopicBytes)} {
		if err := ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "a.", ".a", "a..b", "a.*", ">", "a.>", "*0", "orders.*x", "a.b>", "a>b.c", "x.*y.z", "a b", "a\tb", "a\n", "\xff", strings.Repeat("a", maxTopicBytes+1)} {
		if err := ValidateTopic(bad); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("ValidateTopic(%q) = %v, want ErrInvalidTopic", bad, err)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	for _, ok := range []string{"a", ">", "*", "a.*.c", "a.>", "*.*.>", "jobs.thumb.*"} {
		if err := Pattern(ok).Validate(); err != nil {
			t.Errorf("Validate(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a..b", ">.a", "a.>.b", "a*", "a.b*", "*a", "a.>>", "a b", "a."} {
		if err := Pattern(bad).Validate(); !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("Validate(%q) = %v, want ErrInvalidPattern", bad, err)
		}
	}
}

func TestMatchPattern(t *testing.T) {
	cases := []struct {
		pattern, topic string
		want           bool
	}{
		{"a", "a", true}, {"a", "b", false}, {"a", "a.b", false},
		{"*", "a", true}, {"*", "a.b", false},
		{">", "a", true}, {">", "a.b.c", true},
		{"jobs.>", "jobs", false}, {"jobs.>", "jobs.a", true}, {"jobs.>", "jobs.a.b", true},
		{"jobs.*", "jobs", false}, {"jobs.*", "jobs.a", true}, {"jobs.*", "jobs.a.b", false},
		{"a.*.c", "a.b.c", true}, {"a.*.c", "a.b.d", false}, {"*.b.>", "a.b.c.d", true},
		{"a.b", "a", false}, {"a.b", "a.bc", false},
	}
	for _, c := range cases {
		if got := Pattern(c.pattern).Match(c.topic); got != c.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", c.pattern, c.topic, got, c.want)
		}
	}
}
