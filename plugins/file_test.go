package plugins

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Only a regular file of bounded size that starts with the WebAssembly magic number is read.
func TestReadModule(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := filepath.Join("testdata", "good.wasm")
	want, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readModule(context.Background(), good, DefaultMaxPluginBytes); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("readModule(good.wasm) = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	if got, err := readModule(context.Background(), good, int64(len(want))); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("readModule(good.wasm) at exactly its size = %d bytes, %v", len(got), err)
	}
	cases := []struct {
		name, path string
		max        int64
		want       string
	}{
		{"directory", dir, DefaultMaxPluginBytes, "is a directory, not a regular file"},
		{"too large", good, int64(len(want)) - 1, "over the limit of"},
		{"not wasm", write("elf", []byte("\x7fELF\x02\x01\x01\x00rest")), DefaultMaxPluginBytes, "not a WebAssembly module: it starts with 7f 45 4c 46"},
		{"short", write("short", []byte("\x00asm")), DefaultMaxPluginBytes, "shorter than a module's 8-byte header"},
		{"missing", filepath.Join(dir, "missing.wasm"), DefaultMaxPluginBytes, "no such file"},
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases = append(cases, struct {
			name, path string
			max        int64
			want       string
		}{"/dev/zero", "/dev/zero", DefaultMaxPluginBytes, "is a character device, not a regular file"})
	}
	for _, c := range cases {
		if _, err := readModule(context.Background(), c.path, c.max); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: readModule(%s) = %v, want an error containing %q", c.name, c.path, err, c.want)
		}
	}
}

// A plugin whose file is refused is refused by Load, the error starting with where the
// config file declares it.
func TestLoadRefusesBadFile(t *testing.T) {
	h := newHost(t)
	path := filepath.Join(t.TempDir(), "x.wasm")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := h.Load(context.Background(), []Spec{{Name: "p", Path: path, Source: "tb.hcl:3,10-20"}})
	if err == nil || !strings.HasPrefix(err.Error(), "tb.hcl:3,10-20: plugin \"p\": ") || !strings.Contains(err.Error(), "not a WebAssembly module") {
		t.Fatalf("Load = %v", err)
	}
}

// Reading stopped because its context was cancelled (serve's, by a SIGTERM during a reload)
// says so, with the cause, not that the file took longer than the read timeout. Issue 23,
// finding 8: a reload cut short by SIGTERM 20 ms after SIGHUP was logged as "reading …
// took longer than 10s".
func TestReadModuleCalledOff(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.wasm")
	b := make([]byte, 3<<20) // past one read of 1 MiB: the context is checked between reads
	copy(b, "\x00asm\x01\x00\x00\x00")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("terminated signal received"))
	_, err := readModule(ctx, p, DefaultMaxPluginBytes)
	if err == nil || !strings.Contains(err.Error(), "was called off") || !strings.Contains(err.Error(), "terminated signal received") ||
		strings.Contains(err.Error(), "took longer") {
		t.Fatalf("readModule with a cancelled context = %v; want it called off, naming the cause", err)
	}
	h := newHost(t)
	_, err = h.Load(ctx, []Spec{{Name: "p", Path: p, Source: "tb.hcl:3,10-20"}})
	if err == nil || !strings.Contains(err.Error(), "was called off") || strings.Contains(err.Error(), "took longer") {
		t.Fatalf("Load with a cancelled context = %v; want it called off", err)
	}
}
