package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
)

// The tests of sub's --ack modes and group settings, pub's --count, --sleep and templates,
// and both commands' --json, each against a broker of its own on a free port.

// groupStats returns the stats of the group id, the zero GroupStats if the broker has none.
func groupStats(b broker.Engine, id string) broker.GroupStats {
	for _, g := range b.Stats().Groups {
		if g.ID == id {
			return g
		}
	}
	return broker.GroupStats{}
}

// jsonMessage is a line of sub --json, decoded by the test on its own terms.
type jsonMessage struct {
	SystemID       string            `json:"system_id"`
	Topic          string            `json:"topic"`
	SubscriptionID string            `json:"subscription_id"`
	Attempt        int               `json:"attempt"`
	Redelivered    bool              `json:"redelivered"`
	PublishedAt    string            `json:"published_at"`
	Headers        map[string]string `json:"headers"`
	Payload        *string           `json:"payload"`
	PayloadBase64  []byte            `json:"payload_base64"`
}

// jsonLinesOf decodes out, one JSON object a line, each into a T; every line must be one,
// with only known fields.
func jsonLinesOf[T any](t *testing.T, out string) []T {
	t.Helper()
	var all []T
	for l := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var v T
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil || dec.More() {
			t.Fatalf("--json line %q is not one %T: %v\nall output:\n%s", l, v, err, out)
		}
		all = append(all, v)
	}
	return all
}

// sub --ack nack nacks each message: with --max-deliveries 2 its second attempt's nack sends
// it to --dead-letter-topic, where a fanout subscriber gets it with the dead-letter headers.
func TestSubAckNackDeadLetters(t *testing.T) {
	addr, b := startBroker(t)
	dead, deadDone := startSub(t, context.Background(), "--addr", addr, "--json", "--count", "1", "dead.jobs")
	out, result := startSub(t, context.Background(), "--addr", addr, "--group", "nackers", "--ack", "nack",
		"--max-deliveries", "2", "--dead-letter-topic", "dead.jobs", "--count", "2", "jobs.*")
	id := pub(t, "--addr", addr, "-H", "k=v", "jobs.a", "poison")
	if err := brokertest.Receive(t, result, "sub --ack nack to return"); err != nil {
		t.Fatalf("sub --ack nack: %v", err)
	}
	want := "[jobs.a] " + id + " attempt=1 poison {k=v}\n[jobs.a] " + id + " attempt=2 poison {k=v}\n"
	if got := out.String(); got != want {
		t.Fatalf("sub --ack nack printed\n%s\nwant\n%s", got, want)
	}
	if err := brokertest.Receive(t, deadDone, "the dead letter on dead.jobs"); err != nil {
		t.Fatalf("sub dead.jobs: %v", err)
	}
	m := jsonLinesOf[jsonMessage](t, dead.String())[0]
	h := m.Headers
	if m.Topic != "dead.jobs" || m.Payload == nil || *m.Payload != "poison" || h["k"] != "v" ||
		h["tb-dead-letter-topic"] != "jobs.a" || h["tb-dead-letter-system-id"] != id || h["tb-dead-letter-attempts"] != "2" ||
		!strings.Contains(h["tb-dead-letter-reason"], "--ack nack") {
		t.Fatalf("dead letter %+v (headers %v), want poison from jobs.a after 2 attempts, nacked by sub --ack nack", m, h)
	}
	if g := groupStats(b, "nackers"); g.DeadLettered != 1 || g.Nacked != 2 || g.Acked != 0 {
		t.Fatalf("group %+v, want 2 nacks, 1 dead letter, no ack", g)
	}
}

// sub --ack nack --nack-delay D nacks with that delay: the message waits, delayed, rather
// than coming back after the broker's redelivery back-off (100ms at first).
func TestSubAckNackDelay(t *testing.T) {
	addr, b := startBroker(t)
	const delay = time.Second
	out, result := startSub(t, context.Background(), "--addr", addr, "--group", "later", "--ack", "nack", "--nack-delay", delay.String(), "--count", "2", "later.*")
	start := time.Now() // before the first delivery: what is measured from it is no shorter than the delay between the two
	id := pub(t, "--addr", addr, "later.a", "x")
	brokertest.Eventually(t, "the nacked message delayed", func() bool { return groupStats(b, "later").Delayed == 1 })
	if err := brokertest.Receive(t, result, "sub --ack nack to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("attempt 2 came %v after the publish, want --nack-delay %v at least", took, delay)
	}
	if got, want := out.String(), "[later.a] "+id+" attempt=1 x\n[later.a] "+id+" attempt=2 x\n"; got != want {
		t.Fatalf("sub printed %q, want %q", got, want)
	}
	if g := groupStats(b, "later"); g.Nacked < 1 || g.Acked != 0 {
		t.Fatalf("group %+v, want nacks and no ack", g)
	}
}

// sub --ack none acks nothing: the message goes to another member once this one has left,
// and to this one again after the ack deadline.
func TestSubAckNone(t *testing.T) {
	addr, b := startBroker(t)
	first, result := startSub(t, context.Background(), "--addr", addr, "--group", "leavers", "--ack", "none", "--count", "1", "work.*")
	id := pub(t, "--addr", addr, "work.a", "job")
	if err := brokertest.Receive(t, result, "the first sub to return"); err != nil {
		t.Fatalf("sub --ack none: %v", err)
	}
	if got, want := first.String(), "[work.a] "+id+" attempt=1 job\n"; got != want {
		t.Fatalf("first member printed %q, want %q", got, want)
	}
	brokertest.Eventually(t, "the unacked message given back", func() bool { g := groupStats(b, "leavers"); return g.Members == 0 && g.Queued == 1 })
	if g := groupStats(b, "leavers"); g.Acked != 0 || g.LeftBehind != 1 {
		t.Fatalf("group %+v after sub --ack none left, want its message left behind, not acked", g)
	}
	second, result := startSub(t, context.Background(), "--addr", addr, "--group", "leavers", "--json", "--count", "1", "work.*")
	if err := brokertest.Receive(t, result, "the second sub to return"); err != nil {
		t.Fatalf("second sub: %v", err)
	}
	if m := jsonLinesOf[jsonMessage](t, second.String())[0]; m.SystemID != id || m.Attempt != 2 || !m.Redelivered {
		t.Fatalf("second member got %+v, want %s's attempt 2, redelivered", m, id)
	}
	brokertest.Eventually(t, "the second member's ack", func() bool { return groupStats(b, "leavers").Acked == 1 })

	out, result := startSub(t, context.Background(), "--addr", addr, "--group", "slow", "--ack", "none", "--ack-deadline", "100ms", "--count", "2", "slow.*")
	id = pub(t, "--addr", addr, "slow.a", "job")
	if err := brokertest.Receive(t, result, "the ack deadline's redelivery"); err != nil {
		t.Fatalf("sub --ack none --ack-deadline: %v", err)
	}
	if got, want := out.String(), "[slow.a] "+id+" attempt=1 job\n[slow.a] "+id+" attempt=2 job\n"; got != want {
		t.Fatalf("sub --ack none --ack-deadline 100ms printed %q, want %q", got, want)
	}
	if g := groupStats(b, "slow"); g.TimedOut < 1 || g.Acked != 0 {
		t.Fatalf("group %+v, want a delivery timed out and none acked", g)
	}
}

// sub's group flags reach the broker: groups show reports them.
func TestSubGroupFlagsReachBroker(t *testing.T) {
	addr, _ := startBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, result := startSub(t, ctx, "--addr", addr, "--group", "tuned", "--id", "tuned-sub", "--max-in-flight", "3", "--max-deliveries", "5",
		"--ack-deadline", "7s", "--dead-letter-topic", "dl.tuned", "tuned.>")
	var g adminpb.Group
	fromJSON(t, ok(t, "groups", "show", "--json", "--addr", addr, "tuned-sub"), &g)
	s := g.GetSettings()
	if g.GetConsumerGroup() != "tuned" || s.GetMaxDeliveries() != 5 || s.GetDeadLetterTopic() != "dl.tuned" || len(g.GetMemberList()) != 1 {
		t.Fatalf("groups show: %v, want group tuned, max_deliveries 5, dead_letter_topic dl.tuned and one member", &g)
	}
	if m := g.GetMemberList()[0]; m.GetMaxInFlight() != 3 || m.GetAckDeadline().AsDuration() != 7*time.Second {
		t.Fatalf("member %v, want max_in_flight 3 and ack_deadline 7s", m)
	}
	cancel()
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
}

// The flags that make no sense together are usage errors (exit status 2) that say why, and
// no subscription is made.
func TestSubAckUsageErrors(t *testing.T) {
	addr, b := startBroker(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--group", "g", "--ack", "maybe"}, `--ack "maybe": want auto, none or nack`},
		{[]string{"--ack", "nack"}, "add --group"},
		{[]string{"--ack", "none"}, "add --group"},
		{[]string{"--max-deliveries", "3"}, "add --group"},
		{[]string{"--ack-deadline", "1s"}, "add --group"},
		{[]string{"--dead-letter-topic", "d.x"}, "add --group"},
		{[]string{"--group", "g", "--nack-delay", "1s"}, "--nack-delay goes with --ack nack"},
		{[]string{"--group", "g", "--max-deliveries", "-1"}, "want 0"},
		{[]string{"--count", "-1"}, "--count -1"},
	} {
		args := append(append([]string{"sub", "--addr", addr}, c.args...), "x.>")
		if _, errOut, code := cli(t, args...); code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want exit %d and %q", args, code, errOut, exitUsage, c.want)
		}
	}
	if s := b.Stats(); len(s.Subscriptions) != 0 || len(s.Groups) != 0 {
		t.Fatalf("after usage errors the broker has %+v", s)
	}
}

// pub --count N --sleep D publishes N messages at least D apart, DATA a template for each
// payload; --no-template (or DATA without "{{") sends DATA as it is.
func TestPubCountSleepTemplate(t *testing.T) {
	addr, _ := startBroker(t)
	const n, sleep = 4, 40 * time.Millisecond
	out, result := startSub(t, context.Background(), "--addr", addr, "--json", "--count", strconv.Itoa(n+2), "ticks.>")
	var stdout, stderr bytes.Buffer
	if err := runPub([]string{"--addr", addr, "--count", strconv.Itoa(n), "--sleep", sleep.String(), "ticks.x",
		"tick {{.Count}} {{.ID}} {{.Time}} {{.Unix}} {{.UnixNano}}"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub --count %d: %v (stderr %q)", n, err, stderr.String())
	}
	lines := strings.SplitAfter(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("pub --count %d printed %d lines:\n%s", n, len(lines), stdout.String())
	}
	for _, l := range lines {
		if m := publishedLine.FindStringSubmatch(strings.TrimSuffix(l, "\n") + "\n"); m == nil || m[2] != "ticks.x" || m[3] != "1" {
			t.Fatalf("pub --count %d printed %q, want \"published <id> to ticks.x (routed to 1)\"", n, l)
		}
	}
	stdout.Reset()
	if err := runPub([]string{"--addr", addr, "--no-template", "ticks.x", "{{.Count}}"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub --no-template: %v", err)
	}
	if err := runPub([]string{"--addr", addr, "ticks.x", `{"a":{"b":1}}`}, &stdout, &stderr); err != nil {
		t.Fatalf("pub without {{: %v", err)
	}
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
	msgs := jsonLinesOf[jsonMessage](t, out.String())
	tick := regexp.MustCompile(`^tick (\d+) (\S+) (\S+) (\d+) (\d+)$`)
	ids, payloads := map[string]bool{}, map[string]bool{}
	var prev time.Time
	for i, m := range msgs[:n] {
		f := tick.FindStringSubmatch(*m.Payload)
		if f == nil || f[1] != strconv.Itoa(i+1) {
			t.Fatalf("message %d: %q, want tick %d <id> <time> <unix> <unixnano>", i+1, *m.Payload, i+1)
		}
		at, err := time.Parse(time.RFC3339Nano, f[3])
		if err != nil {
			t.Fatalf("message %d's {{.Time}} %q: %v", i+1, f[3], err)
		}
		if u, _ := strconv.ParseInt(f[4], 10, 64); u != at.Unix() {
			t.Fatalf("message %d: {{.Unix}} %s, {{.Time}} %s", i+1, f[4], f[3])
		}
		if un, _ := strconv.ParseInt(f[5], 10, 64); un != at.UnixNano() {
			t.Fatalf("message %d: {{.UnixNano}} %s, {{.Time}} %s", i+1, f[5], f[3])
		}
		if i > 0 && at.Sub(prev) < sleep {
			t.Fatalf("message %d made %v after message %d, want --sleep %v between them", i+1, at.Sub(prev), i, sleep)
		}
		prev = at
		ids[f[2]], payloads[*m.Payload] = true, true
	}
	if len(ids) != n || len(payloads) != n {
		t.Fatalf("%d distinct {{.ID}}s and %d distinct payloads in %d messages", len(ids), len(payloads), n)
	}
	if rest := []string{*msgs[n].Payload, *msgs[n+1].Payload}; !slices.Equal(rest, []string{"{{.Count}}", `{"a":{"b":1}}`}) {
		t.Fatalf("DATA sent as it is arrived as %q", rest)
	}
}

// A template that does not parse or does not run, and a bad --count or --sleep, are usage
// errors (exit status 2) that say what is wrong; nothing is published.
func TestPubTemplateUsageErrors(t *testing.T) {
	addr, b := startBroker(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"ticks.x", "{{.Count"}, []string{"DATA is not a valid template", "unclosed action", "--no-template"}},
		{[]string{"ticks.x", "{{.Count | nosuch}}"}, []string{"DATA is not a valid template", `"nosuch" not defined`}},
		{[]string{"--count", "2", "ticks.x", "n={{.Nope}}"}, []string{"DATA's template fails", "Nope", "{{.Count}}, {{.ID}}", "--no-template"}},
		{[]string{"--count", "0", "ticks.x", "x"}, []string{"--count 0: want 1 or more"}},
		{[]string{"--sleep", "-1s", "ticks.x", "x"}, []string{"--sleep -1s"}},
	} {
		args := append([]string{"pub", "--addr", addr}, c.args...)
		_, errOut, code := cli(t, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d (%q), want %d", args, code, errOut, exitUsage)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%q: %q, want it to say %q", args, errOut, w)
			}
		}
	}
	if p := b.Stats().Published; p != 0 {
		t.Fatalf("%d messages published by failing pubs", p)
	}
}
