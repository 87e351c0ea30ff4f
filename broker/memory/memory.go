package memory

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/tinybroker/tinybroker/broker"
)

// What the broker holds for later — messages queued, in flight or delayed in consumer groups,
// and messages buffered for fanout subscribers — is charged to one budget in bytes, counted
// as the memory a message really costs (broker.MessageCost), plus a fixed overhead per
// holder. A message shared by many targets is charged once, plus the small overhead of each
// holder (see Message.cost and holders).
//
// Consumer groups may fill groupsShare of the budget; the rest is kept for fanout buffers
// and in-flight work, so that an abandoned group cannot starve live subscribers. See
// RATIONALE.md, "Why a memory budget in bytes?".

// holderOverhead is what a target spends to hold one message (broker.HolderOverhead).
const (
	holderOverhead     = broker.HolderOverhead
	groupEntryOverhead = holderOverhead
)

// groupsShare is the part of the memory budget that consumer groups together may hold.
const groupsShare = 0.75

// memBudget counts the bytes the broker holds for later against a limit.
type memBudget struct {
	limit       int64
	groupsLimit int64
	used        atomic.Int64
}

func newMemBudget(limit int64) *memBudget {
	return &memBudget{limit: limit, groupsLimit: int64(float64(limit) * groupsShare)}
}

func (m *memBudget) add(n int64) { m.used.Add(n) }

// DefaultMemoryLimit is the budget a broker gets when Options.MaxMemoryBytes is 0:
// defaultBudget of the Go runtime's memory limit (GOMEMLIMIT, see SetMemoryLimit).
func DefaultMemoryLimit() int64 {
	return defaultBudget(debug.SetMemoryLimit(-1), SystemMemory())
}

// defaultBudget is a quarter of the Go runtime's memory limit gomemlimit if one is set,
// otherwise a sixth of the machine's (or the cgroup's) memory phys, and never less than
// 64 MiB. A byte the budget counts costs about two of RSS at its peak (the garbage
// collector lets the heap grow to about twice what is live; RELIABILITY.md), so a full
// budget keeps the process near half of GOMEMLIMIT, well inside it and physical memory:
// 3/8 of the machine's memory with serve's GOMEMLIMIT of 3/4 (RATIONALE.md, "Why a memory
// budget in bytes?").
func defaultBudget(gomemlimit, phys int64) int64 {
	var n int64
	if gomemlimit > 0 && gomemlimit < math.MaxInt64 {
		n = gomemlimit / 4
	} else if phys > 0 {
		n = phys / 6
	} else {
		n = 512 << 20
	}
	return max(n, 64<<20)
}

// SetMemoryLimit gives the Go runtime a soft memory limit of three quarters of the machine's
// (or the cgroup's) memory, unless GOMEMLIMIT is set in the environment, and returns the
// limit in force. The garbage collector then works harder as the heap nears the limit
// instead of letting the process be killed.
func SetMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	if phys := SystemMemory(); phys > 0 {
		debug.SetMemoryLimit(phys / 4 * 3)
	}
	return debug.SetMemoryLimit(-1)
}

// SystemMemory returns the memory this process may use: the cgroup's limit if one is set,
// else the machine's physical memory; 0 if neither can be read.
func SystemMemory() int64 {
	phys := int64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(rest)
				if len(f) >= 1 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						phys = kb << 10
					}
				}
			}
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(p); err == nil {
			if lim, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && lim > 0 && (phys == 0 || lim < phys) {
				phys = lim
			}
		}
	}
	return phys
}

// charge starts the life of a new message in the budget with a hold for its creator and
// one for each of its n possible targets, so that publishing costs two atomic operations
// however many targets there are. A target that does not take the message, the creator when
// it is done, and each target when it lets go call release.
func (b *Engine) charge(m *message, n int) {
	m.holders.Store(int32(1 + n))
	b.mem.add(m.cost + int64(n)*holderOverhead)
}

// release lets go of one hold on m (the creator's is free of overhead: overhead 0); the last
// holder gives m's cost back to the budget.
func (b *Engine) release(m *message, overhead int64) {
	b.mem.add(-overhead - unheld(m))
}

// unheld drops one hold on m and returns what the budget gets back if it was the last.
func unheld(m *message) int64 {
	if m.holders.Add(-1) == 0 {
		return m.cost
	}
	return 0
}

// MemoryBudget returns the budget in bytes (Options.MaxMemoryBytes after defaults).
func (b *Engine) MemoryBudget() int64 { return b.mem.limit }

// MemoryUsed returns what the broker holds for later now, in bytes, as charged to its
// budget.
func (b *Engine) MemoryUsed() int64 { return b.mem.used.Load() }
