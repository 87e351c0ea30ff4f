package main

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// redacted replaces the values of redacted fields.
const redacted = `"[REDACTED]"`

// redact replaces, in the JSON object doc, the value of every top-level field named in
// fields (every occurrence, if a name repeats) by "[REDACTED]", keeping everything else as
// it is. It returns the new document and how many values it replaced (0: out is doc). It
// checks the object's top-level structure and that nested brackets match, not every detail of
// nested values.
func redact(doc []byte, fields map[string]bool) (out []byte, n int, err error) {
	s := scanner{b: doc}
	s.space()
	if !s.take('{') {
		return nil, 0, s.fail("want '{'")
	}
	last := 0 // doc[last:] is not yet copied to out
	s.space()
	if !s.take('}') {
		for {
			s.space()
			key, err := s.str()
			if err != nil {
				return nil, 0, err
			}
			s.space()
			if !s.take(':') {
				return nil, 0, s.fail("want ':' after a key")
			}
			s.space()
			start := s.i
			if err := s.value(); err != nil {
				return nil, 0, err
			}
			if fields[key] {
				out = append(out, doc[last:start]...)
				out = append(out, redacted...)
				last = s.i
				n++
			}
			s.space()
			if s.take('}') {
				break
			}
			if !s.take(',') {
				return nil, 0, s.fail("want ',' or '}' after a value")
			}
		}
	}
	s.space()
	if s.i != len(doc) {
		return nil, 0, s.fail("unexpected text after the object")
	}
	if n == 0 {
		return doc, 0, nil
	}
	return append(out, doc[last:]...), n, nil
}

// A scanner reads JSON from b[i:].
type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(what string) error {
	return errors.New(what + " at offset " + strconv.Itoa(s.i))
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) take(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value skips one value: a string, an object or array (whose brackets must match), or a
// number or literal.
func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return s.fail("want a value")
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.skipStr()
	case c == '{' || c == '[':
		return s.skipNested()
	case c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z':
		start := s.i
		for s.i < len(s.b) && isAtomByte(s.b[s.i]) {
			s.i++
		}
		switch atom := string(s.b[start:s.i]); {
		case atom == "true" || atom == "false" || atom == "null":
		case c == '-' || c <= '9':
			if !isNumber(atom) {
				s.i = start
				return s.fail("malformed number")
			}
		default:
			s.i = start
			return s.fail("want a value")
		}
		return nil
	}
	return s.fail("want a value")
}

// isNumber reports whether s is a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func isNumber(s string) bool {
	digits := func() bool {
		n := 0
		for ; len(s) > 0 && s[0] >= '0' && s[0] <= '9'; n++ {
			s = s[1:]
		}
		return n > 0
	}
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) > 0 && s[0] == '0' {
		s = s[1:]
	} else if !digits() {
		return false
	}
	if len(s) > 0 && s[0] == '.' {
		s = s[1:]
		if !digits() {
			return false
		}
	}
	if len(s) > 0 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		if !digits() {
			return false
		}
	}
	return s == ""
}

func isAtomByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}

// skipNested skips an object or array, matching brackets and skipping strings.
func (s *scanner) skipNested() error {
	var stack []byte // the closing brackets expected
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if err := s.skipStr(); err != nil {
				return err
			}
			continue
		case '{':
			stack = append(stack, '}')
		case '[':
			stack = append(stack, ']')
		case '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return s.fail("mismatched '" + string(c) + "'")
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				s.i++
				return nil
			}
		}
		s.i++
	}
	return s.fail("unterminated object or array")
}

// skipStr skips a string.
func (s *scanner) skipStr() error {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return nil
		case c == '\\':
			s.i += 2
		case c < 0x20:
			return s.fail("control character in a string")
		default:
			s.i++
		}
	}
	return s.fail("unterminated string")
}

// str reads a string and returns it decoded.
func (s *scanner) str() (string, error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", s.fail("want a string key")
	}
	start := s.i + 1
	if err := s.skipStr(); err != nil {
		return "", err
	}
	raw := s.b[start : s.i-1]
	for _, c := range raw {
		if c == '\\' {
			return unescape(raw)
		}
	}
	return string(raw), nil
}

// unescape decodes the contents of a JSON string with escapes.
func unescape(raw []byte) (string, error) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(raw) {
			return "", errors.New("malformed escape in a key")
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw[i+1:])
			if !ok {
				return "", errors.New("malformed \\u escape in a key")
			}
			i += 4 // raw[i] is the escape's last hex digit
			if utf16.IsSurrogate(r) && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if r2, ok := hex4(raw[i+3:]); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r, i = d, i+6
					}
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", errors.New("malformed escape in a key")
		}
	}
	return string(out), nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(v), err == nil
}
