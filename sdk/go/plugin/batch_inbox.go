//go:build !tinybroker_noinbox

package plugin

import "github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"

// Batches come with the inbox (batch.go): a plugin built without it has no batch code.
func init() {
	bridge.RunPublishBatch = func(fn any) int32 {
		f, _ := fn.(func(*Message) Verdict)
		return runPublishBatch(f)
	}
}
