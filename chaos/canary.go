package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// The canary runs in a process of its own, so that the attacking goroutines of the harness
// (and its garbage collector) do not delay it: what it measures is the broker. It publishes
// on canaryTopic every canaryEvery on one connection, and a fanout subscriber on another
// connection measures the time from just before each Publish call to the message's arrival.
// It runs until its stdin closes, waits for what is still on its way, and prints its figures
// as JSON on stdout.

const (
	canaryTopic   = "canary.ping"
	canaryPattern = "canary.>"
	canaryEvery   = 10 * time.Millisecond
	canaryDrain   = 2 * time.Second
	canarySlow    = 50 * time.Millisecond
)

type canaryStats struct {
	Sent       int           `json:"sent"`      // publishes that succeeded
	Errors     int           `json:"errors"`    // publishes that failed
	FirstErr   string        `json:"first_err"` // the first failure, publish or subscription
	Received   int           `json:"received"`
	Lost       int           `json:"lost"` // sent - received (distinct)
	Dupes      int           `json:"dupes"`
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	Max        time.Duration `json:"max"`
	SubEnded   string        `json:"sub_ended"`   // the subscription's end, if it ended early
	LongestGap time.Duration `json:"longest_gap"` // longest time between two successful publishes
	Slow       []string      `json:"slow"`        // latencies of canarySlow or more, and when (since the canary started)
}

// runCanary is the canary process's main.
func runCanary(addr string) error {
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tok := os.Getenv(canaryTokenEnv); tok != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(client.TokenCredentials(tok)))
	}
	pubConn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return err
	}
	defer pubConn.Close()
	subConn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return err
	}
	defer subConn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := pb.NewBrokerClient(subConn).Subscribe(ctx)
	if err != nil {
		return err
	}
	id := fmt.Sprintf("canary-%d", os.Getpid())
	if err := stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{
		SubscriptionId: id, TopicPatterns: []string{canaryPattern}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}}}); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetSubscribed() == nil {
		return fmt.Errorf("canary subscription: %v", first)
	}

	var (
		mu       sync.Mutex
		st       canaryStats
		lat      []time.Duration
		seen     = map[uint64]bool{}
		received atomic.Int64
		subDone  = make(chan struct{})
		start    = time.Now()
	)
	go func() {
		defer close(subDone)
		for {
			r, err := stream.Recv()
			if err != nil {
				mu.Lock()
				if ctx.Err() == nil {
					st.SubEnded = err.Error()
				}
				mu.Unlock()
				return
			}
			now := time.Now()
			for _, m := range r.GetMessages().GetMessages() {
				p := m.GetPayload()
				if len(p) < 16 {
					continue
				}
				seq, sent := binary.BigEndian.Uint64(p), int64(binary.BigEndian.Uint64(p[8:]))
				mu.Lock()
				if seen[seq] {
					st.Dupes++
				} else {
					seen[seq] = true
					l := now.Sub(time.Unix(0, sent))
					lat = append(lat, l)
					if l >= canarySlow {
						st.Slow = append(st.Slow, fmt.Sprintf("%.0fms at %.1fs", float64(l)/1e6, time.Unix(0, sent).Sub(start).Seconds()))
					}
				}
				mu.Unlock()
				received.Add(1)
			}
		}
	}()
	client := pb.NewBrokerClient(pubConn)
	// Warm the publishing connection up (grpc.NewClient connects lazily), off the canary's topic.
	if _, err := client.Publish(ctx, &pb.PublishRequest{Topic: "canary-warmup.x", Payload: []byte("x")}); err != nil {
		return err
	}
	fmt.Println("ready")

	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	tick := time.NewTicker(canaryEvery)
	defer tick.Stop()
	var seq uint64
	lastOK := time.Now()
	for running := true; running; {
		select {
		case <-stop:
			running = false
			continue
		case <-tick.C:
		}
		seq++
		payload := make([]byte, 16)
		binary.BigEndian.PutUint64(payload, seq)
		now := time.Now()
		binary.BigEndian.PutUint64(payload[8:], uint64(now.UnixNano()))
		pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Publish(pctx, &pb.PublishRequest{Topic: canaryTopic, Payload: payload})
		pcancel()
		mu.Lock()
		if err != nil {
			st.Errors++
			st.Slow = append(st.Slow, fmt.Sprintf("error at %.1fs", now.Sub(start).Seconds()))
			if st.FirstErr == "" {
				st.FirstErr = "publish: " + err.Error()
			}
		} else {
			st.Sent++
			done := time.Now()
			st.LongestGap = max(st.LongestGap, done.Sub(lastOK))
			lastOK = done
		}
		mu.Unlock()
	}
	deadline := time.Now().Add(canaryDrain)
	for {
		mu.Lock()
		n := len(seen)
		want := st.Sent
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-subDone
	mu.Lock()
	defer mu.Unlock()
	st.Received = len(seen)
	st.Lost = max(0, st.Sent-st.Received)
	if st.SubEnded != "" && st.FirstErr == "" {
		st.FirstErr = "subscription ended: " + st.SubEnded
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		st.P50 = lat[len(lat)/2]
		st.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
		st.Max = lat[len(lat)-1]
	}
	return json.NewEncoder(os.Stdout).Encode(st)
}

// canary is the harness's handle on a canary process.
type canary struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// canaryTokenEnv passes the canary its USER:TOKEN (a scenario's canaryToken), if any.
const canaryTokenEnv = "CHAOS_CANARY_TOKEN"

// startCanary starts the canary process against addr and waits until it is subscribed.
func startCanary(addr, token string) (*canary, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-canary", addr)
	if token != "" {
		cmd.Env = append(os.Environ(), canaryTokenEnv+"="+token)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &canary{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	ready := make(chan error, 1)
	go func() {
		line, err := c.out.ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("canary said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("canary: %w", err)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("canary not subscribed within 15s")
	}
	return c, nil
}

// finish stops the canary and returns its figures.
func (c *canary) finish() (canaryStats, error) {
	c.stdin.Close()
	var st canaryStats
	done := make(chan error, 1)
	go func() { done <- json.NewDecoder(c.out).Decode(&st) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		err = fmt.Errorf("canary did not report within 20s")
		_ = c.cmd.Process.Kill()
	}
	_ = c.cmd.Wait()
	return st, err
}
