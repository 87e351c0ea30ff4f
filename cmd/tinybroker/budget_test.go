package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// The default memory budget fits the machine (issue 23, finding 4): a real `tinybroker
// serve`, every setting at its default and only GOMEMLIMIT=512MiB set (what serve would set
// on a machine of 683 MiB), is flooded as the attacker did (chaos scenario
// memberless-default-budget): 1 MiB messages from four publishers into eight memberless
// consumer groups, until each publisher is refused RESOURCE_EXHAUSTED three times in a row.
//
// It checks that
//   - serve took GOMEMLIMIT from the environment and set the default budget to a quarter of
//     it, 128 MiB (its log line and the Stats RPC's memory_budget_bytes);
//   - the refusals name the broker's memory budget for consumer groups, and the groups are
//     memberless and hold at least half of the budget when refused (the flood filled it);
//   - the broker took in at most a quarter of GOMEMLIMIT, counted from outside;
//   - its peak RSS (VmHWM, the kernel's high-water mark of VmRSS, so no sample can miss the
//     peak) stays under half of GOMEMLIMIT + 64 MiB = 320 MiB: a full budget's heap is twice
//     what it holds (RATIONALE.md "Why a memory budget in bytes?"), 64 MiB for the rest;
//   - a canary (a fanout subscriber on another topic, and a publisher waiting for each of its
//     messages for at most canaryWait) gets every message during the flood, and canaryAfter
//     more once the budget is full.
//
// With the budget at half of GOMEMLIMIT, as it was, the broker takes in twice as much
// (measured: 191 MiB) and the test fails; with the whole of GOMEMLIMIT (budgetDivisor = 1),
// the RSS bound fails too. At half, the RSS bound alone holds at this size, where GOMEMLIMIT
// makes the collector work harder; at a machine's size the heap's doubling is what reaches
// RSS (issue 23: 1.18 GB held was 2.33 GB of RSS).
func TestDefaultBudgetFitsTheMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and fills 128 MiB")
	}
	if b, err := os.ReadFile("/proc/self/status"); err != nil || !strings.Contains(string(b), "VmHWM:") {
		t.Skip("no /proc/PID/status with VmHWM to read the server's peak RSS from")
	}
	const (
		goMemLimit = 512 << 20
		wantBudget = goMemLimit / 4
		// What a full budget may cost: a quarter of GOMEMLIMIT held is half of it in heap,
		// plus 64 MiB for the rest; derived from GOMEMLIMIT, not from the budget the server
		// reports, so that a larger default fails.
		rssBound = goMemLimit/2 + 64<<20
		// How long a canary message may take to arrive before the test fails: a bound on a
		// failure, not a wait (the messages take milliseconds, measured up to 20 ms here).
		canaryWait = 10 * time.Second
		// Canary messages that must arrive once the flood has filled the budget.
		canaryAfter = 20
	)
	bin := filepath.Join(t.TempDir(), "tinybroker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0") // no config file
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GOMEMLIMIT=512MiB", "XDG_CACHE_HOME="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var addr string
	var limit, budget int64 = -1, -1
	memLine := regexp.MustCompile(`gomemlimit=(\d+) budget_bytes=(\d+)`)
	listening := regexp.MustCompile(`listening.* addr=(\S+)`)
	lines := bufio.NewScanner(stderr)
	for addr == "" && lines.Scan() {
		if m := memLine.FindStringSubmatch(lines.Text()); m != nil {
			limit, _ = strconv.ParseInt(m[1], 10, 64)
			budget, _ = strconv.ParseInt(m[2], 10, 64)
		}
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("the server did not say where it listens: %v", lines.Err())
	}
	go func() { // the rest of the log, so that the server never blocks on it
		for lines.Scan() {
		}
	}()
	if budget <= 0 {
		t.Fatal("the server did not log its memory budget")
	}
	if limit != goMemLimit || budget != wantBudget { // go on: the flood shows what it costs
		t.Errorf("the server logged gomemlimit %d and budget_bytes %d; want %d (GOMEMLIMIT=512MiB) and %d, a quarter of it",
			limit, budget, goMemLimit, wantBudget)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := pb.NewBrokerClient(dial(t, addr))
	stats := func() *pb.StatsResponse {
		t.Helper()
		st, err := c.Stats(ctx, &pb.StatsRequest{})
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return st
	}
	if got := stats().GetMemoryBudgetBytes(); got != wantBudget {
		t.Errorf("Stats: memory_budget_bytes %d, want %d (a quarter of GOMEMLIMIT)", got, wantBudget)
	}

	// Eight consumer groups without members: each opened by a balanced subscription, and
	// left when the stream closes.
	groups := make([]string, 8)
	s, err := c.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range groups {
		groups[i] = fmt.Sprintf("bulk%d", i)
		if err := s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{
			SubscriptionId: groups[i], ConsumerGroup: groups[i], TopicPatterns: []string{groups[i] + ".>"},
			Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || r.GetSubscribed() == nil {
			t.Fatalf("opening group %s: %v %v", groups[i], r, err)
		}
	}
	_ = s.CloseSend()
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}

	// The canary: a fanout subscriber, and a publisher waiting for each of its messages.
	canary, err := c.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := canary.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{
		SubscriptionId: "canary", TopicPatterns: []string{"canary.>"}, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := canary.Recv(); err != nil || r.GetSubscribed() == nil {
		t.Fatalf("canary: %v %v", r, err)
	}
	type received struct {
		r   *pb.SubscribeResponse
		err error
	}
	arrivals := make(chan received)
	go func() { // ends with the stream, when ctx is cancelled
		for {
			r, err := canary.Recv()
			select {
			case arrivals <- received{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var canarySent int // written by one goroutine at a time, read after it
	canaryOne := func() error {
		n := canarySent
		if _, err := c.Publish(ctx, &pb.PublishRequest{Topic: "canary.x", Payload: []byte(strconv.Itoa(n))}); err != nil {
			return fmt.Errorf("canary publish %d: %w", n, err)
		}
		select {
		case a := <-arrivals:
			if ms := a.r.GetMessages().GetMessages(); a.err != nil || len(ms) != 1 || string(ms[0].GetPayload()) != strconv.Itoa(n) {
				return fmt.Errorf("canary message %d: %v, %v", n, a.r, a.err)
			}
		case <-time.After(canaryWait):
			return fmt.Errorf("canary message %d not delivered within %v", n, canaryWait)
		}
		canarySent++
		return nil
	}
	done := make(chan struct{})
	var canaryErr error
	var cwg sync.WaitGroup
	cwg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if canaryErr = canaryOne(); canaryErr != nil {
				return
			}
		}
	})

	// The flood: 1 MiB messages to the groups from four publishers, until each has been
	// refused RESOURCE_EXHAUSTED three times in a row.
	payload := make([]byte, 1<<20)
	var held atomic.Int64
	var floodErr error
	var refusal atomic.Value // the first RESOURCE_EXHAUSTED's message
	var once sync.Once
	var fwg sync.WaitGroup
	for p := range 4 {
		fwg.Go(func() {
			refused := 0
			for i := p; refused < 3; i++ {
				_, err := c.Publish(ctx, &pb.PublishRequest{Topic: groups[i%len(groups)] + ".x", Payload: payload})
				switch status.Code(err) {
				case codes.OK:
					refused = 0
					held.Add(int64(len(payload)))
				case codes.ResourceExhausted:
					refused++
					refusal.CompareAndSwap(nil, status.Convert(err).Message())
				default:
					once.Do(func() { floodErr = err })
					return
				}
			}
		})
	}
	fwg.Wait()
	close(done)
	cwg.Wait()
	if floodErr != nil {
		t.Fatalf("flood: %v, want OK or RESOURCE_EXHAUSTED", floodErr)
	}
	if canaryErr != nil {
		t.Fatalf("during the flood, after %d canary messages: %v", canarySent, canaryErr)
	}
	duringFlood := canarySent
	// The budget is full now: the canary must still get through.
	for range canaryAfter {
		if err := canaryOne(); err != nil {
			t.Fatalf("with the budget full, after %d canary messages: %v", canarySent, err)
		}
	}
	st := stats()
	procStatus, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatalf("the server's status: %v", err)
	}
	kB := func(field string) int64 {
		m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(procStatus)
		if m == nil {
			t.Fatalf("no %s in /proc/%d/status", field, cmd.Process.Pid)
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return n << 10
	}
	peak, rss := kB("VmHWM"), kB("VmRSS")
	var groupsHeld uint64
	for _, g := range st.GetGroups() {
		if strings.HasPrefix(g.GetConsumerGroup(), "bulk") {
			groupsHeld += g.GetBytes()
			if g.GetMembers() != 0 {
				t.Errorf("group %s has %d members; the flood's groups are memberless", g.GetConsumerGroup(), g.GetMembers())
			}
		}
	}
	t.Logf("GOMEMLIMIT %d MiB, budget %d MiB: %d MiB taken in (broker: %d MiB used, groups %d MiB), peak RSS %d MiB (bound %d MiB), RSS at the end %d MiB; %d canary messages delivered during the flood, %d after",
		limit>>20, budget>>20, held.Load()>>20, st.GetMemoryUsedBytes()>>20, groupsHeld>>20, peak>>20, rssBound>>20, rss>>20, duringFlood, canaryAfter)
	if m, _ := refusal.Load().(string); !strings.Contains(m, "memory budget for consumer groups") {
		t.Errorf("the flood was refused with %q; want the broker's memory budget for consumer groups", m)
	}
	if h := held.Load(); h < budget/2 {
		t.Errorf("only %d MiB taken in before refusals, budget %d MiB: the flood did not fill it", h>>20, budget>>20)
	}
	if used := st.GetMemoryUsedBytes(); used < uint64(budget/2) || used > uint64(budget) {
		t.Errorf("the broker says it holds %d MiB of its %d MiB budget once refusing; want between half and all of it", used>>20, budget>>20)
	}
	// What the broker took in, counted from outside: at most a quarter of GOMEMLIMIT, whose
	// heap (twice that) leaves the other half to everything else.
	if h := held.Load(); h > goMemLimit/4 {
		t.Errorf("the broker took in %d MiB of messages with GOMEMLIMIT %d MiB: over a quarter of it", h>>20, goMemLimit>>20)
	}
	if peak > rssBound {
		t.Errorf("peak RSS %d MiB, over GOMEMLIMIT / 2 + 64 MiB = %d MiB (budget %d MiB)", peak>>20, rssBound>>20, budget>>20)
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
