package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// clusterNode is one `tinybroker serve` of a three-node JetStream cluster, run in this
// process with a config file like examples/cluster's.
type clusterNode struct {
	name, cfg  string
	starts     int // how many times it was started
	cancel     context.CancelFunc
	exited     chan struct{} // closed when serve returned, with err
	err        error
	logs       *brokertest.Log
	grpc, http string // the addresses it listens on, once it does
}

// writeClusterConfigs writes node1.hcl..node3.hcl under dir: replicas 3, the given route
// addresses, and a declared balanced group "work" on w.>.
func writeClusterConfigs(t *testing.T, dir string, routes []string) []*clusterNode {
	t.Helper()
	quoted := make([]string, len(routes))
	for i, r := range routes {
		quoted[i] = strconv.Quote(r)
	}
	nodes := make([]*clusterNode, len(routes))
	for i, r := range routes {
		name := "node" + strconv.Itoa(i+1)
		cfg := filepath.Join(dir, name+".hcl")
		body := fmt.Sprintf(`engine "jetstream" {
  data_dir    = "data/%s"
  server_name = "%s"
  replicas    = 3
  cluster {
    name   = "tinybroker"
    listen = %q
    routes = [%s]
  }
}
group "work" {
  topics = ["w.>"]
}
`, name, name, r, strings.Join(quoted, ", "))
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		nodes[i] = &clusterNode{name: name, cfg: cfg}
	}
	return nodes
}

// start runs the node's serve in the background. It does not wait for the node to listen
// (a node whose cluster cannot be reached listens only once its engine's first attempt to
// start failed). The node is stopped when the test ends, if it was not before.
func (n *clusterNode) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	logs, exited := new(brokertest.Log), make(chan struct{})
	n.starts++
	n.cancel, n.exited, n.err, n.logs, n.grpc, n.http = cancel, exited, nil, logs, "", ""
	nth := n.starts
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Errorf("%s (start %d) did not stop within 60s", n.name, nth)
		}
		if t.Failed() {
			t.Logf("%s's log, start %d:\n%s", n.name, nth, logs.String())
		}
	})
	go func() {
		defer close(exited)
		n.err = serve(ctx, []string{"--config", n.cfg, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-json"}, logs, nil)
	}()
}

// stop ends the node's serve, as SIGTERM does, and waits for it.
func (n *clusterNode) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case <-n.exited:
		if n.err != nil {
			t.Fatalf("%s: serve: %v", n.name, n.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop within 60s", n.name)
	}
}

// gone fails the test if the node's serve returned: the process would have exited.
func (n *clusterNode) gone(t *testing.T, while string) {
	t.Helper()
	select {
	case <-n.exited:
		t.Fatalf("%s exited %s: %v", n.name, while, n.err)
	default:
	}
}

// waitListening waits up to within for the node to listen, taking its addresses from its
// log. It fails the test if serve returns first: the node exited.
func (n *clusterNode) waitListening(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for n.http == "" {
		n.gone(t, "instead of serving")
		for line := range strings.Lines(n.logs.String()) {
			var l struct {
				Message string `json:"@message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch l.Message {
			case "listening":
				n.grpc = l.Addr
			case "http listening":
				n.http = l.Addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen within %v", n.name, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A node of a three-node cluster restarted while the others are down cannot reach a meta
// leader; it waits instead of exiting: it listens, answers gRPC health NOT_SERVING and
// /readyz 503, refuses a publish with UNAVAILABLE, and serves once another node is back, its
// declared group included (issue 25, finding 2: it exited with `engine "jetstream": engine
// unavailable: ...` and needed restarting again). Three real nodes, in this process.
//
// Only B and C are stopped in the finding; with A up, the restarted C may form a quorum
// with A (it did under -race) or time out (it did without), so A is stopped too: then C
// cannot start, every time. Its first attempt ends after JetStream's 30 s wait for its
// account (jetstream.New): the test takes about 45 s.
func TestRestartedNodeWaitsForItsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("three JetStream nodes, and a 30 s wait for a meta leader that is not there")
	}
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // registered first, runs last
	nodes := writeClusterConfigs(t, t.TempDir(), brokertest.FreeAddrs(t, 3))
	a, b, c := nodes[0], nodes[1], nodes[2]
	for _, n := range nodes { // together: a node's engine starts once a quorum is up
		n.start(t)
	}
	for _, n := range nodes {
		n.waitListening(t, 60*time.Second)
	}
	c.stop(t)
	b.stop(t)
	a.stop(t)

	c.start(t)
	c.waitListening(t, 60*time.Second) // fails if C exits
	ctx := context.Background()
	conn := dial(t, c.grpc)
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("C's health while it cannot reach its cluster: %v, %v; want NOT_SERVING", r, err)
	}
	if code, body := getReadyz(t, c.http); code != http.StatusServiceUnavailable || !strings.Contains(body, "not started yet") {
		t.Fatalf("C's /readyz while it cannot reach its cluster: %d %q; want 503 saying the engine has not started yet", code, body)
	}
	cc, err := client.Dial(c.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cc.Publish(pctx, "w.before", nil, nil)
	pcancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a publish through C while it cannot reach its cluster: %v; want UNAVAILABLE", err)
	}

	b.start(t)
	b.waitListening(t, 60*time.Second)
	waitFor(t, c, 45*time.Second, "C's health SERVING once B is back", func() bool {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	if code, body := getReadyz(t, c.http); code != http.StatusOK {
		t.Fatalf("C's /readyz once it serves: %d %q", code, body)
	}
	// The group declared in C's file exists: a publish through C is queued for it before
	// any member, and a member on B gets it.
	waitFor(t, c, 30*time.Second, "a publish through C routed to the declared group", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		res, err := cc.Publish(pctx, "w.after", []byte("after"), nil, client.WithMessageID("after"))
		return err == nil && res.Routed == 1
	})
	// B, restarted into a cluster still electing its leaders, may itself have missed its
	// first start (a JetStream call timed out) and be retrying: wait until it serves too.
	bconn := dial(t, b.grpc)
	defer bconn.Close()
	bhealth := healthpb.NewHealthClient(bconn)
	waitFor(t, b, 60*time.Second, "B's health SERVING", func() bool {
		r, err := bhealth.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	bc, err := client.Dial(b.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	got := make(chan string, 10)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	sub, err := bc.Subscribe(sctx, client.SubscribeOptions{Patterns: []string{"w.>"}, Mode: client.Balanced, Group: "work"},
		func(_ context.Context, m *client.Message) error { got <- string(m.Payload); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if p := brokertest.Receive(t, got, "the message published through C, on a member on B"); p != "after" {
		t.Fatalf("the member on B got %q", p)
	}
	scancel()
	_ = sub.Close()
	bc.Close()
	cc.Close()
	conn.Close()
	bconn.Close()
	c.stop(t)
	b.stop(t)
}

// waitFor polls cond until it holds; after within it fails the test, and at once if n
// exited meanwhile.
func waitFor(t *testing.T, n *clusterNode, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		n.gone(t, "while the test waited for "+what)
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getReadyz returns the status and body of /readyz at addr.
func getReadyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
