//go:build !unix

package bench

import (
	"errors"
	"time"
)

// selfCPU is not measured where there is no getrusage: W6, which reports CPU time, runs on
// Unix only; the rest of `tinybroker bench` runs anywhere the broker builds.
func selfCPU() (time.Duration, error) {
	return 0, errors.New("W6 measures CPU time with getrusage, which this OS does not have: run it on Linux or another Unix")
}
