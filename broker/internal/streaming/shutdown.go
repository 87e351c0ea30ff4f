package streaming

import (
	"context"
	"time"
)

// Drain is the wait of an engine's Shutdown, alike in every engine: it polls busy (how many
// messages the engine still holds for subscribers: in flight, or buffered) every 5 ms until
// it reports none, and returns nil; or, if ctx is done first, warns on log with msg and the
// count busy last reported, and returns ctx's error.
func Drain(ctx context.Context, log interface{ Warn(msg string, args ...any) }, msg string, busy func() int) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := busy()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			log.Warn(msg, "messages", n)
			return ctx.Err()
		case <-tick.C:
		}
	}
}
