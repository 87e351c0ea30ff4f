package main

import (
	"encoding/json"
	"testing"
)

func TestRedact(t *testing.T) {
	fields := map[string]bool{"password": true, "card": true, "ü": true}
	for _, tc := range []struct {
		in, want string
		n        int
	}{
		{`{"user":"ann","password":"hunter2"}`, `{"user":"ann","password":"[REDACTED]"}`, 1},
		{` { "password" : {"a":[1,{"b":"}"}]} , "x" : 1 } `, ` { "password" : "[REDACTED]" , "x" : 1 } `, 1},
		{`{"card":4111,"card":null,"n":-1.5e3}`, `{"card":"[REDACTED]","card":"[REDACTED]","n":-1.5e3}`, 2},
		{`{"pass\u0077ord":true,"\u00fc":"x"}`, `{"pass\u0077ord":"[REDACTED]","\u00fc":"[REDACTED]"}`, 2},
		{`{"nested":{"password":"kept"}}`, `{"nested":{"password":"kept"}}`, 0},
		{`{}`, `{}`, 0},
		{`{"s":"a\"b\\","password":"p"}`, `{"s":"a\"b\\","password":"[REDACTED]"}`, 1},
	} {
		out, n, err := redact([]byte(tc.in), fields)
		if err != nil || string(out) != tc.want || n != tc.n {
			t.Errorf("redact(%s) = %s, %d, %v; want %s, %d", tc.in, out, n, err, tc.want, tc.n)
		}
		if !json.Valid(out) {
			t.Errorf("redact(%s) = %s: not valid JSON", tc.in, out)
		}
	}
}

func TestRedactRefusesNonObjects(t *testing.T) {
	for _, in := range []string{
		``, `[]`, `"x"`, `42`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1} x`, `{"a":[1}`,
		`{"a":"unterminated}`, `{"a":tru}`, `{"a":1.2.3}`, `{"a":-inf}`, `{"a":0x1}`, `{"a":01}`, `{"a":1.}`, `{"a":1e}`, `{a:1}`, "{\"a\":\"\x01\"}",
	} {
		if out, _, err := redact([]byte(in), map[string]bool{"a": true}); err == nil {
			t.Errorf("redact(%q) = %q, want an error", in, out)
		}
	}
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte(`{"password":"x","a":[1,2,{"b":null}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		out, _, err := redact(doc, map[string]bool{"password": true, "a": true})
		var obj map[string]json.RawMessage
		isObject := json.Unmarshal(doc, &obj) == nil && obj != nil // "null" unmarshals into a map too
		if err != nil {
			if isObject {
				t.Fatalf("redact(%s) refused a JSON object: %v", doc, err)
			}
			return
		}
		// Whatever the scanner accepts and json accepts, the result must be valid JSON too.
		if json.Valid(doc) && !json.Valid(out) {
			t.Fatalf("redact(%s) = %s: not valid JSON", doc, out)
		}
	})
}
