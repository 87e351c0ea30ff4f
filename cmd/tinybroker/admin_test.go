package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// cli runs a command line in-process as main does, and returns its output and exit status.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	code = exitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

// ok runs a command line that must succeed and returns its standard output.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, args...)
	if code != 0 {
		t.Fatalf("tinybroker %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func fromJSON(t *testing.T, s string, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal([]byte(s), m); err != nil {
		t.Fatalf("--json output is not a %T: %v\n%s", m, err, s)
	}
}

// member is a raw Subscribe stream with one balanced subscription.
type member struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel context.CancelFunc
}

func openMember(t *testing.T, addr string, o *pb.OpenSubscription) *member {
	t.Helper()
	conn := dial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	st, err := pb.NewBrokerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: o}}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.GetSubscribed() == nil {
		t.Fatalf("open: %v %v", r, err)
	}
	return &member{t: t, stream: st, cancel: cancel}
}

func (m *member) next() *pb.Message {
	m.t.Helper()
	for {
		r, err := m.stream.Recv()
		if err != nil {
			m.t.Fatalf("member: %v", err)
		}
		if ms := r.GetMessages().GetMessages(); len(ms) > 0 {
			if len(ms) > 1 {
				m.t.Fatalf("member got %d messages in a frame; the test wants them one by one", len(ms))
			}
			return ms[0]
		}
	}
}

func (m *member) nack(ids ...string) {
	m.t.Helper()
	if err := m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: ids, Reason: "cannot parse"}}}); err != nil {
		m.t.Fatal(err)
	}
}

// Every admin command against a real server, as a table and as JSON: groups, dead letters
// (replayed ones arrive again with tb-replay-count), streams, stats, top, and deleting a
// group whose member is told with NOT_FOUND.
func TestAdminCommands(t *testing.T) {
	addr, b := startBroker(t)
	m := openMember(t, addr, &pb.OpenSubscription{SubscriptionId: "work", ConsumerGroup: "work", TopicPatterns: []string{"jobs.>"},
		Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED, MaxInFlight: 1, MaxDeliveries: 1})
	var ids []string
	for _, p := range []string{"one", "two", "three"} {
		out := ok(t, "pub", "jobs.a", p, "--addr", addr, "-H", "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") // flags after arguments
		ids = append(ids, publishedLine.FindStringSubmatch(out)[1])
	}
	for i := range 2 {
		if got := m.next(); got.GetSystemId() != ids[i] {
			t.Fatalf("member got %v, want %s", got, ids[i])
		}
		m.nack(ids[i])
	}
	held := m.next() // "three", left in flight
	brokertest.Eventually(t, "two dead letters", func() bool { return b.Stats().Groups[0].DeadLettered == 2 })

	// groups ls
	out := ok(t, "groups", "ls", "--addr", addr)
	if !regexp.MustCompile(`(?m)^SUBSCRIPTION\s+GROUP\s+PATTERNS\s+MEMBERS\s+QUEUED\s+IN FLIGHT\s+DELAYED\s+OLDEST\s+DEAD LETTERS\s+BYTES$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^work\s+work\s+jobs\.>\s+1\s+0\s+1\s+0\s+\S+\s+2\s+`).MatchString(out) {
		t.Fatalf("groups ls:\n%s", out)
	}
	var ls adminpb.ListGroupsResponse
	fromJSON(t, ok(t, "groups", "ls", "--json", "--addr", addr), &ls)
	if ls.GetTotal() != 1 || ls.GetGroups()[0].GetDeadLetters() != 2 || ls.GetGroups()[0].GetInFlight() != 1 {
		t.Fatalf("groups ls --json: %v", &ls)
	}

	// groups show
	out = ok(t, "groups", "show", "work", "--addr", addr)
	for _, want := range []string{"subscription:  work", "max deliveries:  1", "redelivery: after 100ms, doubling up to 10s", "dead letters:    2 kept", "dlq.work", "MEMBER  ", "work-1  127.0.0.1:"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Fatalf("groups show lacks %q:\n%s", want, out)
		}
	}
	var g adminpb.Group
	fromJSON(t, ok(t, "groups", "show", "--json", "--addr", addr, "work"), &g)
	if len(g.GetMemberList()) != 1 || !strings.HasPrefix(g.GetMemberList()[0].GetPeer(), "127.0.0.1:") || g.GetSettings().GetMaxDeliveries() != 1 {
		t.Fatalf("groups show --json: %v", &g)
	}

	// dlq ls
	out = ok(t, "dlq", "ls", "work", "--addr", addr)
	if !regexp.MustCompile(`(?m)^`+ids[0]+`\s+jobs\.a\s+1\s+\S+\s+max_deliveries\s+cannot parse\s+one$`).MatchString(out) || !strings.Contains(out, ids[1]) {
		t.Fatalf("dlq ls:\n%s", out)
	}
	var dls adminpb.ListDeadLettersResponse
	fromJSON(t, ok(t, "dlq", "ls", "work", "--json", "--addr", addr), &dls)
	if dls.GetTotal() != 2 || dls.GetDeadLetters()[1].GetHeaders()["tb-dead-letter-reason"] != "cannot parse" || dls.GetDeadLetters()[1].GetCode() != "max_deliveries" {
		t.Fatalf("dlq ls --json: %v", &dls)
	}

	// dlq replay: one by id, once the member has room; it arrives again with its replay count.
	if _, errOut, code := cli(t, "dlq", "replay", "work", "--addr", addr); code != exitUsage || !strings.Contains(errOut, "--all") {
		t.Fatalf("dlq replay without ids: exit %d\n%s", code, errOut)
	}
	if err := m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: []string{held.GetSystemId()}}}}); err != nil {
		t.Fatal(err)
	}
	out = ok(t, "dlq", "replay", "work", ids[0], "--addr", addr)
	if !regexp.MustCompile(`^` + ids[0] + ` replayed as \S+ \(routed to 1\)\nreplayed 1 dead letters of group work, 0 failed\n$`).MatchString(strings.Replace(out, ":", "", 1)) {
		t.Fatalf("dlq replay:\n%s", out)
	}
	again := m.next()
	if string(again.GetPayload()) != "one" || again.GetHeaders()["tb-replay-count"] != "1" || again.GetHeaders()["tb-dead-letter-reason"] != "" ||
		again.GetHeaders()["tb-dead-letter-code"] != "" || again.GetHeaders()["traceparent"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("replayed message %v", again)
	}
	if _, _, code := cli(t, "dlq", "replay", "work", ids[0], "--addr", addr); code != exitFailure {
		t.Fatalf("replaying a dead letter twice: exit %d, want 1", code)
	}
	m.nack(again.GetSystemId()) // dead again: two kept
	brokertest.Eventually(t, "two dead letters again", func() bool { return b.Stats().Groups[0].DeadLettered == 3 })

	// dlq purge --all, with progress; then replay --all has nothing left.
	var errBuf bytes.Buffer
	var outBuf bytes.Buffer
	if err := run(context.Background(), []string{"dlq", "purge", "work", "--all", "--addr", addr}, &outBuf, &errBuf); err != nil {
		t.Fatal(err)
	}
	if outBuf.String() != "purged 2 dead letters of group work\n" || errBuf.String() != "purged 2 of 2 dead letters\n" {
		t.Fatalf("dlq purge --all: %q, progress %q", outBuf.String(), errBuf.String())
	}
	var rp adminpb.ReplayDeadLettersResponse
	fromJSON(t, ok(t, "dlq", "replay", "work", "--all", "--json", "--addr", addr), &rp)
	if rp.GetReplayed() != 0 || len(rp.GetResults()) != 0 {
		t.Fatalf("replay --all of an empty store: %v", &rp)
	}

	// streams ls
	out = ok(t, "streams", "ls", "--addr", addr)
	if !regexp.MustCompile(`(?m)^stream-\d+\s+127\.0\.0\.1:\d+\s+\d+\s+work\s+balanced\s+work\s+work-1\s+jobs\.>$`).MatchString(out) {
		t.Fatalf("streams ls:\n%s", out)
	}
	var sl adminpb.ListStreamsResponse
	fromJSON(t, ok(t, "streams", "ls", "--json", "--addr", addr), &sl)
	if sl.GetTotal() != 1 || sl.GetStreams()[0].GetSubscriptions()[0].GetMemberId() != "work-1" {
		t.Fatalf("streams ls --json: %v", &sl)
	}

	// stats
	out = ok(t, "stats", "--addr", addr)
	// 3 published, 1 replayed, 3 dead letters published to dlq.work (unrouted: nobody listens)
	if !regexp.MustCompile(`(?m)^published:\s+7$`).MatchString(out) || !regexp.MustCompile(`(?m)^unrouted:\s+3$`).MatchString(out) || !regexp.MustCompile(`(?m)^dead-lettered:\s+3$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^groups:\s+1$`).MatchString(out) {
		t.Fatalf("stats:\n%s", out)
	}
	var st pb.StatsResponse
	fromJSON(t, ok(t, "stats", "--json", "--addr", addr), &st)
	if st.GetPublished() != 7 || st.GetGroupsTotal() != 1 || len(st.GetGroups()) != 0 {
		t.Fatalf("stats --json: %v", &st)
	}

	// top, two views
	out = ok(t, "top", "--iterations", "2", "--interval", "20ms", "--addr", addr)
	if strings.Count(out, "tinybroker top: "+addr) != 2 || strings.Count(out, "msgs/s: published") != 2 ||
		!regexp.MustCompile(`(?m)^work\s+1\s+0\s+0\s+0\s+`).MatchString(out) {
		t.Fatalf("top:\n%s", out)
	}

	// groups purge, then rm: the member is told.
	pub(t, "--addr", addr, "jobs.b", "queued") // in flight to the member (max_in_flight 1)
	pub(t, "--addr", addr, "jobs.b", "queued too")
	brokertest.Eventually(t, "one queued", func() bool { return b.Stats().Groups[0].Queued == 1 })
	if out := ok(t, "groups", "purge", "work", "--addr", addr); out != "purged 1 messages from group work\n" {
		t.Fatalf("groups purge: %q", out)
	}
	if out := ok(t, "groups", "rm", "work", "--addr", addr); out != "deleted group work: 1 members ended, 1 messages and 0 dead letters dropped\n" {
		t.Fatalf("groups rm: %q", out)
	}
	for {
		_, err := m.stream.Recv()
		if err != nil {
			if s := status.Convert(err); s.Code() != codes.NotFound || !strings.Contains(s.Message(), "deleted by an administrator") {
				t.Fatalf("the member's stream ended with %v", err)
			}
			break
		}
	}
	if out := ok(t, "groups", "ls", "--addr", addr); out != "no consumer groups\n" {
		t.Fatalf("groups ls after rm: %q", out)
	}
	if _, errOut, code := cli(t, "groups", "show", "work", "--addr", addr); code != exitFailure || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("groups show of a deleted group: exit %d\n%s", code, errOut)
	}
}

// Help exits 0; usage errors 2 (with a hint); failures 1. Flags work after arguments and
// Go-style with one dash; version and completion work.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a fragment
		stderr string
	}{
		{[]string{"--help"}, 0, "Operating a broker:", ""},
		{[]string{"serve", "-h"}, 0, "--check", ""},
		{[]string{"groups", "rm", "--help"}, 0, "tinybroker groups rm SUBSCRIPTION_ID", ""},
		{[]string{"help", "dlq"}, 0, "tb-replay-count", ""},
		{[]string{}, 2, "", "no command given"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"groups"}, 2, "", `use "groups ls" or`},
		{[]string{"groups", "show"}, 2, "", "needs one SUBSCRIPTION_ID"},
		{[]string{"pub", "--bogus", "a", "b"}, 2, "", "Run 'tinybroker pub --help' for usage."},
		{[]string{"pub", "a"}, 2, "", "needs TOPIC and DATA"},
		{[]string{"sub", "--count", "-1", "a"}, 2, "", "--count -1"},
		{[]string{"serve", "--log-level", "loud"}, 1, "", "--log-level"},
		{[]string{"groups", "ls", "--addr", "127.0.0.1:1", "--timeout", "2s"}, 1, "", "is a broker running at 127.0.0.1:1?"},
		{[]string{"--version"}, 0, "tinybroker ", ""},
		{[]string{"version"}, 0, "tinybroker ", ""},
		{[]string{"version", "--json"}, 0, `"go": "go1.`, ""},
		{[]string{"completion", "bash"}, 0, "__start_tinybroker", ""},
		{[]string{"completion", "zsh"}, 0, "#compdef tinybroker", ""},
		{[]string{"completion", "fish"}, 0, "complete -c tinybroker", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant %q / %q", code, tc.code, out, errOut, tc.stdout, tc.stderr)
			}
		})
	}

	addr, _ := startBroker(t)
	// Go-style single-dash long flags, as bench/run.sh writes them, and flags after arguments.
	if out := ok(t, "pub", "-addr", addr, "x.y", "z"); !strings.Contains(out, "to x.y") {
		t.Fatalf("pub -addr: %q", out)
	}
	if out := ok(t, "pub", "x.y", "z", "-addr="+addr); !strings.Contains(out, "to x.y") {
		t.Fatalf("pub ... -addr=: %q", out)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(ok(t, "version", "--json")), &v); err != nil || v["version"] == "" {
		t.Fatalf("version --json: %v %v", v, err)
	}
}

// serve --check validates a configuration file and exits, like nats-server -t.
func TestServeCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	writeConfig(t, good, "group \"resizers\" {\n  topics = [\"jobs.>\"]\n  dead_letters_max = 50\n}\n")
	out, errOut, code := cli(t, "serve", "--check", "--config", good)
	if code != 0 || out != "configuration "+good+" is valid: listen 127.0.0.1:0, 1 declared groups, 0 plugins\n" {
		t.Fatalf("serve --check of a good file: exit %d\n%s%s", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("groups {\n  dead_letters_max = -3\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, "serve", "--config", bad, "--check")
	if code != 1 || !strings.Contains(errOut, bad+":2,") {
		t.Fatalf("serve --check of a bad file: exit %d\n%s", code, errOut)
	}
}

// pub says which plugin dropped a message, and why, instead of "no subscription matched".
func TestPubSaysWhichPluginDropped(t *testing.T) {
	addr, stop := serveWithConfig(t, "plugin \"filter\" {\n  path = \""+fixturePath(t, "good")+"\"\n}\n")
	defer stop()
	out, errOut, code := cli(t, "pub", "orders.1", "x", "--addr", addr.String(), "-H", "tenant=other")
	if code != 0 || !strings.Contains(out, "(routed to 0)") || errOut != "note: plugin \"filter\" dropped the message: not on the allow-list\n" {
		t.Fatalf("pub dropped by a plugin: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, _ = cli(t, "pub", "nobody.listens", "x", "--addr", addr.String(), "-H", "tenant=acme")
	if !strings.Contains(errOut, "no subscription matched") {
		t.Fatalf("pub to no subscription: %s", errOut)
	}
}

// A traceparent set by a publisher reaches subscribers unchanged through the plugins; at
// debug level the broker logs each message's route with it. JSON logs write durations and
// modes as text.
func TestTraceContextAndJSONLogs(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tb.hcl")
	writeConfig(t, cfg, "plugin \"filter\" {\n  path = \""+fixturePath(t, "good")+"\"\n}\n")
	addr, logs, done, cancel := startServe(t, "--config", cfg, "--log-json", "--log-level", "debug")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	out, result := startSub(t, context.Background(), "--addr", addr.String(), "--count", "1", "orders.>")
	ok(t, "pub", "--addr", addr.String(), "-H", "tenant=acme", "-H", "traceparent="+tp, "orders.1", "x")
	if err := brokertest.Receive(t, result, "sub to return"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "traceparent="+tp) || !strings.Contains(out.String(), "filtered=yes") {
		t.Fatalf("the subscriber got %q; want the traceparent unchanged (and the plugin's header)", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	for _, want := range []string{`"@message":"message routed"`, `"traceparent":"` + tp + `"`, `"mode":"fanout"`, `"grace":"10s"`} {
		if !strings.Contains(l, want) {
			t.Errorf("logs lack %s:\n%s", want, l)
		}
	}
}

// --addr, and TINYBROKER_ADDR where it is not given, take a cluster's nodes as a comma list:
// the first that answers is used (issue 25: a CLI that fails over).
func TestAddrList(t *testing.T) {
	addr, _ := startBroker(t)
	list := servertest.ClosedAddr(t) + "," + addr
	if out := ok(t, "groups", "ls", "--addr", list); !strings.Contains(out, "GROUP") && !strings.Contains(out, "no consumer groups") {
		t.Fatalf("groups ls --addr %s: %q", list, out)
	}
	t.Setenv("TINYBROKER_ADDR", list)
	var stdout, stderr bytes.Buffer
	if err := runPub([]string{"a.b", "x"}, &stdout, &stderr); err != nil {
		t.Fatalf("pub with TINYBROKER_ADDR=%s: %v\n%s", list, err, stderr.String())
	}
	if _, errOut, code := cli(t, "groups", "ls", "--addr", "127.0.0.1:1,nohost"); code == 0 || !strings.Contains(errOut, "host:port") {
		t.Fatalf("a bad node in --addr: exit %d, %q; want a usage error naming host:port", code, errOut)
	}
}

// Papercuts of issue 26: `groups --addr X` alone says which subcommand to use (it said
// "unknown flag: --addr"), and an unknown command is a usage error even with --help (it
// printed the root's help and exited 0).
func TestParentAndUnknownCommandUsage(t *testing.T) {
	if _, errOut, code := cli(t, "groups", "--addr", "127.0.0.1:1"); code != 2 || !strings.Contains(errOut, `use "groups ls"`) {
		t.Fatalf("groups --addr X: exit %d, %q; want 2 and the subcommands", code, errOut)
	}
	if _, errOut, code := cli(t, "nosuch", "--help"); code != 2 || !strings.Contains(errOut, `unknown command "nosuch"`) {
		t.Fatalf("nosuch --help: exit %d, %q; want 2, unknown command", code, errOut)
	}
	if _, _, code := cli(t, "groups", "ls", "--help"); code != 0 {
		t.Fatalf("groups ls --help: exit %d, want 0", code)
	}
}
