//go:build !wasip1

package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tinybroker/tinybroker/sdk/go/plugin/internal/wasmbuild"
)

// exampleHooks lists the example plugins (examples/plugins/<name>) and the hooks each
// implements, i.e. must export.
var exampleHooks = map[string][]string{
	"tenant-filter":  {"tb_v1_on_publish"},
	"content-router": {"tb_v1_on_publish"},
	"redact":         {"tb_v1_on_publish"},
	"retry-backoff":  {"tb_v1_on_redeliver"},
	"audit":          {"tb_v1_on_ack"},
}

// repoRoot is the repository's root directory, where go.mod is.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := wasmbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

var examples struct {
	once sync.Once
	dir  string            // where the .wasm files are
	err  error             // building them
	took time.Duration     // how long building them all took
	wasm map[string][]byte // the modules by plugin name
}

// builtExamples builds every example plugin, once per test binary, into a temporary
// directory, and returns the modules by name. It skips the test under -short.
func builtExamples(t *testing.T) map[string][]byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the example plugins with GOOS=wasip1 GOARCH=wasm (several seconds); skipped under -short")
	}
	root := repoRoot(t)
	examples.once.Do(func() {
		start := time.Now()
		examples.dir, examples.err = os.MkdirTemp("", "tinybroker-plugins-")
		if examples.err != nil {
			return
		}
		pkgs := make(map[string]string)
		for name := range exampleHooks {
			pkgs[name] = "./examples/plugins/" + name
		}
		examples.wasm, examples.err = wasmbuild.BuildAll(root, examples.dir, pkgs)
		examples.took = time.Since(start)
	})
	if examples.err != nil {
		t.Fatal(examples.err)
	}
	return examples.wasm
}

func TestMain(m *testing.M) {
	code := m.Run()
	if examples.dir != "" {
		os.RemoveAll(examples.dir)
	}
	os.Exit(code)
}

// TestExamplesAreListed keeps exampleHooks in step with examples/plugins.
func TestExamplesAreListed(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "examples", "plugins"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(repoRoot(t), "examples", "plugins", e.Name(), "main.go")); e.IsDir() && err == nil {
			dirs = append(dirs, e.Name())
		}
	}
	var listed []string
	for name := range exampleHooks {
		listed = append(listed, name)
	}
	slices.Sort(listed)
	if !slices.Equal(dirs, listed) {
		t.Errorf("examples/plugins has %v; this test knows %v", dirs, listed)
	}
}

// abiImports reads the host functions of docs/ABI.md: their names, and their signatures
// from the tables' "(params) -> result" column (every parameter is an i32).
func abiImports(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "ABI.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(v1_[a-z0-9_]+)` \\| `\\(([^)]*)\\) -> (\\(\\)|i32|i64)` \\|")
	sigs := make(map[string]string)
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		params := 0
		if strings.TrimSpace(m[2]) != "" {
			params = strings.Count(m[2], ",") + 1
		}
		result := m[3]
		if result == "()" {
			result = ""
		}
		sigs[m[1]] = signature(slices.Repeat([]api.ValueType{api.ValueTypeI32}, params), result)
	}
	if len(sigs) < 20 {
		t.Fatalf("found only %d host functions in docs/ABI.md: has its table format changed?", len(sigs))
	}
	return sigs
}

func signature(params []api.ValueType, result string) string {
	var p []string
	for _, v := range params {
		p = append(p, api.ValueTypeName(v))
	}
	return "(" + strings.Join(p, ",") + ")->" + result
}

func funcSignature(f api.FunctionDefinition) string {
	var r []string
	for _, v := range f.ResultTypes() {
		r = append(r, api.ValueTypeName(v))
	}
	return signature(f.ParamTypes(), strings.Join(r, ","))
}

// TestExamplesABI checks each example plugin's exports and imports against docs/ABI.md: the
// memory, the marker, tb_v1_init, exactly the hooks it implements, and imports from tinybroker
// (each a v1_ function of the ABI, with its signature) and wasi_snapshot_preview1 only.
func TestExamplesABI(t *testing.T) {
	wasm := builtExamples(t)
	abi := abiImports(t)
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter()) // compiling is enough; the interpreter compiles fastest
	defer r.Close(ctx)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range wasm {
			if !yield(n) {
				return
			}
		}
	}) {
		t.Run(name, func(t *testing.T) {
			cm, err := r.CompileModule(ctx, wasm[name])
			if err != nil {
				t.Fatal(err)
			}
			defer cm.Close(ctx)
			mem, ok := cm.ExportedMemories()["memory"]
			if !ok {
				t.Error("no memory export")
			} else {
				t.Logf("%s.wasm: %d KiB, initial memory %d pages (%d KiB)", name, len(wasm[name])>>10, mem.Min(), mem.Min()*64)
			}

			want := map[string]string{
				"_initialize":       "()->",
				"tinybroker_abi_v1": "()->",
				"tb_v1_init":        "()->i32",
			}
			for _, h := range exampleHooks[name] {
				want[h] = "()->i64"
			}
			// The inbox and, with on_publish, batches: the SDK's default.
			want["tb_v1_inbox"] = "(i32)->i32"
			if slices.Contains(exampleHooks[name], "tb_v1_on_publish") {
				want["tb_v1_on_publish_batch"] = "()->i32"
			}
			got := make(map[string]string)
			for n, f := range cm.ExportedFunctions() {
				got[n] = funcSignature(f)
			}
			for n, sig := range want {
				if got[n] != sig {
					t.Errorf("export %s: signature %q, want %q", n, got[n], sig)
				}
			}
			for n, sig := range got {
				if _, ok := want[n]; !ok {
					t.Errorf("unexpected export %s %s", n, sig)
				}
			}

			for _, f := range cm.ImportedFunctions() {
				module, n, _ := f.Import()
				switch module {
				case "tinybroker":
					sig, ok := abi[n]
					if !ok {
						t.Errorf("imports tinybroker.%s, which docs/ABI.md does not define", n)
					} else if got := funcSignature(f); got != sig {
						t.Errorf("imports tinybroker.%s%s; docs/ABI.md says %s", n, got, sig)
					}
				case "wasi_snapshot_preview1":
				default:
					t.Errorf("imports %s.%s: only tinybroker and wasi_snapshot_preview1 are allowed", module, n)
				}
			}
		})
	}
	t.Logf("built %d example plugins in %v", len(wasm), examples.took.Round(time.Millisecond))
}

// TestNoInboxTag checks that the tag tinybroker_noinbox builds a plugin without the inbox and
// batches (every field then read with a host call), and that without it they are there: the
// SDK's default.
func TestNoInboxTag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin with GOOS=wasip1 GOARCH=wasm; skipped under -short")
	}
	out := filepath.Join(t.TempDir(), "tenant-filter.wasm")
	if err := wasmbuild.Build(repoRoot(t), "./examples/plugins/tenant-filter", out, "tinybroker_noinbox"); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	exports := func(wasm []byte) map[string]api.FunctionDefinition {
		cm, err := r.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatal(err)
		}
		return cm.ExportedFunctions()
	}
	without, with := exports(bin), exports(builtExamples(t)["tenant-filter"])
	for _, name := range []string{"tb_v1_inbox", "tb_v1_on_publish_batch"} {
		if _, ok := without[name]; ok {
			t.Errorf("built with tinybroker_noinbox, it exports %s", name)
		}
		if _, ok := with[name]; !ok {
			t.Errorf("built by default, it does not export %s", name)
		}
	}
	if _, ok := without["tb_v1_on_publish"]; !ok {
		t.Error("built with tinybroker_noinbox, it does not export tb_v1_on_publish")
	}
}
