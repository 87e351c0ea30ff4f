//go:build unix

package plugins

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used, in user and system mode: benchmarks report
// it per operation (cpu-ns/op) because, on a machine shared with other work, it varies much
// less than the wall-clock ns/op.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
