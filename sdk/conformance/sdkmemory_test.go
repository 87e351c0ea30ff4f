package conformance

import (
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/plugins/plugintest"
)

// TestSDKMemoryStaysFlat runs the Rust, AssemblyScript and Zig conformance plugins for many
// calls that allocate (c.enum builds a string of every header, c.config one of the whole
// configuration) under a 2 MiB memory limit: an SDK that kept anything of a call (a stub
// runtime that never frees, an arena never reset) would outgrow the limit within a few
// thousand calls and fail one.
func TestSDKMemoryStaysFlat(t *testing.T) {
	calls := 20000
	if testing.Short() {
		calls = 2000
	}
	for _, lang := range []string{"rust", "assemblyscript", "zig"} {
		t.Run(lang, func(t *testing.T) {
			p := plugintest.LoadWith(t, buildFile(t, lang), pluginConfig, plugintest.Options{MemoryLimitBytes: 2 << 20, LogLevel: "warn"})
			headers := map[string]string{"a": "1", "b": strings.Repeat("x", 300), "c": "3"}
			for i := range calls {
				topic := "c.enum"
				if i%2 == 1 {
					topic = "c.config"
				}
				if r := p.Publish(plugintest.Message{Topic: topic, Payload: []byte("payload"), Headers: headers}); r.Err != nil {
					t.Fatalf("call %d (%s): %v", i, topic, r.Err)
				}
			}
		})
	}
}
