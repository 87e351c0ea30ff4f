package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/internal/abi"
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

// The committed WIT file lists every host function and export of the table, each with its
// doc sentence, and is what the table makes of it now: a function added to the table without
// `make generate` fails here.
func TestWITListsTable(t *testing.T) {
	committed, err := os.ReadFile("../../../" + witPath)
	if err != nil {
		t.Fatal(err)
	}
	wit := string(committed)
	host, world, ok := strings.Cut(wit, "\nworld plugin {\n")
	if !ok || !strings.Contains(host, "\ninterface host {\n") {
		t.Fatalf("%s has no interface host and world plugin", witPath)
	}
	listed := func(in, decl, doc string) {
		t.Helper()
		i := strings.Index(in, decl)
		if i < 0 {
			t.Errorf("%s does not declare %q", witPath, decl)
			return
		}
		// The doc comment: the /// lines right above the declaration.
		var comment []string
		lines := strings.Split(in[:i], "\n")
		for j := len(lines) - 1; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "///"); j-- {
			comment = append(comment, lines[j])
		}
		first, _, _ := strings.Cut(doc, ".")
		if !strings.Contains(strings.ToLower(strings.Join(comment, "\n")), strings.ToLower(first)) {
			t.Errorf("%s: %q is not under its doc %q", witPath, decl, first)
		}
	}
	for _, f := range abi.HostFuncs {
		listed(host, "\n  "+witName(f.Name)+": func(", f.Doc)
	}
	for _, e := range abi.Exports {
		listed(world, "\n  export "+witName(e.Name)+": func(", e.Doc)
	}
	if !strings.Contains(world, "export "+witName(abi.Marker)+": func();") {
		t.Errorf("%s has no marker export", witPath)
	}
	if strings.Count(wit, "{") != strings.Count(wit, "}") {
		t.Errorf("%s: unbalanced braces", witPath)
	}
	now, err := witFile()
	if err != nil {
		t.Fatal(err)
	}
	if now != wit {
		t.Errorf("%s is not what the table makes of it: run make generate", witPath)
	}
}

// A reader is rendered with its value as the result, a writer with a status; a function
// whose Ret does not fit its parameters is refused rather than rendered wrong.
func TestWITFunc(t *testing.T) {
	for _, tc := range []struct {
		f    abi.Func
		want string
	}{
		{abi.Func{Name: "v1_get", Params: []abi.Param{{Name: "key", Kind: abi.In}, {Name: "key_len", Kind: abi.Len}, {Name: "buf", Kind: abi.Out}, {Name: "cap", Kind: abi.Len}}, Result: abi.I32, Ret: abi.Absent},
			"func(key: string) -> option<string>"},
		{abi.Func{Name: "v1_body", Params: []abi.Param{{Name: "buf", Kind: abi.Out, Bytes: true}, {Name: "cap", Kind: abi.Len}}, Result: abi.I32, Ret: abi.Length},
			"func() -> list<u8>"},
		{abi.Func{Name: "v1_set", Params: []abi.Param{{Name: "ptr", Kind: abi.In}, {Name: "len", Kind: abi.Len}}, Result: abi.I32, Ret: abi.Status},
			"func(value: string) -> result<_, error-code>"},
		{abi.Func{Name: "v1_type", Params: []abi.Param{{Name: "type", Kind: abi.I64}}, Result: abi.I64},
			"func(%type: s64) -> s64"},
	} {
		if got, err := witFunc(tc.f); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.f.Name, got, err, tc.want)
		}
	}
	for _, f := range []abi.Func{
		{Name: "v1_reader_without_ret", Params: []abi.Param{{Name: "buf", Kind: abi.Out}, {Name: "cap", Kind: abi.Len}}, Result: abi.I32},
		{Name: "v1_status_without_i32", Params: []abi.Param{{Name: "ptr", Kind: abi.In}, {Name: "len", Kind: abi.Len}}, Ret: abi.Status},
		{Name: "v1_no_len", Params: []abi.Param{{Name: "ptr", Kind: abi.In}}},
	} {
		if got, err := witFunc(f); err == nil {
			t.Errorf("%s rendered as %q", f.Name, got)
		}
	}
}
