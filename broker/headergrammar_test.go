package broker

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/internal/testing/headercases"
)

// The header grammar at the seam: every header of the one table (headercases) is accepted
// or refused as the table says, by Header.Check (which the plugins' host functions call too)
// and by a publish's check (Limits.CheckMessage), alone or all together; a refusal is INVALID_ARGUMENT
// (ErrInvalidMessage) and names the header's rule. The engines run the same table through
// the real server (server/headers_test.go).
func TestHeaderGrammar(t *testing.T) {
	limits := Limits{}.WithDefaults()
	valid := map[string]string{}
	for _, c := range headercases.Cases {
		err := Header{Key: c.Key, Value: c.Value}.Check()
		_, pubErr := limits.CheckMessage("t", nil, MakeHeaders(map[string]string{c.Key: c.Value}))
		if c.Valid() {
			if err != nil || pubErr != nil {
				t.Errorf("header %q: %q refused: %v; publish: %v", c.Key, c.Value, err, pubErr)
			}
			valid[c.Key] = c.Value
			continue
		}
		for _, err := range []error{err, pubErr} {
			if !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), c.Refused) {
				t.Errorf("header %q: %q: got %v, want ErrInvalidMessage saying %q", c.Key, c.Value, err, c.Refused)
			}
		}
	}
	h := MakeHeaders(valid)
	if _, err := limits.CheckHeaders(h); err != nil {
		t.Fatalf("every valid header together: %v", err)
	}
	if !maps.Equal(h.Map(), valid) {
		t.Fatal("headers changed")
	}
}

// A message over max_headers is refused naming the limit, however many it has: the server
// stops decoding a message's headers at the first past the limit, so the refusal cannot
// say how many there were.
func TestTooManyHeaders(t *testing.T) {
	limits := Limits{MaxHeaders: 2}.WithDefaults()
	_, err := limits.CheckHeaders(MakeHeaders(map[string]string{"a": "", "b": "", "c": ""}))
	if !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), "more than 2 headers") || !strings.Contains(err.Error(), "max_headers") {
		t.Fatalf("3 headers, limit 2: %v", err)
	}
}
