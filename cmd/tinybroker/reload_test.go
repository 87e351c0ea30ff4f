package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

func fixturePath(t *testing.T, name string) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "plugins", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeConfig(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("listen = \"127.0.0.1:0\"\nplugin_cache_dir = \""+filepath.Join(filepath.Dir(path), "cache")+"\"\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Plugins from the config file run; the Reload call swaps them, and refuses a bad config
// while the running plugins stay.
func TestServeWithPluginsAndReload(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tb.hcl")
	writeConfig(t, cfg, `plugin "filter" {
  path = "`+fixturePath(t, "good")+`"
}
`)
	c, stopServe := serveAndDial(t, "--config", cfg)
	defer stopServe()
	publish := func(headers map[string]string) (*pb.PublishResponse, error) {
		return c.Publish(context.Background(), &pb.PublishRequest{Topic: "orders.1", Headers: headers})
	}

	_, err := publish(map[string]string{"tenant": "evil"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "evil tenant") {
		t.Fatalf("plugin reject: %v", err)
	}
	st, _ := c.Stats(context.Background(), &pb.StatsRequest{})
	if len(st.GetPlugins()) != 1 || st.GetPlugins()[0].GetName() != "filter" || st.GetPlugins()[0].GetCalls() != 1 {
		t.Fatalf("plugin stats %v", st.GetPlugins())
	}

	writeConfig(t, cfg, `plugin "tagger" {
  path   = "`+fixturePath(t, "tag")+`"
  config = { tag = "v2" }
}
`)
	resp, err := c.Reload(context.Background(), &pb.ReloadRequest{})
	if err != nil || strings.Join(resp.GetPlugins(), ",") != "tagger" {
		t.Fatalf("reload: %v %v", resp, err)
	}
	if _, err := publish(map[string]string{"tenant": "evil"}); err != nil {
		t.Fatalf("after reload the old plugin still runs: %v", err)
	}

	writeConfig(t, cfg, `plugin "broken" {
  path = "`+fixturePath(t, "abiv2")+`"
}
`)
	_, err = c.Reload(context.Background(), &pb.ReloadRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "ABI v2") {
		t.Fatalf("bad reload: %v", err)
	}
	st, _ = c.Stats(context.Background(), &pb.StatsRequest{})
	if len(st.GetPlugins()) != 1 || st.GetPlugins()[0].GetName() != "tagger" {
		t.Fatalf("after a refused reload: %v", st.GetPlugins())
	}
}

// A plugin that refuses its configuration stops the broker from starting, with the reason.
func TestServeRefusesBadPlugin(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tb.hcl")
	writeConfig(t, cfg, `plugin "strict" {
  path = "`+fixturePath(t, "initfail")+`"
}
`)
	var logs brokertest.Log
	err := serve(context.Background(), []string{"--config", cfg}, &logs, nil)
	if err == nil || !strings.Contains(err.Error(), "config key allow is missing") {
		t.Fatalf("serve = %v", err)
	}
}

// SIGHUP reloads the real binary's plugins.
func TestServeBinarySIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tinybroker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "tb.hcl")
	writeConfig(t, cfg, "")
	cmd := exec.Command(bin, "serve", "--config", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	waitFor := func(what string) {
		t.Helper()
		found := make(chan bool, 1)
		go func() {
			for lines.Scan() {
				if strings.Contains(lines.Text(), what) {
					found <- true
					return
				}
			}
			found <- false
		}()
		select {
		case ok := <-found:
			if !ok {
				t.Fatalf("log ended before %q", what)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no %q in the log", what)
		}
	}
	waitFor("listening")
	writeConfig(t, cfg, `plugin "tagger" {
  path   = "`+fixturePath(t, "tag")+`"
  config = { tag = "x" }
}
`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("plugins reloaded")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor("stopped")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}
