package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/tinybroker/tinybroker/plugins"
)

// The project templates of `plugin new`, one folder per language and common/ for every one.
// A file whose name ends in .tmpl is a text/template (given pluginLang's data) written without
// the suffix; __NAME__ in a file name becomes the plugin's name; "gitignore" files become
// .gitignore (the common one and the language's, joined).
//
//go:embed all:templates
var projectTemplates embed.FS

// pluginLang is what `plugin new` knows of a language.
type pluginLang struct {
	Lang, LangName string
	Source         string   // the plugin's source file, for the README
	SDK            string   // where its SDK comes from, for the README
	Guide          string   // docs/plugins/<lang>.md, if the tree has it
	Needs          string   // the toolchain, for the README
	sdkFiles       []string // files under the tree's root that must exist: the SDK
	copyFiles      []string // files copied from the tree's root into the project
}

var pluginLangs = map[string]pluginLang{
	"go": {Lang: "go", LangName: "Go", Source: "`main.go`",
		SDK:      "`github.com/tinybroker/tinybroker/sdk/go/plugin`, from your tinybroker tree (see go.mod's `replace`)",
		Needs:    "Building needs Go 1.26.",
		sdkFiles: []string{"go.mod", "sdk/go/plugin/doc.go"}},
	"c": {Lang: "c", LangName: "C", Source: "`NAME.c`",
		SDK:       "`tinybroker.h` and `tinybroker.c`, copied from sdk/c of your tinybroker tree",
		Needs:     "Building needs clang and wasm-ld (Debian: `apt-get install clang lld`); no libc.",
		sdkFiles:  []string{"sdk/c/tinybroker.h", "sdk/c/tinybroker.c"},
		copyFiles: []string{"sdk/c/tinybroker.h", "sdk/c/tinybroker.c"}},
	"rust": {Lang: "rust", LangName: "Rust", Source: "`src/lib.rs`",
		SDK:      "the `tinybroker` crate, a path dependency on sdk/rust of your tinybroker tree",
		Needs:    "Building needs Debian's Rust (`apt-get install rustc cargo libstd-rust-dev-wasm32`).",
		sdkFiles: []string{"sdk/rust/Cargo.toml"}},
	"assemblyscript": {Lang: "assemblyscript", LangName: "AssemblyScript", Source: "`index.ts`",
		SDK:      "the `tinybroker` npm package, a file: dependency on sdk/assemblyscript of your tinybroker tree",
		Needs:    "Building needs node and npm (Debian: `apt-get install nodejs npm`); the first build installs the compiler.",
		sdkFiles: []string{"sdk/assemblyscript/package.json"}},
	"zig": {Lang: "zig", LangName: "Zig", Source: "`NAME.zig`",
		SDK:      "sdk/zig/tinybroker.zig of your tinybroker tree",
		Needs:    "Building needs Zig 0.11.0 (`npm ci` in sdk/zig of your tinybroker tree installs it).",
		sdkFiles: []string{"sdk/zig/tinybroker.zig"}},
	"wat": {Lang: "wat", LangName: "WebAssembly text (WAT)", Source: "`NAME.wat`",
		SDK:   "none: the module imports the host functions itself, as the ABI gives them (docs/ABI.md)",
		Needs: "Building needs wat2wasm (Debian: `apt-get install wabt`)."},
}

// langNames lists the languages in the order the usage gives them.
var langNames = []string{"go", "rust", "c", "assemblyscript", "zig", "wat"}

// projectData is what the templates see.
type projectData struct {
	pluginLang
	Name  string // the plugin's name
	Ident string // Name as an identifier: '-' becomes '_' (Rust's library file name)
	Root  string // the tinybroker source tree, absolute
	// GoVersion is the go line of the tree's go.mod: a Go project's own must be at least
	// that, or go build asks for `go mod tidy` first.
	GoVersion string
}

// goLine returns the version of the go directive of the go.mod in root ("1.26.0" if none).
func goLine(root string) string {
	b, _ := os.ReadFile(filepath.Join(root, "go.mod"))
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "1.26.0"
}

const pluginNewUsage = `Creates the folder DIR (default: ./NAME) with a tinybroker plugin named NAME in LANG (go, rust,
c, assemblyscript, zig or wat): a tenant filter to change into your own, a Makefile, test messages
with the output they should give, and a broker configuration that loads it:

  cd NAME && make && make test && make serve

The project uses the SDK of a tinybroker source tree, so it builds without downloading
anything: TREE, by default the tinybroker checkout the current folder is in, or
$TINYBROKER_SDK.`

// pluginNewCmd is `tinybroker plugin new`.
func (a *app) pluginNewCmd() *cobra.Command {
	var lang, dir, sdk string
	c := &cobra.Command{
		Use:     "new --lang LANG [--dir DIR] [--sdk TREE] NAME",
		Short:   "Start a plugin project in any of the SDKs' languages",
		Long:    pluginNewUsage,
		Example: "  tinybroker plugin new --lang rust my-filter\n  cd my-filter && make && make test && make serve",
		Args:    exactArgs(1, "one NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := pluginLangs[lang]; !ok {
				if lang == "" {
					return usagef(cmd, "--lang is missing: choose one of %s", strings.Join(langNames, ", "))
				}
				return usagef(cmd, "--lang %q: choose one of %s", lang, strings.Join(langNames, ", "))
			}
			return newPluginProject(args[0], lang, dir, sdk, a.stdout)
		},
	}
	fs := c.Flags()
	fs.StringVar(&lang, "lang", "", "the language: "+strings.Join(langNames, ", "))
	fs.StringVar(&dir, "dir", "", "the folder to create (default: ./NAME)")
	fs.StringVar(&sdk, "sdk", "", "the tinybroker source tree whose sdk/ the project uses (default: the checkout around the current folder, or $TINYBROKER_SDK)")
	_ = c.RegisterFlagCompletionFunc("lang", cobra.FixedCompletions(langNames, cobra.ShellCompDirectiveNoFileComp))
	_ = c.MarkFlagDirname("dir")
	_ = c.MarkFlagDirname("sdk")
	return c
}

// newPluginProject creates the project of plugin name in lang.
func newPluginProject(name, lang, dirFlag, sdkFlag string, stdout io.Writer) error {
	dir, sdk := &dirFlag, &sdkFlag
	if name == "" || name[0] == '-' {
		return fmt.Errorf("plugin name %q: start it with a letter or digit", name)
	}
	if err := plugins.CheckName(name); err != nil {
		return err
	}
	l := pluginLangs[lang]
	root, err := findTree(*sdk)
	if err != nil {
		return err
	}
	for _, f := range l.sdkFiles {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			return fmt.Errorf("the tinybroker tree %s has no %s SDK (%s is missing); use a tree that has it (--sdk)", root, l.LangName, f)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "docs", "plugins", l.Lang+".md")); err == nil {
		l.Guide = filepath.Join(root, "docs", "plugins", l.Lang+".md")
	}
	l.Source = strings.ReplaceAll(l.Source, "NAME", name)
	if *dir == "" {
		*dir = name
	}
	if entries, err := os.ReadDir(*dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s already exists and is not empty; choose another --dir or NAME", *dir)
	}
	data := projectData{pluginLang: l, Name: name, Ident: strings.ReplaceAll(name, "-", "_"), Root: root, GoVersion: goLine(root)}
	files, err := renderProject(data)
	if err != nil {
		return err
	}
	for _, f := range l.copyFiles {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return err
		}
		files[path.Base(f)] = b
	}
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(*dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[rel], 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "Created %s, a %s plugin named %s, with the SDK of %s.\n\n  cd %s\n  make          # build %s.wasm\n  make test     # check it with tinybroker plugin test\n  make serve    # run it in a broker\n",
		*dir, l.LangName, name, root, *dir, name)
	return nil
}

// renderProject returns the files of data's project, by path relative to its folder.
func renderProject(data projectData) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, top := range []string{"templates/common", "templates/" + data.Lang} {
		err := fs.WalkDir(projectTemplates, top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := projectTemplates.ReadFile(p)
			if err != nil {
				return err
			}
			rel := strings.ReplaceAll(strings.TrimPrefix(p, top+"/"), "__NAME__", data.Name)
			if r, ok := strings.CutSuffix(rel, ".tmpl"); ok {
				t, err := template.New(p).Option("missingkey=error").Parse(string(b))
				if err != nil {
					return err
				}
				var out bytes.Buffer
				if err := t.Execute(&out, data); err != nil {
					return err
				}
				rel, b = r, out.Bytes()
			}
			if path.Base(rel) == "gitignore" {
				rel = path.Join(path.Dir(rel), ".gitignore")
				b = append(files[rel], b...)
			}
			files[rel] = b
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", top, err)
		}
	}
	return files, nil
}

// findTree returns the tinybroker source tree: flag if given, else the checkout around the
// working directory, else $TINYBROKER_SDK.
func findTree(flagValue string) (string, error) {
	var candidates []string
	if flagValue != "" {
		candidates = []string{flagValue}
	} else {
		if wd, err := os.Getwd(); err == nil {
			for d := wd; ; d = filepath.Dir(d) {
				candidates = append(candidates, d)
				if filepath.Dir(d) == d {
					break
				}
			}
		}
		if env := os.Getenv("TINYBROKER_SDK"); env != "" {
			candidates = append(candidates, env)
		}
	}
	for _, c := range candidates {
		b, err := os.ReadFile(filepath.Join(c, "go.mod"))
		if err != nil || !bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/tinybroker/tinybroker\n")) {
			continue
		}
		abs, err := filepath.Abs(c)
		if err != nil {
			return "", err
		}
		if strings.ContainsAny(abs, " \t\n\"'$#") {
			return "", fmt.Errorf("the tinybroker tree's path %q has a character make cannot handle (a space, quote, $ or #); move or link it elsewhere", abs)
		}
		return abs, nil
	}
	if flagValue != "" {
		return "", fmt.Errorf("--sdk %s: not a tinybroker source tree (no go.mod of module github.com/tinybroker/tinybroker)", flagValue)
	}
	return "", errors.New("plugin new uses the SDKs of a tinybroker source tree, and found none: run it inside a tinybroker checkout, or pass --sdk /path/to/tinybroker (or set TINYBROKER_SDK)")
}
