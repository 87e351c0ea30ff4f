package sysid

import (
	"strings"
	"testing"
)

// Format and Parse round-trip, and every id has exactly one spelling: of the strings that
// differ from it in the last character (whose low 4 bits are padding), only the id itself
// opens to its sequence number and secret.
func TestOneSpelling(t *testing.T) {
	c, err := New(make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for seq := uint64(1); seq < 200; seq++ {
		id := c.Format(seq, 42)
		if got, secret, ok := c.Parse(id); !ok || got != seq || secret != 42 {
			t.Fatalf("Parse(Format(%d, 42)) = %d, %d, %v", seq, got, secret, ok)
		}
		accepted := 0
		for _, r := range alphabet {
			if got, secret, ok := c.Parse(id[:Len-1] + string(r)); ok && got == seq && secret == 42 {
				accepted++
			}
		}
		if accepted != 1 {
			t.Fatalf("%d spellings of %s accepted, want 1", accepted, id)
		}
	}
	for _, bad := range []string{"", "short", strings.Repeat("A", Len+1), strings.Repeat("*", Len)} {
		if _, _, ok := c.Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
