package main

import (
	"os/exec"
	"testing"
)

// The SDKs' declarations, the WAT plugins' imports and docs/ABI.md's tables are what the
// table makes of them: `make generate` was run after the table changed.
func TestUpToDate(t *testing.T) {
	cmd := exec.Command("go", "run", "./internal/abi/gen", "-check")
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s\nrun make generate", err, out)
	}
}

// A WAT import of a function the ABI does not have is refused; one with another signature is
// rewritten to the table's.
func TestWATImports(t *testing.T) {
	out, err := watImports([]byte(`(import "tinybroker" "v1_now" (func $now (result i32)))`))
	if err != nil || string(out) != `(import "tinybroker" "v1_now" (func $now (result i64)))` {
		t.Fatalf("%s %v", out, err)
	}
	if _, err := watImports([]byte(`(import "tinybroker" "v1_nope" (func))`)); err == nil {
		t.Fatal("unknown import accepted")
	}
}
