package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// A live view's lines are cut to the terminal's width, and end with "\r\n" in raw mode.
func TestTopClipsLines(t *testing.T) {
	var b bytes.Buffer
	w := &clipWriter{w: &b, width: 10, crlf: true}
	io.WriteString(w, "0123456789abcdef\nshort\npart")
	io.WriteString(w, "ial line that is long\n")
	if want := "0123456789\r\nshort\r\npartial li\r\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	w = &clipWriter{w: &b} // width 0: whole lines
	io.WriteString(w, strings.Repeat("x", 200)+"\n")
	if b.Len() != 201 {
		t.Fatalf("width 0 cut a line to %d bytes", b.Len())
	}
}

// q (or Ctrl-C, Ctrl-D) ends a live view; other keys do not, nor does the end of input.
func TestTopQuitsOnQ(t *testing.T) {
	for _, c := range []struct {
		keys string
		quit bool
	}{{"xyq", true}, {"Q", true}, {"\x03", true}, {"\x04", true}, {"abc", false}, {"", false}} {
		quit := false
		quitOnKey(strings.NewReader(c.keys), func() { quit = true })
		if quit != c.quit {
			t.Errorf("keys %q: quit %v, want %v", c.keys, quit, c.quit)
		}
	}
}
