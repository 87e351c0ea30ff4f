package ops_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/ops"
)

func do(t *testing.T, method, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPI(t *testing.T) {
	s := start(t, stackOptions{})
	if err := s.b.Declare(broker.GroupConfig{Name: "jobs", Patterns: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	s.publish(t, "jobs.1", "hello")
	s.publish(t, "jobs.2", "world")

	code, body := do(t, "GET", s.url+"/api/snapshot", "")
	var snap ops.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); code != 200 || err != nil {
		t.Fatalf("snapshot: %d %v %s", code, err, body)
	}
	if snap.Published != 2 || snap.GroupsTotal != 1 || len(snap.Groups) != 1 || snap.Groups[0].Queued != 2 ||
		snap.Backlog.Queued != 2 || snap.Server == nil || snap.Server.PublishedBytes != 10 {
		t.Errorf("snapshot = %+v", snap)
	}

	if code, body = do(t, "GET", s.url+"/api/groups/jobs", ""); code != 200 || !strings.Contains(body, `"queued":2`) {
		t.Errorf("GET group: %d %s", code, body)
	}
	if code, body = do(t, "GET", s.url+"/api/groups/nope", ""); code != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("GET unknown group: %d %s", code, body)
	}
	if code, body = do(t, "POST", s.url+"/api/groups/jobs/purge", ""); code != 200 || body != "{\"purged\":2}\n" {
		t.Errorf("purge: %d %s", code, body)
	}
	// The group has dead-lettered nothing: an empty list, and a replay of all replays none.
	if code, body = do(t, "GET", s.url+"/api/groups/jobs/dead-letters", ""); code != 200 || !strings.Contains(body, "[]") {
		t.Errorf("dead letters: %d %s", code, body)
	}
	if code, body = do(t, "POST", s.url+"/api/groups/jobs/dead-letters/replay", `{}`); code != 200 {
		t.Errorf("replay: %d %s", code, body)
	}
	if code, body = do(t, "POST", s.url+"/api/groups/jobs/dead-letters/replay", `{"ids": ["nope"]}`); code != 404 {
		t.Errorf("replay of an unknown dead letter: %d %s", code, body)
	}
	if code, body = do(t, "POST", s.url+"/api/groups/jobs/dead-letters/replay", `not json`); code != 400 {
		t.Errorf("replay of a bad body: %d %s", code, body)
	}
	if code, body = do(t, "GET", s.url+"/api/groups/jobs/dead-letters?limit=0", ""); code != 400 {
		t.Errorf("limit 0: %d %s", code, body)
	}

	// A cross-origin POST from a browser is refused (CSRF), a same-origin one is not.
	if code, body = do(t, "POST", s.url+"/api/groups/jobs/purge", "", "Sec-Fetch-Site", "cross-site"); code != 403 {
		t.Errorf("cross-site purge: %d %s", code, body)
	}
	if code, body = do(t, "POST", s.url+"/api/groups/jobs/purge", "", "Sec-Fetch-Site", "same-origin"); code != 200 {
		t.Errorf("same-origin purge: %d %s", code, body)
	}
	// A host name other than localhost is refused (DNS rebinding).
	if code, body = do(t, "GET", s.url+"/api/snapshot", "", "Host", "evil.example:7879"); code != 403 || !strings.Contains(body, "allow_remote") {
		t.Errorf("foreign Host: %d %s", code, body)
	}
	if code, _ = do(t, "GET", s.url+"/api/snapshot", "", "Host", "localhost:7879"); code != 200 {
		t.Errorf("Host localhost: %d", code)
	}

	if code, body = do(t, "DELETE", s.url+"/api/groups/jobs", ""); code != 200 {
		t.Errorf("delete: %d %s", code, body)
	}
	if _, err := s.b.Group("jobs"); err == nil {
		t.Error("the group is still there")
	}

	// The dashboard's files and the profiler.
	for path, want := range map[string]string{"/": "<title>tinybroker</title>", "/app.js": "EventSource", "/style.css": ":root",
		"/favicon.svg": "<svg", "/debug/pprof/": "goroutine", "/debug/pprof/cmdline": "ops.test"} {
		if code, body = do(t, "GET", s.url+path, ""); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, body without %q", path, code, want)
		}
	}
}

// The event stream sends snapshots until the listener shuts down, which ends it promptly.
func TestEventsEndOnShutdown(t *testing.T) {
	s := start(t, stackOptions{})
	resp, err := http.Get(s.url + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	events := 0
	for events < 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: {") {
			var snap ops.Snapshot
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &snap); err != nil {
				t.Fatal(err)
			}
			events++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Shutdown must end the open event stream itself: if it waited for the client to hang
	// up, it would run into ctx's deadline and fail.
	if err := s.ops.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an event stream open: %v", err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Logf("stream ended with %v", err)
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:0"} {
		if lis, err := ops.Listen(addr, false); err == nil {
			lis.Close()
			t.Errorf("Listen(%q) accepted a non-loopback address", addr)
		} else if !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Listen(%q): %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		lis, err := ops.Listen(addr, false)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		lis.Close()
	}
	lis, err := ops.Listen("0.0.0.0:0", true)
	if err != nil {
		t.Fatalf("Listen with allowRemote: %v", err)
	}
	lis.Close()
}
