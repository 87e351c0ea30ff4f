package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// exempt are the trees whose goroutines are not the broker's: load generators, the chaos
// harness, the guest SDKs and plugins (compiled to Wasm), and generated or vendored code.
var exempt = []string{"bench", "chaos", "sdk/go/plugin", "examples/plugins", "proto", "node_modules", "testdata"}

// sources calls f on every non-test Go file outside the exempt trees, parsed.
func sources(t *testing.T, f func(path string, file *ast.File, fset *token.FileSet)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || slices.ContainsFunc(exempt, func(e string) bool { return rel == e || strings.HasSuffix(rel, "/"+e) }) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		f(rel, file, fset)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every goroutine of the broker's code starts through sync.WaitGroup.Go on a WaitGroup its
// owner waits for when it stops (RATIONALE.md, "Every goroutine is tracked"): a bare go
// statement is refused here, whatever it starts.
func TestNoBareGoStatements(t *testing.T) {
	n := 0
	sources(t, func(path string, file *ast.File, fset *token.FileSet) {
		n++
		ast.Inspect(file, func(node ast.Node) bool {
			if g, ok := node.(*ast.GoStmt); ok {
				t.Errorf("%s: a bare go statement; start it with a sync.WaitGroup's Go on a WaitGroup its owner waits for", fset.Position(g.Pos()))
			}
			return true
		})
	})
	if n < 100 {
		t.Fatalf("read %d files: the walk missed the tree", n)
	}
}

// A package that starts goroutines checks in its tests that none outlives them (goleak): its
// own, or those of a package whose tests drive it (a test kit's, for one).
func TestGoroutinesLeakChecked(t *testing.T) {
	var leakChecked []string // the tests that use goleak
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != root) {
			if err == nil {
				err = filepath.SkipDir
			}
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), "goleak.") {
				leakChecked = append(leakChecked, string(b))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string]bool{}
	sources(t, func(path string, file *ast.File, _ *token.FileSet) {
		ast.Inspect(file, func(node ast.Node) bool {
			if c, ok := node.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" && len(c.Args) == 1 {
					starts[filepath.Dir(path)] = true
				}
			}
			return true
		})
	})
	if len(starts) < 5 {
		t.Fatalf("found %d packages starting goroutines: the check is blind", len(starts))
	}
	for dir := range starts {
		tests, _ := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
		found := false
		for _, f := range tests {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "goleak.") {
				found = true
				break
			}
		}
		importPath := `"github.com/tinybroker/tinybroker/` + dir + `"`
		found = found || slices.ContainsFunc(leakChecked, func(src string) bool { return strings.Contains(src, importPath) })
		if !found {
			t.Errorf("%s starts goroutines, and none of its tests checks for leaks (go.uber.org/goleak in TestMain)", dir)
		}
	}
}

// maxSeam bounds the top-level identifiers broker/ exports (types, functions, constants and
// variables; methods not counted): the seam holds what an engine implements and the server
// calls, and nothing else (RATIONALE.md, "Architecture"). Helpers go to broker/internal.
// 60 until the ordering keys (issue 27) added their contract: Dispatch and its Ordering
// (the type, its three values and ParseOrdering), KeyLoad and ValidateKey; 68 until the
// back-off policy (issue 28) added the two values its settings are read against, which the
// config file's checks share: MaxRedeliveryBackoff and NoJitter.
const maxSeam = 70

func TestSeamSize(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(root, "broker", "*.go"))
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("counted %d exported identifiers in broker/: the count is blind", len(names))
	}
	if len(names) > maxSeam {
		slices.Sort(names)
		t.Errorf("broker/ exports %d top-level identifiers, more than %d: move what only the engines share to broker/internal\n%s", len(names), maxSeam, strings.Join(names, " "))
	}
}
