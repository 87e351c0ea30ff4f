package plugintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build builds the Go plugin in package pkg into a file in t.TempDir(), named after the
// package's directory, and returns its path, or fails the test. pkg is what `go build` takes, resolved in the test's working
// directory (its package's directory): "." for the package under test, a relative path such
// as "../tenant-filter", or an import path. It runs
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o FILE PKG
//
// which takes a few seconds (less once the go command has cached the packages). The file
// is removed when the test ends: to build once for several tests, call BuildTo from
// TestMain or a sync.Once, into a directory that outlives them.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	name := pkg
	if name == "." || name == ".." || strings.HasPrefix(name, "./") || strings.HasPrefix(name, "../") {
		if abs, err := filepath.Abs(name); err == nil {
			name = abs // "." is named after its directory
		}
	}
	out := filepath.Join(t.TempDir(), nameOf(name)+".wasm")
	if err := BuildTo(pkg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// BuildTo builds the Go plugin in package pkg (as Build) to the file out.
func BuildTo(pkg, out string) error {
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("plugintest: GOOS=wasip1 GOARCH=wasm %s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	return nil
}
