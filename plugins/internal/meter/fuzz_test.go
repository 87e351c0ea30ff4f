package meter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
)

// FuzzInstrument: whatever the bytes, Instrument returns an error or a module; and when wazero
// takes the bytes, it takes their rewrite (a decoding bug shows as a valid module rewritten
// into an invalid one). The converse need not hold: the rewrite drops sections that wazero
// may refuse (DWARF), and wazero refuses an empty custom section at the end of a module. The bytes go to wazero only when Instrument took
// them, as in the broker: wazero makes room for a vector from its count alone, so that a
// small module can make it ask for gigabytes; Instrument refuses those.
func FuzzInstrument(f *testing.F) {
	for _, glob := range []string{"testdata/*.wasm", "../../testdata/*.wasm"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, bin []byte) {
		out, err := Instrument(bin)
		if err != nil {
			if out != nil {
				t.Fatal("an error and a module")
			}
			return
		}
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter()) // validates as the compiler does, faster
		defer rt.Close(ctx)
		orig, oerr := rt.CompileModule(ctx, bin)
		if oerr == nil {
			_ = orig.Close(ctx)
		}
		m, err := rt.CompileModule(ctx, out)
		if err == nil {
			_ = m.Close(ctx)
		}
		if oerr == nil && err != nil {
			t.Fatalf("wazero on the module: %v; on its rewrite: %v", oerr, err)
		}
	})
}
