package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The conformance plugins as built at 5bfe240 (testdata/v1-5bfe240), before every export
// carried the ABI version: each still loads, under its hooks' first names, and passes every
// row of the time (on the inbox, for the languages whose SDK had one then; TestConformance runs today's
// plugins on host calls alone too). The test fails if the broker stops accepting the first
// names (docs/ABI.md, "Export names").
func TestBuiltAt5bfe240(t *testing.T) {
	for _, lang := range languages {
		t.Run(lang, func(t *testing.T) {
			wasm, err := os.ReadFile(filepath.Join("testdata", "v1-5bfe240", lang+".wasm"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(wasm, []byte("\x0dtb_on_publish")) || bytes.Contains(wasm, []byte("\x10tb_v1_on_publish")) {
				t.Fatal("not a plugin built before the versioned export names: it should export tb_on_publish, not tb_v1_on_publish")
			}
			var old []row
			for _, r := range rows {
				if since[r.name] == "" {
					old = append(old, r)
				}
			}
			runRowsOf(t, wasm, old)
		})
	}
}
