package memory

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/tinybroker/tinybroker/broker/internal/grouping"
)

// What the broker holds for later — messages queued, in flight or delayed in consumer groups,
// and messages buffered for fanout subscribers — is charged to one budget in bytes, counted
// as the memory a message really costs (grouping.MessageCost), plus a fixed overhead per
// holder. A message shared by many targets is charged once, plus the small overhead of each
// holder (see Message.cost and holders).
//
// Consumer groups may fill groupsShare of the budget; the rest is kept for fanout buffers
// and in-flight work, so that an abandoned group cannot starve live subscribers. See
// RATIONALE.md, "Why a memory budget in bytes?".

// holderOverhead is what a target spends to hold one message (grouping.HolderOverhead).
const (
	holderOverhead     = grouping.HolderOverhead
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

// The defaults from the machine. What the budget counts is the live heap the held messages
// take (TestMessageCostCoversHeap, TestDefaultBudgetHeapGoal), but the process's RSS is not
// its live heap: with GOGC=100 the garbage collector lets the heap grow to twice the live
// heap before it collects, so a broker holding B bytes reaches about 2 × B of heap (1.18 GB
// held was 2.33 GB of RSS, issue 23), and only GOMEMLIMIT stops it growing further. The
// budget is therefore a quarter of GOMEMLIMIT: a full budget's heap, 2 × B, is half of
// GOMEMLIMIT, which leaves the other half for what the budget does not count (gRPC's
// buffers, frames being decoded, plugins' memories, goroutines) before the collector even
// has to work harder, and GOMEMLIMIT (3/4 of the machine's memory) is the backstop that
// stays inside the machine. On a 24 GiB machine: GOMEMLIMIT 18 GiB, budget 4.5 GiB, a full
// budget about 9 GiB of RSS. See RATIONALE.md, "Why a memory budget in bytes?".
const (
	// limitQuarters is the part of the machine's (or cgroup's) memory serve gives the Go
	// runtime as its soft limit (GOMEMLIMIT), in quarters.
	limitQuarters = 3
	// budgetDivisor: the budget is GOMEMLIMIT / budgetDivisor.
	budgetDivisor = 4
	// minBudget is the smallest default budget: a group's default bound (1/8 of it) must
	// hold a few messages of the default max_message_bytes.
	minBudget = 64 << 20
	// fallbackLimit stands for GOMEMLIMIT when neither it nor the machine's memory is known.
	fallbackLimit = 4 << 30
)

// DefaultGoMemLimit is the soft memory limit serve gives the Go runtime on a machine (or in
// a cgroup) of mem bytes, unless GOMEMLIMIT is set: three quarters of it.
func DefaultGoMemLimit(mem int64) int64 { return mem / 4 * limitQuarters }

// DefaultBudget is the memory budget for a Go memory limit (GOMEMLIMIT) of limit bytes: a
// quarter of it, so that a full budget's heap (twice what it holds, at GOGC=100) is half of
// the limit; never less than 64 MiB.
func DefaultBudget(limit int64) int64 { return max(limit/budgetDivisor, minBudget) }

// DefaultMemoryLimit is the budget a broker gets when Options.MaxMemoryBytes is 0:
// DefaultBudget of the Go runtime's memory limit (GOMEMLIMIT, see SetMemoryLimit) if one is
// set, otherwise of the limit SetMemoryLimit would set (3/4 of the machine's or cgroup's
// memory): 3/16 of the machine's memory by default.
func DefaultMemoryLimit() int64 {
	lim := debug.SetMemoryLimit(-1)
	if lim <= 0 || lim == math.MaxInt64 {
		lim = fallbackLimit
		if phys := SystemMemory(); phys > 0 {
			lim = DefaultGoMemLimit(phys)
		}
	}
	return DefaultBudget(lim)
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
		debug.SetMemoryLimit(DefaultGoMemLimit(phys))
	}
	return debug.SetMemoryLimit(-1)
}

// SystemMemory returns the memory this process may use: the smallest memory limit of its
// cgroup and the cgroup's ancestors (cgroup v2's memory.max, v1's memory.limit_in_bytes), if
// one is set below the machine's physical memory, else the physical memory; 0 if neither
// can be read.
func SystemMemory() int64 { return systemMemory("/") }

// systemMemory is SystemMemory with /proc and /sys/fs/cgroup under root (tests).
func systemMemory(root string) int64 {
	phys := int64(0)
	if b, err := os.ReadFile(filepath.Join(root, "proc/meminfo")); err == nil {
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
	if lim := cgroupMemoryLimit(root); lim > 0 && (phys == 0 || lim < phys) {
		phys = lim
	}
	return phys
}

// cgroupMemoryLimit returns the smallest memory limit set on this process's cgroup or one
// of its ancestors, or 0. /proc/self/cgroup names the cgroup: "0::/a/b" in cgroup v2 (its
// files under /sys/fs/cgroup/a/b), "N:memory:/a/b" in v1 (under /sys/fs/cgroup/memory/a/b).
// A limit set by systemd (MemoryMax=) or by a container runtime is on a cgroup below the
// root of the hierarchy, unless the container has its own cgroup namespace, where the
// process's cgroup is "/"; so every level is read, from the process's own to the root.
// "max" (v2) and v1's huge "unlimited" number are no limit.
func cgroupMemoryLimit(root string) int64 {
	// The limit files to read: of the process's cgroup and its ancestors; without
	// /proc/self/cgroup, the roots'.
	var files []string
	b, _ := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			files = append(files, cgroupLevels(filepath.Join(root, "sys/fs/cgroup"), f[2], "memory.max")...)
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			files = append(files, cgroupLevels(filepath.Join(root, "sys/fs/cgroup/memory"), f[2], "memory.limit_in_bytes")...)
		}
	}
	if len(files) == 0 {
		files = []string{filepath.Join(root, "sys/fs/cgroup/memory.max"), filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes")}
	}
	lim := int64(0)
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (lim == 0 || n < lim) {
				lim = n
			}
		}
	}
	return lim
}

// cgroupLevels lists file in the folder of cgroup path under mount and in each ancestor's.
func cgroupLevels(mount, path, file string) []string {
	var files []string
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		files = append(files, filepath.Join(mount, p, file))
		if p == "/" {
			return files
		}
	}
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

// releaseAll is release of each of ms, with one change to the budget.
func (b *Engine) releaseAll(ms []*message, overhead int64) {
	if len(ms) == 0 {
		return
	}
	n := int64(len(ms)) * overhead
	for _, m := range ms {
		n += unheld(m)
	}
	b.mem.add(-n)
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
