package broker

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxTopicBytes is the longest topic or pattern accepted, in bytes.
const maxTopicBytes = 255

// ValidateTopic reports whether topic can be published to: one or more non-empty tokens
// separated by '.', no whitespace or control characters, no '*' or '>' anywhere (they are the
// wildcards of patterns), valid UTF-8, at most maxTopicBytes long. Every valid topic is also
// a valid pattern that matches exactly itself (see RATIONALE.md, "one grammar").
func ValidateTopic(topic string) error {
	if plainTopic(topic) { // the common case, in one pass
		return nil
	}
	if msg := checkSubject(topic); msg != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidTopic, topic, msg)
	}
	if i := strings.IndexAny(topic, "*>"); i >= 0 {
		tok := topic[strings.LastIndexByte(topic[:i], '.')+1:]
		tok, _, _ = strings.Cut(tok, ".")
		if tok == "*" || tok == ">" {
			return fmt.Errorf("%w %q: wildcard token %q is only allowed in subscription patterns; publish to a concrete topic such as \"jobs.thumb.1\"", ErrInvalidTopic, topic, tok)
		}
		return fmt.Errorf("%w %q: token %q contains %q, which is reserved for the wildcards of subscription patterns; use letters, digits and punctuation other than '*' and '>'", ErrInvalidTopic, topic, tok, topic[i])
	}
	return nil
}

// Pattern is a subscription's topic pattern: tokens as in a topic, where a token "*" matches
// exactly one token and a last token ">" matches one or more trailing tokens. Every valid topic is also a valid pattern, that matches only itself.
type Pattern string

// Validate reports whether p is a valid pattern, and if not, why, with ErrInvalidPattern.
func (p Pattern) Validate() error {
	pattern := string(p)
	if msg := checkSubject(pattern); msg != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidPattern, pattern, msg)
	}
	rest := pattern
	for {
		tok, tail, more := strings.Cut(rest, ".")
		if tok == ">" && more {
			return fmt.Errorf("%w %q: '>' matches the rest of a topic and must be the last token (e.g. \"jobs.>\")", ErrInvalidPattern, pattern)
		}
		if len(tok) > 1 && strings.ContainsAny(tok, "*>") {
			return fmt.Errorf("%w %q: token %q mixes a wildcard with other characters; a wildcard must be a whole token (\"jobs.*\", not \"jobs.th*\")", ErrInvalidPattern, pattern, tok)
		}
		if !more {
			return nil
		}
		rest = tail
	}
}

// plainTopic reports whether topic is a valid topic of printable ASCII: it says nothing of
// the others, which ValidateTopic then checks in full.
func plainTopic(topic string) bool {
	if len(topic) == 0 || len(topic) > maxTopicBytes {
		return false
	}
	prev := byte('.')
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if c <= ' ' || c >= 0x7f || c == '*' || c == '>' || (c == '.' && prev == '.') {
			return false
		}
		prev = c
	}
	return prev != '.'
}

// checkSubject applies the rules topics and patterns share and says what is wrong.
func checkSubject(s string) string {
	switch {
	case s == "":
		return "empty; use dot-separated tokens such as \"jobs.thumb.1\""
	case len(s) > maxTopicBytes:
		return fmt.Sprintf("%d bytes long; the limit is %d", len(s), maxTopicBytes)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, ".."):
		return "empty token; tokens are separated by single dots and may not be empty"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Sprintf("contains whitespace or control character %q", r)
		}
	}
	return ""
}

// Match reports whether topic matches p. Both are assumed valid. It is the
// reference the index is tested against; routing uses the index.
func (p Pattern) Match(topic string) bool {
	pattern := string(p)
	for {
		ptok, prest, pmore := strings.Cut(pattern, ".")
		if ptok == ">" {
			return topic != ""
		}
		if topic == "" {
			return false
		}
		ttok, trest, tmore := strings.Cut(topic, ".")
		if ptok != "*" && ptok != ttok {
			return false
		}
		if !pmore || !tmore {
			return !pmore && !tmore
		}
		pattern, topic = prest, trest
	}
}
