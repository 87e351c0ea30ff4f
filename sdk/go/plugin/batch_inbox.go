//go:build !tinybroker_noinbox

package plugin

import "github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"

// Batches come with the inbox (batch.go): a plugin built without it has no batch code.
func init() {
	bridge.RunPublishBatch = runPublishBatch
}
