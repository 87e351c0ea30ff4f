// Package wasmbuild builds Go plugins for the SDK's tests, with the command the SDK's README
// gives:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o OUT PKG
package wasmbuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// RepoRoot returns the repository's root: the nearest directory above the working directory
// with a go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build builds the plugin in pkg, a package path relative to root such as
// "./examples/plugins/audit", to the file out, with the build tags given (e.g.
// tinybroker_noinbox).
func Build(root, pkg, out string, tags ...string) error {
	args := []string{"build", "-buildmode=c-shared", "-trimpath", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("GOOS=wasip1 GOARCH=wasm %s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	return nil
}

// BuildAll builds the plugins pkgs (by name: package path relative to root) into dir, a few
// at a time, and returns the modules by name.
func BuildAll(root, dir string, pkgs map[string]string) (map[string][]byte, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		sem  = make(chan struct{}, max(2, runtime.NumCPU()))
		out  = make(map[string][]byte, len(pkgs))
	)
	for name, pkg := range pkgs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			file := filepath.Join(dir, name+".wasm")
			err := Build(root, pkg, file)
			var b []byte
			if err == nil {
				b, err = os.ReadFile(file)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			out[name] = b
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
