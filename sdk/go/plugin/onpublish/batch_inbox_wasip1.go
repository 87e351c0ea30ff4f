//go:build wasip1 && !tinybroker_noinbox

package onpublish

import "github.com/tinybroker/tinybroker/sdk/go/plugin/internal/bridge"

// tbV1OnPublishBatch is the broker giving a publish frame's messages in one call (docs/ABI.md,
// "Batches"), which it does only for a plugin built with the inbox (the default;
// not with the tag tinybroker_noinbox): the SDK runs the function registered with Handle on each of them, in
// one entry into the plugin rather than one per message.
//
//lint:ignore U1000 the host calls it: exported by go:wasmexport, which staticcheck does not read
//go:wasmexport tb_v1_on_publish_batch
func tbV1OnPublishBatch() int32 { return bridge.RunPublishBatch(handler) }
