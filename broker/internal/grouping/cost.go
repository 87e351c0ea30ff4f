package grouping

// What an engine holds for a consumer group is counted against the group's max_queued_bytes
// (and its owner's Quota) as the memory a message really costs, whatever the engine keeps
// it in: payload, topic, id and headers, each header's own bookkeeping, the shared encoding
// the server caches for a message with several targets, and a fixed overhead. Both engines
// count with MessageCost, so that a bound admits the same messages on either.

const (
	// messageOverhead is what a Message costs besides its bytes: the struct, its headers'
	// slice and the allocator's rounding.
	messageOverhead = 256
	// headerOverhead is what one header costs besides its key and value bytes: its Header (32
	// bytes) and two string allocations, rounded up. Measured by the memory engine's
	// TestMessageCostCoversHeap.
	headerOverhead = 112
	// HolderOverhead is what a target spends to hold one message: a consumer group's entry,
	// its slot in the queue ring and in the member's in-flight map (~128 bytes), or a
	// Delivery in a stream's buffer (~48: counted as much, to keep one constant).
	HolderOverhead = 128
)

// MessageCost is what holding a message costs while any of its targets holds it (headers:
// how many it has; key: its ordering key); a group is charged this plus HolderOverhead.
func MessageCost(topic, key, systemID string, payload []byte, headers, headerBytes, targets int) int64 {
	body := int64(len(payload) + headerBytes + len(topic) + len(key) + len(systemID))
	n := int64(messageOverhead) + body + int64(headerOverhead*headers)
	if targets > 1 { // the server caches its encoding to share it between deliveries
		n += body + int64(8*headers)
	}
	return n
}

// BusiestKeys is how many of a keyed group's busiest keys (or tenants) GroupStats.Busiest
// lists, and the metrics label.
const BusiestKeys = 5

// NoisyMin is the fewest messages a key (or tenant) must hold to be called noisy, besides
// over a tenth of what its group holds: a group holding ten messages of three keys is not
// flooded.
const NoisyMin = 100
