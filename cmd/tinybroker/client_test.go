package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
)

// startBroker serves a new broker on a free port for the rest of the test and checks, at the
// very end, that the test left no goroutine behind.
func startBroker(t *testing.T) (string, broker.Engine) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // registered first, runs last
	b := servertest.Start(t, servertest.Options{})
	return b.Addr, b.Engine
}

// startSub runs runSub in the background until the broker has its subscription.
func startSub(t *testing.T, ctx context.Context, args ...string) (stdout *brokertest.Log, result <-chan error) {
	t.Helper()
	stdout = &brokertest.Log{}
	var stderr brokertest.Log
	res := make(chan error, 1)
	go func() { res <- runSub(ctx, args, stdout, &stderr) }()
	brokertest.Eventually(t, "the subscription", func() bool { return strings.HasPrefix(stderr.String(), "subscribed to ") })
	return stdout, res
}

var publishedLine = regexp.MustCompile(`^published (\S+) to (\S+) \(routed to (\d+)\)\n$`)

// pub runs runPub and returns the system_id it printed.
func pub(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := runPub(args, &stdout, &stderr); err != nil {
		t.Fatalf("pub %q: %v (stderr %q)", args, err, stderr.String())
	}
	m := publishedLine.FindStringSubmatch(stdout.String())
	if m == nil || m[2] != args[len(args)-2] || m[3] != "1" {
		t.Fatalf("pub printed %q, want \"published <id> to %s (routed to 1)\"", stdout.String(), args[len(args)-2])
	}
	return m[1]
}

func TestPubSub(t *testing.T) {
	addr, _ := startBroker(t)
	out, result := startSub(t, context.Background(), "--addr", addr, "--count", "3", "orders.>")

	id1 := pub(t, "--addr", addr, "-H", "k=v", "-H", "trace id=x y", "orders.created", "hello world")
	stdin = bytes.NewReader([]byte{0xff, 0xfe, 0x00})
	t.Cleanup(func() { stdin = os.Stdin })
	id2 := pub(t, "--addr", addr, "orders.paid", "-")
	id3 := pub(t, "--addr", addr, "orders.shipped", "line 1\nline 2")

	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
	want := "[orders.created] " + id1 + ` attempt=1 hello world {k=v, "trace id"="x y"}` + "\n" +
		"[orders.paid] " + id2 + " attempt=1 len=3 bytes\n" +
		"[orders.shipped] " + id3 + ` attempt=1 line 1\nline 2` + "\n"
	if got := out.String(); got != want {
		t.Fatalf("sub printed\n%s\nwant\n%s", got, want)
	}
}

func TestSubGroupAcksAndStopsAtCount(t *testing.T) {
	addr, b := startBroker(t)
	out, result := startSub(t, context.Background(), "--addr", addr, "--group", "workers", "--max-in-flight", "2", "--count", "1", "jobs.*")
	id := pub(t, "--addr", addr, "jobs.a", "one")
	pub(t, "--addr", addr, "jobs.b", "two")
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub: %v", err)
	}
	if got, want := out.String(), "[jobs.a] "+id+" attempt=1 one\n"; got != want {
		t.Fatalf("sub printed %q, want %q", got, want)
	}
	brokertest.Eventually(t, "the broker to see the member leave", func() bool { return b.Stats().Groups[0].Members == 0 })
	g := b.Stats().Groups[0]
	if g.ID != "workers" || g.Acked != 1 || g.Queued != 1 || g.InFlight != 0 {
		t.Fatalf("after sub --count 1: group %+v, want jobs.a acked and jobs.b queued for the next member", g)
	}
}

func TestSubStopsOnCancel(t *testing.T) {
	addr, b := startBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, result := startSub(t, ctx, "--addr", addr, "--id", "watch", "x.>")
	if s := b.Stats().Subscriptions; len(s) != 1 || s[0].ID != "watch" {
		t.Fatalf("subscriptions %+v, want one named watch", s)
	}
	cancel()
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatalf("sub after cancel: %v, want nil", err)
	}
}

func TestPubSubUsageErrors(t *testing.T) {
	addr, _ := startBroker(t)
	for _, tc := range []struct {
		name string
		run  func(stderr *bytes.Buffer) error
		want string
	}{
		{"pub without data", func(e *bytes.Buffer) error { return runPub([]string{"--addr", addr, "a.b"}, e, e) }, "needs TOPIC and DATA"},
		{"pub bad header", func(e *bytes.Buffer) error { return runPub([]string{"-H", "novalue", "a.b", "x"}, e, e) }, "key=value"},
		{"pub bad topic", func(e *bytes.Buffer) error { return runPub([]string{"--addr", addr, "a..b", "x"}, e, e) }, "InvalidArgument"},
		{"sub without pattern", func(e *bytes.Buffer) error { return runSub(context.Background(), []string{"--addr", addr}, e, e) }, "at least one PATTERN"},
		{"sub bad pattern", func(e *bytes.Buffer) error {
			return runSub(context.Background(), []string{"--addr", addr, "a.>.b"}, e, e)
		}, "InvalidArgument"},
		{"sub max-in-flight without group", func(e *bytes.Buffer) error {
			return runSub(context.Background(), []string{"--max-in-flight", "3", "a.>"}, e, e)
		}, "--group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := tc.run(&stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Help is not an error (exit status 0), and goes to standard output.
	var stdout, stderr bytes.Buffer
	if err := runPub([]string{"-h"}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "tinybroker pub [flags] TOPIC DATA") {
		t.Fatalf("pub -h: %v, usage %q", err, stdout.String())
	}
}

func TestPayloadText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":      "plain",
		"tab\there":  `tab\there`,
		"caf\u00e9":  "caf\u00e9",
		"\x00\x01":   "len=2 bytes",
		"\xff":       "len=1 bytes",
		"bell\a":     "len=5 bytes",
		"{\"a\": 1}": `{"a": 1}`,
	} {
		if got := payloadText([]byte(in)); got != want {
			t.Errorf("payloadText(%q) = %q, want %q", in, got, want)
		}
	}
}

// pub --json and sub --json print one JSON object per message; a payload that is not UTF-8
// comes in base64.
func TestPubSubJSON(t *testing.T) {
	addr, _ := startBroker(t)
	out, result := startSub(t, context.Background(), "--addr", addr, "--json", "--count", "2", "j.>")
	var stdout, stderr bytes.Buffer
	if err := runPub([]string{"--addr", addr, "--json", "-H", "k=v", "j.a", "hello"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	var p pubJSON
	if err := json.Unmarshal(stdout.Bytes(), &p); err != nil || p.SystemID == "" || p.Topic != "j.a" || p.Routed != 1 {
		t.Fatalf("pub --json printed %q: %+v %v", stdout.String(), p, err)
	}
	stdin = bytes.NewReader([]byte{0xff, 0x00})
	t.Cleanup(func() { stdin = os.Stdin })
	if err := runPub([]string{"--addr", addr, "j.b", "-"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var m1, m2 subJSON
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &m1) != nil || json.Unmarshal([]byte(lines[1]), &m2) != nil {
		t.Fatalf("sub --json printed %q", out.String())
	}
	if m1.SystemID != p.SystemID || m1.Topic != "j.a" || m1.Payload == nil || *m1.Payload != "hello" || m1.Headers["k"] != "v" || m1.Attempt != 1 || m1.PublishedAt == "" {
		t.Errorf("first message %+v", m1)
	}
	if m2.Payload != nil || !bytes.Equal(m2.PayloadBase64, []byte{0xff, 0x00}) {
		t.Errorf("binary message %+v: want payload_base64", m2)
	}
}

// What pub reads from stdin is data, never a template, "{{" and all.
func TestPubStdinIsNotATemplate(t *testing.T) {
	addr, _ := startBroker(t)
	out, result := startSub(t, context.Background(), "--addr", addr, "--count", "1", "raw.>")
	stdin = strings.NewReader("{{.Count}}")
	t.Cleanup(func() { stdin = os.Stdin })
	pub(t, "--addr", addr, "raw.x", "-")
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.TrimSpace(out.String()), " {{.Count}}") {
		t.Fatalf("sub printed %q, want the payload {{.Count}} as it was read", out.String())
	}
}
