package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// serveWithConfig runs `tinybroker serve --config` on a file of body (writeConfig) and returns
// its address and a stop that shuts it down and checks that it ended cleanly (defer it, after
// a goleak check).
func serveWithConfig(t *testing.T, body string) (addr net.Addr, stop func()) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "tb.hcl")
	writeConfig(t, cfg, body)
	a, _, done, cancel := startServe(t, "--config", cfg)
	return a, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// startServe runs serve with args in the background until cancel (or the end of the test),
// and returns the address it listens on, its logs and its result.
func startServe(t *testing.T, args ...string) (net.Addr, *brokertest.Log, <-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	listening := make(chan net.Addr, 1)
	logs := new(brokertest.Log)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, args, logs, listening) }()
	select {
	case addr := <-listening:
		return addr, logs, done, cancel
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	return nil, nil, nil, nil
}

// dial connects a client to the broker at addr; the caller closes it (before a goroutine leak
// check).
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// serveAndDial runs serve with args and connects a client to it; stop ends both and fails the
// test if serve did not stop cleanly. (Call stop before a goroutine leak check.)
func serveAndDial(t *testing.T, args ...string) (c pb.BrokerClient, stop func()) {
	t.Helper()
	addr, _, done, cancel := startServe(t, args...)
	conn := dial(t, addr.String())
	return pb.NewBrokerClient(conn), func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
}

// serve runs with no configuration, answers, and on cancellation (the signal path) shuts
// down and returns with every goroutine ended.
func TestServeInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, logs, done, cancel := startServe(t, "--listen", "127.0.0.1:0", "--log-json")
	conn := dial(t, addr.String())
	resp, err := pb.NewBrokerClient(conn).Publish(context.Background(), &pb.PublishRequest{Topic: "hello"})
	conn.Close()
	if err != nil || resp.GetSystemId() == "" {
		t.Fatalf("publish: %v %v", resp, err)
	}
	cancel()
	if err := brokertest.Receive(t, done, "serve to return after cancel"); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if !strings.Contains(logs.String(), `"@message":"stopped"`) {
		t.Fatalf("logs are not JSON or lack the stop line:\n%s", logs.String())
	}
}

// An engine "jetstream" whose data directory cannot be written is refused at start, naming
// the file and the directory.
func TestServeUnwritableDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tb.hcl")
	if err := os.WriteFile(cfg, []byte("engine \"jetstream\" {\n  data_dir = \"file/data\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs brokertest.Log
	err := serve(context.Background(), []string{"--config", cfg, "--listen", "127.0.0.1:0"}, &logs, nil)
	if err == nil || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), filepath.Join(dir, "file", "data")) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("serve with an unwritable data_dir: %v", err)
	}
}

// A bad config file is refused with its file, line and column.
func TestServeBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(path, []byte("listen = \"127.0.0.1:0\"\n\ngroups {\n  overflow = \"sometimes\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs brokertest.Log
	err := serve(context.Background(), []string{"--config", path}, &logs, nil)
	if err == nil || !regexp.MustCompile(regexp.QuoteMeta(path)+`:4,\d+`).MatchString(err.Error()) || !strings.Contains(err.Error(), "drop_oldest") {
		t.Fatalf("serve with a bad config: %v; want file:4,col and the allowed values", err)
	}
	if err := serve(context.Background(), []string{"--config", filepath.Join(t.TempDir(), "missing.hcl")}, &logs, nil); err == nil || !strings.Contains(err.Error(), "missing.hcl") {
		t.Fatalf("missing config: %v", err)
	}
	if err := serve(context.Background(), []string{"--log-level", "loud"}, &logs, nil); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("bad flag value: %v", err)
	}
}

// The real binary stops on SIGTERM with exit status 0 after logging its shutdown.
func TestServeBinarySIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "tinybroker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var log []string
	for lines.Scan() {
		log = append(log, lines.Text())
		if strings.Contains(lines.Text(), "listening") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		log = append(log, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, strings.Join(log, "\n"))
	}
	if all := strings.Join(log, "\n"); !strings.Contains(all, "shutting down") || !strings.Contains(all, "stopped") {
		t.Fatalf("log:\n%s", all)
	}
}

// A group declared in the config file exists from start-up: a publish before any member
// connects is queued for it (routed 1), and the first member gets it. The memory budget
// given in the file is logged. So with the JetStream engine, embedded.
func TestServeDeclaredGroup(t *testing.T) {
	for _, tt := range []struct{ engine, cfg, log string }{
		{"memory", "memory {\n  max_bytes = \"256MiB\"\n}\n", `"budget_bytes":268435456`},
		{"jetstream", "engine \"jetstream\" {\n  data_dir = \"data\"\n}\n", `"kind":"jetstream"`},
	} {
		t.Run(tt.engine, func(t *testing.T) { serveDeclaredGroup(t, tt.cfg, tt.log) })
	}
}

func serveDeclaredGroup(t *testing.T, engineCfg, wantLog string) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tb.hcl")
	if err := os.WriteFile(cfg, []byte(engineCfg+"group \"resizers\" {\n  topics = [\"jobs.>\"]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, logs, done, cancel := startServe(t, "--listen", "127.0.0.1:0", "--config", cfg, "--log-json")
	defer cancel()
	conn := dial(t, addr.String())
	defer conn.Close()
	c := pb.NewBrokerClient(conn)
	resp, err := c.Publish(context.Background(), &pb.PublishRequest{Topic: "jobs.1", Payload: []byte("before")})
	if err != nil || resp.GetRouted() != 1 {
		t.Fatalf("publish before any member: %v %v; want routed 1", resp, err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	st, err := c.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{SubscriptionId: "resizers", ConsumerGroup: "resizers",
		TopicPatterns: []string{"jobs.>"}, Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED}}}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ms := r.GetMessages().GetMessages(); len(ms) > 0 {
			if string(ms[0].GetPayload()) != "before" {
				t.Fatalf("got %q", ms[0].GetPayload())
			}
			break
		}
	}
	scancel()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), wantLog) {
		t.Fatalf("logs lack %s:\n%s", wantLog, logs.String())
	}
}
