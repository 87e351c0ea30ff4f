package codecheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNPMLocalPathsAreNormal checks that every `file:` dependency in the npm packages CI
// installs with `npm ci` is written the way npm normalises it. npm records a local package
// under the shortest relative path; a longer spelling of the same folder
// ("../../../sdk/assemblyscript" from sdk/conformance/assemblyscript) still installs with
// `npm install` but makes `npm ci` on a clean clone fail with "Missing target in lock file".
func TestNPMLocalPathsAreNormal(t *testing.T) {
	for _, dir := range []string{"sdk/assemblyscript", "sdk/conformance/assemblyscript", "sdk/zig"} {
		abs, err := filepath.Abs(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		var pkg struct {
			Dependencies    map[string]string `json:"dependencies"`
			DevDependencies map[string]string `json:"devDependencies"`
		}
		readJSON(t, filepath.Join(abs, "package.json"), &pkg)
		var lock struct {
			Packages map[string]json.RawMessage `json:"packages"`
		}
		readJSON(t, filepath.Join(abs, "package-lock.json"), &lock)
		for _, deps := range []map[string]string{pkg.Dependencies, pkg.DevDependencies} {
			for name, spec := range deps {
				p, ok := strings.CutPrefix(spec, "file:")
				if !ok {
					continue
				}
				target := filepath.Join(abs, p)
				if _, err := os.Stat(filepath.Join(target, "package.json")); err != nil {
					t.Errorf("%s/package.json: %s: %q names no package: %v", dir, name, spec, err)
					continue
				}
				normal, _ := filepath.Rel(abs, target)
				if filepath.ToSlash(normal) != p {
					t.Errorf("%s/package.json: %s: write %q as \"file:%s\", the path npm ci looks up in the lock file", dir, name, spec, filepath.ToSlash(normal))
				}
				if _, ok := lock.Packages[p]; !ok {
					t.Errorf("%s/package-lock.json has no entry %q for %s: run npm install there", dir, p, name)
				}
			}
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
