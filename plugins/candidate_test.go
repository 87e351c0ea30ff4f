package plugins

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
)

// publishEach runs c's on_publish over n messages, one at a time or in frames of 64, with
// ordering keys key(i) ("" for none), and fails the test if any is refused or dropped or
// emits (from any goroutine). It returns the messages as the chain left them.
func publishEach(t *testing.T, c *Chain, n int, batched bool, key func(int) string) []broker.Draft {
	t.Helper()
	ds := make([]broker.Draft, n)
	for i := range ds {
		ds[i] = broker.Draft{Topic: "orders." + strconv.Itoa(i%7), Payload: []byte("v1"), Key: key(i)}
	}
	vs, errs := make([]broker.PublishVerdict, n), make([]error, n)
	if batched {
		for i := 0; i < n; i += 64 {
			j := min(i+64, n)
			c.OnPublishBatch(ds[i:j], vs[i:j], errs[i:j])
		}
	} else {
		for i := range ds {
			vs[i], errs[i] = c.OnPublish(&ds[i])
		}
	}
	for i := range ds {
		if errs[i] != nil || vs[i].Drop || len(vs[i].Emit) > 0 {
			t.Errorf("message %d: verdict %+v, error %v; want it passed, with nothing emitted", i, vs[i], errs[i])
			break
		}
	}
	return ds
}

func noKey(int) string { return "" }

func candidateStats(t *testing.T, c *Chain) *CandidateStats {
	t.Helper()
	st := c.Stats()[0]
	if st.Candidate == nil {
		t.Fatal("no candidate in the plugin's stats")
	}
	return st.Candidate
}

// The module's hash names it: computed when not given, checked when given (a pin).
func TestSpecHash(t *testing.T) {
	h := newHost(t)
	wasm := fixture(t, "pass")
	c := load(t, h, Spec{Name: "p", Wasm: wasm, Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "v2payload")}})
	st := c.Stats()[0]
	if st.Hash != moduleHash(wasm) || !strings.HasPrefix(st.Hash, "sha256:") || len(st.Hash) != len("sha256:")+64 {
		t.Errorf("hash %q, want sha256 of the module, %q", st.Hash, moduleHash(wasm))
	}
	if st.Candidate.Hash != moduleHash(fixture(t, "v2payload")) || st.Candidate.Mode != Shadow {
		t.Errorf("candidate's stats %+v", st.Candidate)
	}
	_, err := h.Load(context.Background(), []Spec{{Name: "p", Wasm: wasm, Hash: moduleHash(fixture(t, "tag"))}})
	if err == nil || !strings.Contains(err.Error(), "pinned") {
		t.Errorf("a module loaded with another module's hash: %v", err)
	}
	_, err = h.Load(context.Background(), []Spec{{Name: "p", Wasm: wasm, Candidate: &Candidate{Mode: Canary, Wasm: fixture(t, "kvcount")}}})
	if err == nil || !strings.Contains(err.Error(), "does not export on_publish") {
		t.Errorf("a canary without on_publish: %v", err)
	}
	_, err = h.Load(context.Background(), []Spec{{Name: "p", Wasm: wasm, Candidate: &Candidate{Wasm: wasm}}})
	if err == nil || !strings.Contains(err.Error(), "no mode") {
		t.Errorf("a candidate without a mode: %v", err)
	}
}

// A shadow identical to the current version differs on no call, whether its calls write to
// the store (kvset, which reads nothing back) or change headers (tag), one message at a time
// or in frames.
func TestShadowIdentical(t *testing.T) {
	for _, name := range []string{"kvset", "tag"} {
		for _, batched := range []bool{false, true} {
			c := load(t, newHost(t), Spec{Name: "p", Wasm: fixture(t, name), Config: map[string]string{"tag": "x"},
				Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, name)}})
			publishEach(t, c, 300, batched, noKey)
			if st := candidateStats(t, c); st.Calls != 300 || st.Failures != 0 || st.Differences != 0 {
				t.Errorf("%s (batched %v): shadow %+v, want 300 calls, no failure, no difference", name, batched, st)
			}
		}
	}
}

// A shadow that changes the payload differs on every message, and changes none.
func TestShadowPayloadChange(t *testing.T) {
	for _, batched := range []bool{false, true} {
		c := load(t, newHost(t), Spec{Name: "p", Wasm: fixture(t, "pass"), Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "v2payload")}})
		for i, d := range publishEach(t, c, 200, batched, noKey) {
			if string(d.Payload) != "v1" {
				t.Fatalf("message %d delivered with payload %q: the shadow's change was applied", i, d.Payload)
			}
		}
		if st := candidateStats(t, c); st.Calls != 200 || st.Differences != 200 {
			t.Errorf("batched %v: shadow %+v, want 200 calls, 200 differences", batched, st)
		}
	}
}

// A shadow's key-value writes never reach the store; they count as differences.
func TestShadowKVWritesNotApplied(t *testing.T) {
	h := newHost(t)
	c := load(t, h, Spec{Name: "p", Wasm: fixture(t, "pass"), Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "kvset")}})
	publishEach(t, c, 50, false, noKey)
	h.kv.mu.Lock()
	store := h.kv.open["p"].store
	h.kv.mu.Unlock()
	if n := store.(*memStore).Bytes(); n != 0 {
		t.Errorf("the store holds %d bytes after a shadow's writes", n)
	}
	if _, ok, _ := store.Get(context.Background(), []byte("orders.1")); ok {
		t.Error("the shadow's write of orders.1 is in the store")
	}
	if st := candidateStats(t, c); st.Calls != 50 || st.Differences != 50 {
		t.Errorf("shadow %+v, want 50 calls and 50 differences", st)
	}
}

// A shadow of the ack-counting hook reads the store as the current version's call found it,
// so that the same count is the same write, and adds nothing to the count.
func TestShadowReadsWhatCurrentRead(t *testing.T) {
	h := newHost(t)
	c := load(t, h, Spec{Name: "counter", Wasm: fixture(t, "kvcount"), PoolSize: 2, Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "kvcount")}})
	acks(c, 2, 400)
	if got := kvNumber(t, h, "counter", "count"); got != 400 {
		t.Errorf("count %d after 400 acks, want 400: the shadow's increments were applied, or the current's lost", got)
	}
	if st := candidateStats(t, c); st.Calls != 400 || st.Failures != 0 || st.Differences != 0 {
		t.Errorf("shadow %+v, want 400 calls, no failure, no difference", st)
	}
}

// A shadow that emits emits nothing.
func TestShadowNeverEmits(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "p", Wasm: fixture(t, "pass"), Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "emitone")}})
	publishEach(t, c, 40, false, noKey) // fails on any emit
	publishEach(t, c, 40, true, noKey)
	if st := candidateStats(t, c); st.Differences != 80 {
		t.Errorf("shadow %+v, want 80 differences", st)
	}
}

// A shadow that traps is counted and changes nothing: its failures never apply the
// plugin's failure policy.
func TestShadowFailuresNotApplied(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "p", Wasm: fixture(t, "pass"), FailurePolicy: FailClosed, Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "trap")}})
	publishEach(t, c, 20, false, noKey) // fails if a message is refused
	st := c.Stats()[0]
	if st.Failures != 0 || st.Candidate.Failures == 0 || st.Candidate.Failures != st.Candidate.Calls {
		t.Errorf("stats %+v, candidate %+v: want the candidate's calls all failed, the current's none", st, st.Candidate)
	}
}

// A canary at 10 % takes about 10 % of the keys, always the same ones, and every message of
// its Keys.
func TestCanaryShare(t *testing.T) {
	c := load(t, newHost(t), Spec{Name: "p", Wasm: fixture(t, "pass"),
		Candidate: &Candidate{Mode: Canary, Wasm: fixture(t, "v2payload"), Percent: 10, Keys: []string{"vip"}}})
	const n = 2000
	taken := func(ds []broker.Draft) (n int, keys map[string]bool) {
		keys = map[string]bool{}
		for _, d := range ds {
			if string(d.Payload) == "v2" {
				n++
				keys[d.Key] = true
			}
		}
		return n, keys
	}
	got, keys := taken(publishEach(t, c, n, false, func(i int) string { return "k" + strconv.Itoa(i) }))
	if got < n*7/100 || got > n*13/100 {
		t.Errorf("the canary took %d of %d messages, want 10 %% ± 3 %%", got, n)
	}
	again, keys2 := taken(publishEach(t, c, n, true, func(i int) string { return "k" + strconv.Itoa(i) }))
	if again != got || len(keys2) != len(keys) {
		t.Errorf("the same keys again: the canary took %d, then %d", got, again)
	}
	for k := range keys {
		if !keys2[k] {
			t.Errorf("key %s went to the canary once, not twice", k)
		}
	}
	if vip, _ := taken(publishEach(t, c, 100, false, func(int) string { return "vip" })); vip != 100 {
		t.Errorf("the canary took %d of 100 messages of its key vip", vip)
	}
	// Without a key, at random: about 10 % too.
	rnd, _ := taken(publishEach(t, c, n, false, noKey))
	if rnd < n*7/100 || rnd > n*13/100 {
		t.Errorf("the canary took %d of %d messages without a key, want 10 %% ± 3 %%", rnd, n)
	}
	if st := candidateStats(t, c); st.Failures != 0 || st.RolledBack || st.Calls != uint64(got+again+100+rnd) {
		t.Errorf("canary %+v, want %d calls, none failed", st, got+again+100+rnd)
	}
}

// A canary whose every call traps is rolled back after MinCalls, once, however many
// publishers find it failing at once; under fail_open every message is delivered, unchanged.
func TestCanaryRollsBack(t *testing.T) {
	var rollbacks atomic.Int32
	var reason atomic.Value
	var logs bytes.Buffer // hclog serializes its writes
	h, err := NewHost(HostOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	c := load(t, h, Spec{Name: "p", Wasm: fixture(t, "pass"), FailurePolicy: FailOpen,
		Candidate: &Candidate{Mode: Canary, Wasm: fixture(t, "trap"), Percent: 50, OnRollback: func(why string) {
			rollbacks.Add(1)
			reason.Store(why)
		}}})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i, d := range publishEach(t, c, 500, false, noKey) {
				if d.Topic != "orders."+strconv.Itoa(i%7) || string(d.Payload) != "v1" {
					t.Errorf("message %d delivered as %s %q: the trapping canary's change stuck", i, d.Topic, d.Payload)
				}
			}
		})
	}
	wg.Wait()
	st := candidateStats(t, c)
	if rollbacks.Load() != 1 || !st.RolledBack || st.Reason == "" || st.Reason != reason.Load() {
		t.Fatalf("%d rollbacks, stats %+v, want one, with its reason", rollbacks.Load(), st)
	}
	// Rolled back once its calls reached 100 (DefaultMinCalls); calls in progress then, a few
	// at most, count too. None after.
	if st.Calls < DefaultMinCalls || st.Calls > DefaultMinCalls+8 || st.Failures != st.Calls {
		t.Errorf("canary %+v: want all of about %d calls failed", st, DefaultMinCalls)
	}
	publishEach(t, c, 200, false, noKey)
	if after := candidateStats(t, c); after.Calls != st.Calls {
		t.Errorf("the canary made %d calls after its rollback", after.Calls-st.Calls)
	}
	// Every line about either version names it by its hash; the rollback's, both.
	cur, cand := "hash="+moduleHash(fixture(t, "pass")), "hash="+moduleHash(fixture(t, "trap"))
	var rolled int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" || line[0] < '0' || line[0] > '9' {
			continue // a multi-line value's continuation; an entry starts with its time
		}
		if !strings.Contains(line, cur) && !strings.Contains(line, cand) {
			t.Errorf("a log line without a hash: %s", line)
		}
		if strings.Contains(line, "rolled back") {
			rolled++
			if !strings.Contains(line, "[WARN]") || !strings.Contains(line, cur) || !strings.Contains(line, "candidate_"+cand) {
				t.Errorf("the rollback's log line does not have both hashes: %s", line)
			}
		}
	}
	if rolled != 1 {
		t.Errorf("%d log lines of a rollback, want 1", rolled)
	}
}

// A shadow sees acks and redeliveries too: an identical one differs on none, and one that
// traps changes no verdict, even under fail_closed.
func TestShadowAckAndRedeliver(t *testing.T) {
	msg := &broker.Message{Topic: "jobs.1", Payload: []byte("job")}
	events := func(c *Chain) []broker.RedeliverVerdict {
		c.OnAck(&broker.AckEvent{Msg: msg, SystemID: "id1", SubscriptionID: "jobs", Group: "workers", Attempt: 1})
		var vs []broker.RedeliverVerdict
		for attempt := uint32(1); attempt <= 2; attempt++ {
			vs = append(vs, c.OnRedeliver(&broker.RedeliverEvent{Msg: msg, SystemID: "id1", SubscriptionID: "jobs", Group: "workers", Attempt: attempt}))
		}
		return vs
	}
	h := newHost(t)
	want := events(load(t, h, Spec{Name: "alone", Wasm: fixture(t, "good"), Topics: []string{"nothing"}}))
	if want[0].Action != broker.RedeliverDelay || want[1].Action != broker.RedeliverDeadLetter {
		t.Fatalf("good.wat's redelivery verdicts %+v", want)
	}
	c := load(t, h, Spec{Name: "same", Wasm: fixture(t, "good"), Topics: []string{"nothing"}, Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "good")}})
	events(c)
	if st := candidateStats(t, c); st.Calls != 3 || st.Differences != 0 || st.Failures != 0 {
		t.Errorf("identical shadow %+v, want 3 calls (an ack, two redeliveries), no difference", st)
	}
	c = load(t, h, Spec{Name: "trapping", Wasm: fixture(t, "good"), Topics: []string{"nothing"}, FailurePolicy: FailClosed,
		Candidate: &Candidate{Mode: Shadow, Wasm: fixture(t, "trap")}})
	got := events(c)
	for i := range want {
		if got[i].Action != want[i].Action || got[i].Delay != want[i].Delay || got[i].Reason != want[i].Reason {
			t.Errorf("redelivery %d with a trapping shadow: %+v, want %+v", i+1, got[i], want[i])
		}
	}
	if st := candidateStats(t, c); st.Calls != 2 || st.Failures != 2 || st.Differences != 2 {
		t.Errorf("trapping shadow %+v, want 2 calls (trap.wat has no on_ack), failed and different", st)
	}
}
