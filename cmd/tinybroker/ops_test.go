package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// serve --http-listen starts the ops listener: metrics move with a publish, the dashboard is
// served, and shutdown ends it with the rest.
func TestServeHTTPListen(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, logs, done, cancel := startServe(t, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	m := regexp.MustCompile(`http listening: addr=(\S+)`).FindStringSubmatch(logs.WaitFor(t, "http listening"))
	if m == nil {
		cancel()
		t.Fatalf("no address in the http listening line:\n%s", logs.String())
	}
	url := "http://" + m[1]
	conn := dial(t, addr.String())
	if _, err := pb.NewBrokerClient(conn).Publish(context.Background(), &pb.PublishRequest{Topic: "hello", Payload: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	get := func(path string) string {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	metrics := get("/metrics")
	for _, want := range []string{"tinybroker_published_messages_total 1\n", "tinybroker_published_bytes_total 3\n",
		"tinybroker_unrouted_messages_total 1\n", "go_goroutines", "tinybroker_build_info{"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if !strings.Contains(get("/"), "<title>tinybroker</title>") {
		t.Error("no dashboard at /")
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// A non-loopback --http-listen is refused unless --http-allow-remote.
func TestServeHTTPListenRemote(t *testing.T) {
	var logs brokertest.Log
	err := serve(context.Background(), []string{"--listen", "127.0.0.1:0", "--http-listen", "0.0.0.0:0"}, &logs, nil)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") || !strings.Contains(err.Error(), "--http-allow-remote") {
		t.Fatalf("serve with a non-loopback --http-listen: %v", err)
	}
}

// With users the HTTP listener is behind the broker's authentication, over its TLS: an admin's
// token (Bearer or Basic) is let in, another user is refused 403, no credentials 401 with a
// Basic challenge for browsers; and it may listen beyond loopback.
func TestServeHTTPListenSecured(t *testing.T) {
	dir, ca, h := secureDir(t, "ops test CA")
	cfg := filepath.Join(dir, "secure.hcl")
	if err := os.WriteFile(cfg, []byte(`tls {
  cert_file = "server.pem"
  key_file  = "server-key.pem"
}
user "ops" {
  token_hash = "`+string(h)+`"
  admin      = true
}
user "app" {
  token_hash = "`+string(h)+`"
}
http {
  listen = "0.0.0.0:0"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, logs, done, cancel := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0")
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	m := regexp.MustCompile(`http listening: addr=\S+:(\d+)`).FindStringSubmatch(logs.WaitFor(t, "http listening"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	defer client.CloseIdleConnections()
	get := func(set func(*http.Request)) (int, http.Header) {
		req, _ := http.NewRequest("GET", "https://127.0.0.1:"+m[1]+"/metrics", nil)
		set(req)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if code, hdr := get(func(*http.Request) {}); code != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("no credentials: %d %v", code, hdr)
	}
	if code, _ := get(func(r *http.Request) { r.Header.Set("Authorization", "Bearer ops:tok") }); code != 200 {
		t.Errorf("admin, bearer: %d", code)
	}
	if code, _ := get(func(r *http.Request) { r.SetBasicAuth("ops", "tok") }); code != 200 {
		t.Errorf("admin, basic: %d", code)
	}
	if code, _ := get(func(r *http.Request) { r.SetBasicAuth("ops", "wrong") }); code != 401 {
		t.Errorf("wrong token: %d", code)
	}
	if code, _ := get(func(r *http.Request) { r.Header.Set("Authorization", "Bearer app:tok") }); code != 403 {
		t.Errorf("not an admin: %d", code)
	}
}
