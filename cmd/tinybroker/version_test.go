package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// A binary built as make build builds it, -ldflags "-X main.version=... -X main.commit=...",
// reports that version and commit even without Go's VCS stamping (-buildvcs=false, or a
// source tree that is not a git checkout).
func TestVersionStamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tinybroker")
	build := exec.Command("go", "build", "-buildvcs=false",
		"-ldflags", "-X main.version=v1.2.3 -X main.commit=0123456789abcdef0123456789abcdef01234567", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if v.Version != "v1.2.3" || v.Commit != "0123456789abcdef0123456789abcdef01234567" {
		t.Fatalf("version %+v, want v1.2.3 at 0123456789ab...", v)
	}
	line, err := exec.Command(bin, "--version").Output()
	if err != nil || string(line) == "" || !json.Valid(out) {
		t.Fatalf("--version: %q %v", line, err)
	}
	if want := "tinybroker v1.2.3 (0123456789ab) "; string(line[:len(want)]) != want {
		t.Fatalf("--version: %q, want it to start %q", line, want)
	}
}
