package main

// Issue 23, finding 3: a flood of wrong tokens must not starve a valid login.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// tokenFlood: an attacker process — the chaos binary itself, re-run with -guess under
// `nice -n 19`, so that it does not take the CPU the broker and the canary need (a remote
// attacker would not share the broker's cores) — runs 200 callers, each on its own
// connection, guessing tokens for bob and for unknown names as fast as the broker answers;
// after 3 s, late1, late2 and late3 each log in once (their first call, so not cached), one
// after the other: each must be answered OK within 1 s, at the first try.
func tokenFlood(e *env) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{self, "-guess", e.addr}
	niced := "under nice -n 19"
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "19"}, args...)
	} else {
		niced = "not niced (no nice command)"
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		return fmt.Errorf("the attacker did not start: %q %v", line, err)
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
	_ = stdin.Close() // the attacker stops and reports
	line, err := out.ReadString('\n')
	var st guessStats
	if err == nil {
		err = json.Unmarshal([]byte(line), &st)
	}
	if err != nil {
		return errors.Join(append(fails, fmt.Errorf("the attacker's figures: %q %v", line, err))...)
	}
	e.r.figure("attacker (%s): 200 callers, %d guesses answered in %.1fs (%.0f/s), %d of them refused at once (UNAVAILABLE, no bcrypt)",
		niced, st.Answers, st.Seconds, float64(st.Answers)/st.Seconds, st.AtOnce)
	return errors.Join(fails...)
}

// guessStats is what the attacker process reports when it stops.
type guessStats struct {
	Answers, AtOnce int64
	Seconds         float64
}

// runGuesser is the attacker process's main (-guess ADDR): 200 callers, each on its own
// connection, guess tokens for bob and for unknown names until stdin closes; it says "ready"
// once they run, and its figures (guessStats, JSON) when it stops.
func runGuesser(addr string) error {
	e := &env{addr: addr}
	defer func() {
		for _, c := range e.conns {
			_ = c.Close()
		}
	}()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var answers, atOnce atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		token := fmt.Sprintf("bob:wrong-%d", i)
		if i%2 == 1 {
			token = fmt.Sprintf("nobody%d:wrong", i)
		}
		c := e.dialToken(token)
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := c.Publish(ctx, &pb.PublishRequest{Topic: "bob.x", Payload: []byte("x")})
				answers.Add(1)
				if status.Code(err) == codes.Unavailable {
					atOnce.Add(1)
				}
			}
		})
	}
	start := time.Now()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	wg.Wait()
	b, err := json.Marshal(guessStats{Answers: answers.Load(), AtOnce: atOnce.Load(), Seconds: time.Since(start).Seconds()})
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
