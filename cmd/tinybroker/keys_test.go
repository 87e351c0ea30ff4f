package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
)

// The CLI's side of ordering keys and fair dispatch (issue 27): pub --key and --keys, sub
// --ordering and --fair-by, the key in sub's output, and groups show's ordering, fairness
// and busiest keys.

// pub --key gives a message its key and --keys spreads --count messages over keys; sub
// prints each message's key (key=K, "key" in --json), and its --ordering and --fair-by make
// the group's settings, which groups show reports.
func TestPubKeySubOrdering(t *testing.T) {
	addr, _ := startBroker(t)
	out, result := startSub(t, context.Background(), "--addr", addr, "--group", "ordered", "--ordering", "key", "--fair-by", "key",
		"--count", "3", "keyed.>")
	var stdout, stderr strings.Builder
	if err := runPub([]string{"--addr", addr, "--key", "acct 7", "keyed.a", "first"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub --key: %v (%s)", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), `to keyed.a key "acct 7" (routed to 1)`) {
		t.Fatalf("pub --key printed %q, want the key", stdout.String())
	}
	var jsonOut strings.Builder
	if err := runPub([]string{"--addr", addr, "--count", "2", "--keys", "2", "--json", "keyed.b", "n{{.Count}}"}, &jsonOut, &stderr); err != nil {
		t.Fatalf("pub --keys: %v (%s)", err, stderr.String())
	}
	type pubLine struct {
		SystemID   string `json:"system_id"`
		Topic      string `json:"topic"`
		Key        string `json:"key"`
		Routed     int    `json:"routed"`
		DroppedBy  string `json:"dropped_by"`
		DropReason string `json:"drop_reason"`
		Duplicate  bool   `json:"duplicate"`
	}
	pubs := jsonLinesOf[pubLine](t, jsonOut.String())
	if len(pubs) != 2 || pubs[0].Key != "key-0" || pubs[1].Key != "key-1" {
		t.Fatalf("pub --count 2 --keys 2 --json: %+v, want keys key-0 and key-1", pubs)
	}
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{` key="acct 7" attempt=1 first`, " key=key-0 attempt=1 n1", " key=key-1 attempt=1 n2"}
	if len(lines) != len(want) {
		t.Fatalf("sub printed %q, want %d lines", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Fatalf("sub's line %d is %q, want it to end with %q", i+1, lines[i], w)
		}
	}

	// The group keeps its settings without members and queues what comes: a flood of one
	// key beside two quiet ones. groups show says how it dispatches and names the flood.
	if err := runPub([]string{"--addr", addr, "--count", "120", "--key", "flood", "keyed.c", "x"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub the flood: %v (%s)", err, stderr.String())
	}
	if err := runPub([]string{"--addr", addr, "--count", "2", "--keys", "2", "--key", "quiet", "keyed.c", "x"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub the quiet keys: %v (%s)", err, stderr.String())
	}
	show := ok(t, "groups", "show", "--addr", addr, "ordered")
	for _, w := range []string{"dispatch:", "ordering key (one message of a key at a time, keys in parallel); fair by key",
		"keys:", "3 held; busiest: flood 120 (noisy), quiet-0 1, quiet-1 1"} {
		if !strings.Contains(show, w) {
			t.Fatalf("groups show lacks %q:\n%s", w, show)
		}
	}
	var g adminpb.Group
	fromJSON(t, ok(t, "groups", "show", "--json", "--addr", addr, "ordered"), &g)
	if s := g.GetSettings(); s.GetOrdering() != "key" || s.GetFairBy() != "key" || g.GetKeys() != 3 ||
		len(g.GetBusiestKeys()) != 3 || !g.GetBusiestKeys()[0].GetNoisy() || g.GetBusiestKeys()[1].GetNoisy() {
		t.Fatalf("groups show --json: %v, want ordering key, fair_by key, 3 keys, flood noisy and the others not", &g)
	}
}

// A group without ordering or fairness shows neither line: nothing changes for plain groups.
func TestGroupsShowPlainGroupHasNoDispatch(t *testing.T) {
	addr, _ := startBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, result := startSub(t, ctx, "--addr", addr, "--group", "plain", "plain.>")
	show := ok(t, "groups", "show", "--addr", addr, "plain")
	cancel()
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
	if strings.Contains(show, "dispatch:") || strings.Contains(show, "keys:") {
		t.Fatalf("groups show of a plain group:\n%s", show)
	}
}

// A member that asks for another ordering than its group's is refused by the broker, and
// sub says why; --ordering group makes a single active consumer, which sub reports.
func TestSubOrderingMismatch(t *testing.T) {
	addr, _ := startBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr brokertest.Log
	res := make(chan error, 1)
	go func() {
		res <- runSub(ctx, []string{"--addr", addr, "--group", "single", "--ordering", "group", "one.>"}, &brokertest.Log{}, &stderr)
	}()
	brokertest.Eventually(t, "the subscription", func() bool { return strings.HasPrefix(stderr.String(), "subscribed to ") })
	if !strings.Contains(stderr.String(), "ordered: one message at a time") {
		t.Fatalf("sub --ordering group said %q", stderr.String())
	}
	_, errOut, code := cli(t, "sub", "--addr", addr, "--group", "single", "--ordering", "key", "one.>")
	if code == 0 || !strings.Contains(errOut, `has ordering "group", this member asked for "key"`) {
		t.Fatalf("a member with another ordering: exit %d, %q; want the broker's refusal", code, errOut)
	}
	cancel()
	if err := brokertest.Receive(t, res, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
}

// Bad keys, orderings and fairness are usage errors (exit status 2) that say what is wrong
// and how to fix it; nothing is published or subscribed.
func TestKeyUsageErrors(t *testing.T) {
	addr, b := startBroker(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", "--key", "a\tb", "k.x", "y"}, `--key: key "a\tb" contains the control character U+0009`},
		{[]string{"pub", "--key", strings.Repeat("k", 257), "k.x", "y"}, "--key: key is 257 bytes long; the limit is 256"},
		{[]string{"pub", "--keys", "3", "k.x", "y"}, "--keys 3 spreads --count messages over keys: add --count N"},
		{[]string{"pub", "--count", "2", "--keys", "-1", "k.x", "y"}, "--keys -1: want 1 or more"},
		{[]string{"pub", "--count", "2", "--keys", "2", "--key", strings.Repeat("k", 255), "k.x", "y"}, "--key with --keys 2: key is 257 bytes long"},
		{[]string{"sub", "--ordering", "key", "k.>"}, "--ordering, --fair-by, --max-priority and --priority are for balanced subscriptions: add --group NAME"},
		{[]string{"sub", "--priority", "3", "k.>"}, "add --group NAME"},
		{[]string{"sub", "--group", "g", "--max-priority", "10", "k.>"}, "--max-priority 10, --priority 0: priorities are 0 to 9"},
		{[]string{"sub", "--fair-by", "key", "k.>"}, "add --group NAME"},
		{[]string{"sub", "--group", "g", "--ordering", "keys", "k.>"}, `--ordering "keys": want key`},
		{[]string{"sub", "--group", "g", "--fair-by", "tenant", "k.>"}, `--fair-by: fair_by "tenant": want "key"`},
		{[]string{"sub", "--group", "g", "--fair-by", "header:", "k.>"}, `fair_by "header:"`},
	} {
		args := append([]string{c.args[0], "--addr", addr}, c.args[1:]...)
		if _, errOut, code := cli(t, args...); code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want exit %d and %q", args, code, errOut, exitUsage, c.want)
		}
	}
	if s := b.Stats(); s.Published != 0 || len(s.Groups) != 0 || len(s.Subscriptions) != 0 {
		t.Fatalf("after usage errors the broker has %+v", s)
	}
}

// A group declared with ordering and fair_by has them from start-up: DescribeGroup (groups
// show) reports them beside its overflow, a member that leaves them out takes them (sub says
// so), and one that asks for another ordering is refused.
func TestServeDeclaredKeyedGroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, stop := serveWithConfig(t, "group \"billing\" {\n  topics = [\"pay.>\"]\n  ordering = \"key\"\n  fair_by = \"header:tenant\"\n  overflow = \"drop_oldest\"\n}\n")
	defer stop()
	var g adminpb.Group
	fromJSON(t, ok(t, "groups", "show", "--json", "--addr", addr.String(), "billing"), &g)
	if s := g.GetSettings(); !g.GetDeclared() || s.GetOrdering() != "key" || s.GetFairBy() != "header:tenant" || s.GetOverflow() != "drop_oldest" {
		t.Fatalf("declared group: %v, want declared, ordering key, fair_by header:tenant, overflow drop_oldest", &g)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stderr brokertest.Log
	res := make(chan error, 1)
	go func() {
		res <- runSub(ctx, []string{"--addr", addr.String(), "--group", "billing", "pay.>"}, &brokertest.Log{}, &stderr)
	}()
	brokertest.Eventually(t, "the subscription", func() bool { return strings.HasPrefix(stderr.String(), "subscribed to ") })
	if !strings.Contains(stderr.String(), "ordered by key, fair by header:tenant") {
		t.Fatalf("a member of the declared group: %q, want the group's ordering and fairness", stderr.String())
	}
	_, errOut, code := cli(t, "sub", "--addr", addr.String(), "--group", "billing", "--ordering", "group", "pay.>")
	if code == 0 || !strings.Contains(errOut, `has ordering "key", this member asked for "group"`) {
		t.Fatalf("a member asking for another ordering: exit %d, %q", code, errOut)
	}
	stop()
	if err := brokertest.Receive(t, res, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
}

// pub --ttl sends the ttl: a negative one is the broker's INVALID_ARGUMENT, named.
func TestPubTTL(t *testing.T) {
	addr, _ := startBroker(t)
	var stdout, stderr strings.Builder
	err := runPub([]string{"--addr", addr, "--ttl", "-1s", "ttl.1", "x"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error()+stderr.String(), "ttl must be a valid duration") {
		t.Fatalf("pub --ttl -1s: %v (%s)", err, stderr.String())
	}
	if err := runPub([]string{"--addr", addr, "--ttl", "1m", "ttl.1", "x"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub --ttl 1m: %v (%s)", err, stderr.String())
	}
}

// pub --delay and --at send the delay: the answer says the message is delayed; --at that is
// not RFC 3339, or both flags, is a usage error; a delay past max_delay is the broker's
// INVALID_ARGUMENT, naming the limit.
func TestPubDelay(t *testing.T) {
	addr, _ := startBroker(t)
	var stdout, stderr strings.Builder
	if err := runPub([]string{"--addr", addr, "--delay", "1h", "dl.1", "x"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub --delay 1h: %v (%s)", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "(delayed: routed when due)") || strings.Contains(stderr.String(), "no subscription matched") {
		t.Fatalf("pub --delay 1h printed %q, %q; want it delayed", stdout.String(), stderr.String())
	}
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := runPub([]string{"--addr", addr, "--at", at, "dl.1", "x"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub --at %s: %v (%s)", at, err, stderr.String())
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--at", "tomorrow"}, "want a time in RFC 3339"},
		{[]string{"--at", at, "--delay", "1s"}, "[at delay] were all set"},
		{[]string{"--delay", "48h"}, "limits { max_delay }"},
	} {
		stderr.Reset()
		err := runPub(append(append([]string{"--addr", addr}, c.args...), "dl.1", "x"), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), c.says) {
			t.Errorf("pub %v: %v (%s); want an error saying %q", c.args, err, stderr.String(), c.says)
		}
	}
}
