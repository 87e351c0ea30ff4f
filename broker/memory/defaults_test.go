package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// The defaults from the machine's memory: GOMEMLIMIT 3/4 of it, the budget a quarter of
// GOMEMLIMIT, so that a full budget's heap (twice what it holds, the garbage collector's goal
// at GOGC=100, measured by TestDefaultBudgetHeapGoal) plus what the budget does not count
// stays at half of GOMEMLIMIT. Issue 23: the budget was half of GOMEMLIMIT, 9 GiB on a 24 GiB
// machine, whose full heap (18 GiB) was all of GOMEMLIMIT.
func TestDefaultsFromMachine(t *testing.T) {
	const (
		gib = int64(1) << 30
		mib = int64(1) << 20
		// heapPerByte is the heap a held byte costs at its peak: the live byte and as much
		// garbage before the collector runs (GOGC=100).
		heapPerByte = 2
		// overhead is what the budget does not count, besides: the runtime, goroutine stacks,
		// the gctuner's 32 MiB heap floor, gRPC's buffers (make chaos: 30-60 MiB of RSS with
		// nothing held).
		overhead = 64 * mib
	)
	for _, tc := range []struct {
		machine, limit, budget int64
	}{
		{24 * gib, 18 * gib, 18 * gib / 4},
		{4 * gib, 3 * gib, 768 * mib},
		{1 * gib, 768 * mib, 192 * mib},
		{256 * mib, 192 * mib, 64 * mib}, // the floor
	} {
		limit := DefaultGoMemLimit(tc.machine)
		budget := DefaultBudget(limit)
		peak := heapPerByte*budget + overhead
		t.Logf("machine %d MiB: GOMEMLIMIT %d MiB, budget %d MiB, full budget's peak heap %d MiB", tc.machine/mib, limit/mib, budget/mib, peak/mib)
		if limit != tc.limit || budget != tc.budget {
			t.Errorf("machine %d MiB: GOMEMLIMIT %d MiB, budget %d MiB; want %d MiB and %d MiB", tc.machine/mib, limit/mib, budget/mib, tc.limit/mib, tc.budget/mib)
		}
		if limit >= tc.machine {
			t.Errorf("machine %d MiB: GOMEMLIMIT %d MiB is not inside the machine", tc.machine/mib, limit/mib)
		}
		if tc.machine >= gib && peak > limit/2+overhead {
			t.Errorf("machine %d MiB: a full budget of %d MiB peaks at about %d MiB of heap, over half of GOMEMLIMIT (%d MiB) and the overhead",
				tc.machine/mib, budget/mib, peak/mib, limit/mib)
		}
		if peak > limit {
			t.Errorf("machine %d MiB: a full budget peaks at about %d MiB, over GOMEMLIMIT %d MiB", tc.machine/mib, peak/mib, limit/mib)
		}
	}
	// An operator's GOMEMLIMIT is the limit the budget is a quarter of.
	if got := DefaultBudget(1 * gib); got != 256*mib {
		t.Errorf("DefaultBudget(GOMEMLIMIT 1 GiB) = %d MiB, want 256", got/mib)
	}
}

// The memory a process may use is the smallest limit of its own cgroup and its ancestors,
// not only the hierarchy's root: systemd's MemoryMax= and container runtimes set it on a
// cgroup below the root.
func TestSystemMemoryCgroup(t *testing.T) {
	const meminfo = "MemTotal:       25165824 kB\nMemFree:        1 kB\n" // 24 GiB
	for _, tc := range []struct {
		name   string
		cgroup string
		files  map[string]string // under sys/fs/cgroup
		want   int64
	}{
		{"no cgroup file", "", nil, 24 << 30},
		{"v2 unlimited", "0::/system.slice/tinybroker.service\n", map[string]string{
			"system.slice/tinybroker.service/memory.max": "max\n", "system.slice/memory.max": "max\n"}, 24 << 30},
		{"v2 own cgroup", "0::/system.slice/tinybroker.service\n", map[string]string{
			"system.slice/tinybroker.service/memory.max": "2147483648\n", "system.slice/memory.max": "max\n"}, 2 << 30},
		{"v2 parent's limit is smaller", "0::/system.slice/tinybroker.service\n", map[string]string{
			"system.slice/tinybroker.service/memory.max": "2147483648\n", "system.slice/memory.max": "1073741824\n"}, 1 << 30},
		{"v2 namespaced root", "0::/\n", map[string]string{"memory.max": "536870912\n"}, 512 << 20},
		{"v1", "12:pids:/x\n4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n", map[string]string{
			"memory/docker/abc/memory.limit_in_bytes": "3221225472\n", "memory/memory.limit_in_bytes": "9223372036854771712\n"}, 3 << 30},
		{"limit above the machine", "0::/a\n", map[string]string{"a/memory.max": "68719476736\n"}, 24 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write := func(p, s string) {
				p = filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("proc/meminfo", meminfo)
			if tc.cgroup != "" {
				write("proc/self/cgroup", tc.cgroup)
			}
			for p, s := range tc.files {
				write(filepath.Join("sys/fs/cgroup", p), s)
			}
			if got := systemMemory(root); got != tc.want {
				t.Fatalf("systemMemory = %d MiB, want %d MiB", got>>20, tc.want>>20)
			}
		})
	}
}

// heapGoal is the garbage collector's heap goal now: the heap size at which it will start
// its next cycle.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// At the default budget, memberless consumer groups filled until they refuse hold, in live
// heap, what the budget charged (bytes per message real and charged, reported), and the
// garbage collector's heap goal — the heap the process reaches before its next collection,
// which is what RSS follows — stays within half of GOMEMLIMIT. Issue 23: with the budget at
// half of GOMEMLIMIT, full groups (3/4 of the budget) set a heap goal of 3/4 of GOMEMLIMIT,
// and a full budget all of it (1.18 GB held was 2.33 GB of RSS).
func TestDefaultBudgetHeapGoal(t *testing.T) {
	const limit = 512 << 20 // GOMEMLIMIT for this test: the defaults derive from it
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // the heap goal is twice the live heap
	for _, size := range []int{64 << 10, 1 << 10, 16} {
		t.Run(fmt.Sprintf("payload %d", size), func(t *testing.T) {
			before := liveHeap()
			b := newTestBroker(t, Options{}) // the default budget
			budget := b.MemoryBudget()
			if want := int64(limit / 4); budget != want {
				t.Errorf("default budget %d MiB with GOMEMLIMIT %d MiB, want %d MiB", budget>>20, limit>>20, want>>20)
			}
			groups := groupNamesForTest(8)
			for _, g := range groups {
				s, err := b.Subscribe(broker.SubscribeOptions{ID: g, Group: g, Patterns: []string{g}, Mode: broker.Balanced})
				if err != nil {
					t.Fatal(err)
				}
				s.Close() // memberless: everything queues
			}
			held := 0
			for _, g := range groups {
				for {
					// Each its own payload, as the server decodes it from its frame.
					if _, err := b.Publish(g, make([]byte, size), nil); err != nil {
						if !errors.Is(err, broker.ErrGroupFull) {
							t.Fatal(err)
						}
						break
					}
					held++
				}
			}
			live := liveHeap() - before
			goal := heapGoal()
			counted := b.MemoryUsed()
			t.Logf("%d messages of %d bytes held: charged %d B each (%d MiB), live heap %d B each (%d MiB, %.2f× charged); heap goal %d MiB, GOMEMLIMIT %d MiB, budget %d MiB",
				held, size, counted/int64(held), counted>>20, live/uint64(held), live>>20, float64(live)/float64(counted), goal>>20, limit>>20, budget>>20)
			if counted < b.mem.groupsLimit*9/10 {
				t.Fatalf("the groups hold %d MiB as charged, want about their share, %d MiB", counted>>20, b.mem.groupsLimit>>20)
			}
			if float64(live) > 1.1*float64(counted) {
				t.Errorf("the held messages take %d MiB of live heap, over 1.1× the %d MiB charged: under-counted", live>>20, counted>>20)
			}
			if goal > limit/2 {
				t.Errorf("heap goal %d MiB with groups full at the default budget, over half of GOMEMLIMIT (%d MiB)", goal>>20, limit>>20)
			}
			runtime.KeepAlive(b)
		})
	}
}

func groupNamesForTest(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("g%d", i)
	}
	return names
}
