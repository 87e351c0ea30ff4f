package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/bcrypt"

	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/internal/testing/testcerts"
	"github.com/tinybroker/tinybroker/server/auth"
)

// serve refuses a non-loopback address without users, saying how to fix it, and before
// it listens; insecure = true lets it start, with a warning.
func TestServeRefusesNonLoopbackWithoutUsers(t *testing.T) {
	var logs bytes.Buffer
	err := serve(context.Background(), []string{"--listen", "0.0.0.0:0"}, &logs, nil)
	if err == nil {
		t.Fatal("serve on 0.0.0.0 without users started")
	}
	for _, want := range []string{"refusing to serve 0.0.0.0:0 without authentication", "--listen 127.0.0.1:7878", `user "alice"`, "insecure = true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(logs.String(), "listening") {
		t.Fatal("serve listened before refusing")
	}
	cfg := filepath.Join(t.TempDir(), "insecure.hcl")
	if err := os.WriteFile(cfg, []byte("insecure = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, logs2, done, cancel := startServe(t, "--config", cfg, "--listen", "0.0.0.0:0")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs2.String(), "INSECURE") {
		t.Fatalf("insecure = true started without a warning:\n%s", logs2.String())
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "127.0.0.2:0": true,
		":7878": false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false} {
		if got, why := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v (%s), want %v", addr, got, why, want)
		}
	}
	// With users, any address is allowed.
	if err := checkExposure(config.Config{Listen: "0.0.0.0:1", Users: []auth.User{{Name: "a"}}}, "", hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
}

// passwd reads the token from standard input, never from its arguments, and prints a
// bcrypt hash of it.
func TestPasswd(t *testing.T) {
	var out, errs bytes.Buffer
	if err := runPasswd(nil, strings.NewReader("s3cret\n"), &out, &errs); err != nil {
		t.Fatal(err)
	}
	h := strings.TrimSpace(out.String())
	if bcrypt.CompareHashAndPassword([]byte(h), []byte("s3cret")) != nil {
		t.Fatalf("passwd printed %q, not a hash of the token", h)
	}
	if strings.Contains(out.String()+errs.String(), "s3cret") {
		t.Fatal("passwd echoed the token")
	}
	if err := runPasswd([]string{"s3cret"}, strings.NewReader(""), &out, &errs); err == nil || !strings.Contains(err.Error(), "never from the command line") {
		t.Fatalf("a token as an argument: %v", err)
	}
	if err := runPasswd(nil, strings.NewReader(""), &out, &errs); err == nil {
		t.Fatal("an empty token was hashed")
	}
}

func TestDialFlagsToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	os.WriteFile(file, []byte("alice:from-file\nignored\n"), 0o600)
	env := map[string]string{tokenEnv: "alice:from-env"}
	for _, c := range []struct {
		token, file, want, err string
	}{
		{"alice:flag", "", "alice:flag", ""},
		{"", file, "alice:from-file", ""},
		{"", "", "alice:from-env", ""},
		{"a:b", file, "", "not both"},
		{"nocolon", "", "", "USER:TOKEN"},
	} {
		d := &dialFlags{token: c.token, tokenFile: c.file, getenv: func(k string) string { return env[k] }, readFile: os.ReadFile}
		got, err := d.tokenValue()
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("token %q file %q: got %q, %v; want %q, %q", c.token, c.file, got, err, c.want, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "nocolon") {
			t.Errorf("the error echoes the token: %v", err)
		}
	}
	if cfg, err := (&dialFlags{readFile: os.ReadFile}).tlsConfig(); cfg != nil || err != nil {
		t.Fatalf("no TLS flag: %v %v", cfg, err)
	}
	if _, err := (&dialFlags{cert: "c.pem", readFile: os.ReadFile}).tlsConfig(); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("--tls-cert without --tls-key: %v", err)
	}
}

// secureDir returns a new folder holding a server certificate and key (server.pem,
// server-key.pem) by a new CA named name, and the bcrypt hash of the token "tok".
func secureDir(t *testing.T, name string) (dir string, ca *testcerts.CA, tokHash []byte) {
	dir = t.TempDir()
	ca, err := testcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.Server()
	if _, _, err := srv.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	tokHash, _ = bcrypt.GenerateFromPassword([]byte("tok"), bcrypt.MinCost)
	return dir, ca, tokHash
}

// The CLI against a secured serve: pub over TLS with a token file; without the token it is
// refused; a reload re-reads the certificate.
func TestSecureServeAndPub(t *testing.T) {
	dir, ca, h := secureDir(t, "cli test CA")
	os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o644)
	cfg := filepath.Join(dir, "secure.hcl")
	os.WriteFile(cfg, []byte(`tls {
  cert_file = "server.pem"
  key_file  = "server-key.pem"
}
user "alice" {
  token_hash = "`+string(h)+`"
  publish {
    allow = ["orders.>"]
  }
}
`), 0o644)
	tokenFile := filepath.Join(dir, "alice.token")
	os.WriteFile(tokenFile, []byte("alice:tok\n"), 0o600)
	addr, _, done, cancel := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0")
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var out, errs bytes.Buffer
	base := []string{"--addr", addr.String(), "--tls-ca", filepath.Join(dir, "ca.pem")}
	if err := runPub(append(base, "--token-file", tokenFile, "orders.1", "x"), &out, &errs); err != nil {
		t.Fatalf("pub with TLS and a token: %v", err)
	}
	err := runPub(append(base, "orders.1", "x"), &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("pub without a token: %v", err)
	}
	err = runPub(append(base, "--token-file", tokenFile, "invoices.1", "x"), &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("pub outside the user's rules: %v", err)
	}
}
