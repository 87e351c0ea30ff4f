package main

// Issue 23, finding 3: a flood of wrong tokens must not starve a valid login.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// floodUsers log in with bcrypt's default cost, as `tinybroker passwd` hashes: bob is
// guessed by the flood, late1-3 log in once each during it, never cached before.
var floodUsers = []string{"bob", "late1", "late2", "late3"}

func floodConfig(o *options, dir string) (string, error) {
	base, err := escapeConfig(o, dir) // the canary's user (and alice and bob, replaced below)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, block := range strings.SplitAfter(base, "}\n\n") {
		if strings.HasPrefix(block, "user \"canary\"") {
			b.WriteString(block)
		}
	}
	h, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.DefaultCost)
	if err != nil {
		return "", err
	}
	for _, u := range floodUsers {
		fmt.Fprintf(&b, "user %q {\n  token_hash = %q\n  publish {\n    allow = [\"%s.>\"]\n  }\n}\n\n", u, h, u)
	}
	return b.String(), nil
}

// dialToken is a connection that sends token, closed when the scenario ends.
func (e *env) dialToken(token string) pb.BrokerClient {
	c, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	if err != nil {
		panic(err) // only a malformed address makes NewClient fail
	}
	e.mu.Lock()
	e.conns = append(e.conns, c)
	e.mu.Unlock()
	return pb.NewBrokerClient(c)
}

// tokenFlood: 200 callers guess tokens for bob and for unknown names, as fast as the broker
// answers; after 3 s, late1, late2 and late3 each log in once (their first call, so not
// cached), one after the other: each must be answered OK within 1 s, at the first try.
func tokenFlood(e *env) error {
	ctx, stop := context.WithCancel(e.ctx)
	defer stop()
	var guesses, refusedAtOnce atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for i := range 200 {
		token := fmt.Sprintf("bob:wrong-%d", i)
		if i%2 == 1 {
			token = fmt.Sprintf("nobody%d:wrong", i)
		}
		c := e.dialToken(token)
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := c.Publish(ctx, &pb.PublishRequest{Topic: "bob.x", Payload: []byte("x")})
				guesses.Add(1)
				if status.Code(err) == codes.Unavailable {
					refusedAtOnce.Add(1)
				}
			}
		})
	}
	select {
	case <-time.After(3 * time.Second):
	case <-e.ctx.Done():
		return e.ctx.Err()
	}
	var fails []error
	for _, u := range floodUsers[1:] {
		c := e.dialToken(u + ":right")
		start := time.Now()
		lctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		_, err := c.Publish(lctx, &pb.PublishRequest{Topic: u + ".x", Payload: []byte("x")})
		cancel()
		took := time.Since(start)
		e.r.figure("%s's first login during the flood: %v in %v", u, status.Code(err), took.Round(time.Millisecond))
		if err != nil || took > time.Second {
			fails = append(fails, fmt.Errorf("%s's first login: %v after %v, want OK within 1s", u, err, took.Round(time.Millisecond)))
		}
	}
	stop()
	wg.Wait()
	e.r.figure("%d guesses answered, %d of them refused at once (UNAVAILABLE, no bcrypt)", guesses.Load(), refusedAtOnce.Load())
	return errors.Join(fails...)
}
