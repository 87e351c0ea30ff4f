// Package lockrank is the lock order of both engines, in one place, as ranks: a goroutine
// may take a lock only while every lock it holds has a lower rank. The engines declare each
// mutex with its rank (lockrank.Mutex[lockrank.MemoryGroup], ...). Built without the
// lockrank tag, Mutex and RWMutex are sync.Mutex and sync.RWMutex, at no cost. Built with it
// (`go test -tags lockrank`, which `make test` runs on the engines and the server suite),
// every lock taken is checked against the locks its goroutine holds, and one taken out of
// order panics naming both, as the Go runtime's lock ranking does (runtime/lockrank.go).
//
// RATIONALE.md, "Lock order", says why the order is what it is.
package lockrank

// Rank is a class of locks: its place in the order, and its name. Only the types below
// implement it.
type Rank interface {
	rank() (int, string)
}

// The ranks, lowest first. Locks of one engine never nest with the other's; locks of the same
// rank (two groups' locks, say) are never held together.
type (
	// MemoryEngine is the memory engine's Engine.mu: the registry of fanout subscriptions
	// and groups. Publishing never takes it.
	MemoryEngine struct{}
	// JetStreamEngine is the JetStream engine's Engine.mu: its groups, streams and fanout
	// patterns; held while a consumer group is created or changed.
	JetStreamEngine struct{}
	// MemoryStreamSubs is a memory-engine stream's subscriptions by id (streaming.Subs); the
	// open of a subscription runs under it, and pushes its event to the outbox.
	MemoryStreamSubs struct{}
	// MemoryGroup is a memory-engine group's lock: its queue, members, in-flight sets.
	MemoryGroup struct{}
	// JetStreamGroup is a JetStream group's lock: its members, held deliveries, counts.
	JetStreamGroup struct{}
	// JetStreamDead orders counting a JetStream group's dead letters against changing them.
	JetStreamDead struct{}
	// JetStreamStream is a JetStream stream's buffer of deliveries and its subscriptions'
	// counters; taken under a group's lock, never the reverse.
	JetStreamStream struct{}
	// JetStreamStreamSubs is a JetStream stream's subscriptions by id (streaming.Subs),
	// listed under the stream's lock.
	JetStreamStreamSubs struct{}
	// Outbox is a memory-engine stream's buffer of deliveries, its closed flag and its
	// subscriptions' counters.
	Outbox struct{}
	// MemoryDelayed is the memory engine's heap of delayed publishes (Engine.delayed); taken
	// with no other lock held, it registers wake-ups (scheduler.mu) under it.
	MemoryDelayed struct{}
	// Scheduler is the memory engine's timer wheel of deadlines and delays.
	Scheduler struct{}
	// Index is the memory engine's topic index: a leaf.
	Index struct{}
	// Stores is the JetStream engine's table of stores awaiting JetStream's answer: a leaf.
	Stores struct{}
	// Dedupe is an engine's table of message ids published (publishing.Dedupe): a leaf,
	// taken with no other lock held.
	Dedupe struct{}
)

func (MemoryEngine) rank() (int, string)        { return 10, "memory Engine.mu" }
func (JetStreamEngine) rank() (int, string)     { return 10, "jetstream Engine.mu" }
func (MemoryStreamSubs) rank() (int, string)    { return 20, "memory Stream.subs.mu" }
func (JetStreamStreamSubs) rank() (int, string) { return 45, "jetstream Stream.subs.mu" }
func (MemoryGroup) rank() (int, string)         { return 30, "memory group.mu" }
func (JetStreamGroup) rank() (int, string)      { return 30, "jetstream group.mu" }
func (JetStreamDead) rank() (int, string)       { return 25, "jetstream group.deadMu" }
func (JetStreamStream) rank() (int, string)     { return 40, "jetstream Stream.mu" }
func (Outbox) rank() (int, string)              { return 40, "memory outbox.mu" }
func (MemoryDelayed) rank() (int, string)       { return 35, "memory delayed.mu" }
func (Scheduler) rank() (int, string)           { return 50, "memory scheduler.mu" }
func (Index) rank() (int, string)               { return 90, "memory index.mu" }
func (Stores) rank() (int, string)              { return 90, "jetstream stores.mu" }
func (Dedupe) rank() (int, string)              { return 90, "publishing Dedupe.mu" }
