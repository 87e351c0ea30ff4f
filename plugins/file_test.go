package plugins

import (
	"bytes"
	"context"
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
