package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Issue 23, finding 1: a plugin whose on_publish loops forever, at the defaults and with
// call_timeout = "none". The canary (on topics the plugin does not see) must keep its p99,
// and the server must stop on SIGTERM (the harness's end-of-scenario check).

// loopConfig declares plugins/testdata/loop.wasm (beside -plugin) on loop.>, with the
// plugin settings given (none: the defaults).
func loopConfig(settings string) func(o *options, dir string) (string, error) {
	return func(o *options, dir string) (string, error) {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(o.plugin), "loop.wasm"))
		if err != nil {
			return "", err
		}
		p := filepath.Join(dir, "loop.wasm")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", err
		}
		return fmt.Sprintf("plugin \"loop\" {\n  path   = %q\n  topics = [\"loop.>\"]\n%s}\n", p, settings), nil
	}
}

// loopingPublishes: 8 publishers send to loop.x for 5 s, each waiting at most wait for its
// answer (the plugin's failure policy, fail_open by default: the message passes). With
// stuck > 0, that many publishes may stay unanswered (they wait on a looping call, which
// only shutdown stops); the others must be answered.
func loopingPublishes(wait time.Duration, stuck int64) func(e *env) error {
	return func(e *env) error {
		var answered, failed, unanswered atomic.Int64
		var slowest atomic.Int64
		var wg sync.WaitGroup
		until := time.Now().Add(5 * time.Second)
		for range 8 {
			c := e.client()
			wg.Go(func() {
				for time.Now().Before(until) && e.ctx.Err() == nil {
					start := time.Now()
					ctx, cancel := context.WithTimeout(e.ctx, wait)
					_, err := c.Publish(ctx, &pb.PublishRequest{Topic: "loop.x", Payload: []byte("x")})
					cancel()
					took := time.Since(start)
					if status.Code(err) == codes.DeadlineExceeded {
						unanswered.Add(1)
						continue
					}
					for {
						s := slowest.Load()
						if int64(took) <= s || slowest.CompareAndSwap(s, int64(took)) {
							break
						}
					}
					if err != nil {
						failed.Add(1)
						if status.Code(err) != codes.Unavailable {
							e.r.refused(err)
						}
						continue
					}
					answered.Add(1)
				}
			})
		}
		wg.Wait()
		e.r.figure("%d publishes to the looping plugin's topic answered, %d failed, %d unanswered after %v; slowest answer %v",
			answered.Load(), failed.Load(), unanswered.Load(), wait, time.Duration(slowest.Load()).Round(time.Millisecond))
		if n := unanswered.Load(); n > stuck {
			return fmt.Errorf("%d publishes unanswered after %v, want at most %d", n, wait, stuck)
		}
		return nil
	}
}
