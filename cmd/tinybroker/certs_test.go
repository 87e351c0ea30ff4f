package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readCert returns the certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

// certsDir runs certs init, server and client (for alice) into a new directory under the
// test's, and returns it.
func certsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secrets")
	ok(t, "certs", "init", "--dir", dir)
	ok(t, "certs", "server", "--dir", dir, "--host", "localhost,127.0.0.1")
	ok(t, "certs", "client", "--dir", dir, "--user", "alice")
	return dir
}

// certs init, server and client write a CA, a server certificate for the names of --host and
// a client certificate for the user, keys 0600; nothing is overwritten without --force.
func TestCertsFiles(t *testing.T) {
	dir := certsDir(t)
	wantMode(t, dir, 0o700)
	for name, mode := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600, "server.pem": 0o644, "server-key.pem": 0o600,
		"alice.pem": 0o644, "alice-key.pem": 0o600} {
		wantMode(t, filepath.Join(dir, name), mode)
	}
	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	if !ca.IsCA {
		t.Fatal("ca.pem is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	srv := readCert(t, filepath.Join(dir, "server.pem"))
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"}); err != nil {
		t.Errorf("server.pem for localhost: %v", err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("server.pem for 127.0.0.1: %v", err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("server.pem is valid for a name not in --host")
	}
	alice := readCert(t, filepath.Join(dir, "alice.pem"))
	if alice.Subject.CommonName != "alice" {
		t.Errorf("alice.pem's subject is %q", alice.Subject)
	}
	if _, err := alice.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("alice.pem for client auth: %v", err)
	}
	for _, c := range []*x509.Certificate{ca, srv, alice} {
		pub, isEC := c.PublicKey.(*ecdsa.PublicKey)
		if !isEC || pub.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", c.Subject, c.PublicKey)
		}
		if d := time.Until(c.NotAfter); d < 300*24*time.Hour || d > 6*365*24*time.Hour {
			t.Errorf("%s: valid for %v more", c.Subject, d)
		}
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "alice.pem"), filepath.Join(dir, "alice-key.pem")); err != nil {
		t.Errorf("alice's pair: %v", err)
	}

	// No overwriting without --force; with it, a new key.
	before, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	for _, args := range [][]string{{"init"}, {"server"}, {"client", "--user", "alice"}} {
		_, errOut, code := cli(t, append(append([]string{"certs"}, args...), "--dir", dir)...)
		if code != exitFailure || !strings.Contains(errOut, "exists: not overwriting it (--force does)") {
			t.Errorf("certs %s again: exit %d, %s", args[0], code, errOut)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem")); string(after) != string(before) {
		t.Fatal("certs init overwrote ca-key.pem without --force")
	}
	ok(t, "certs", "client", "--dir", dir, "--user", "alice", "--force")
	wantMode(t, filepath.Join(dir, "alice-key.pem"), 0o600)
	ok(t, "certs", "init", "--dir", dir, "--force")
	if after, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem")); string(after) == string(before) {
		t.Fatal("certs init --force kept the old key")
	}
	wantMode(t, filepath.Join(dir, "ca-key.pem"), 0o600)

	// Clear errors.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"certs", "client", "--dir", filepath.Join(dir, "none"), "--user", "bob"}, exitFailure, "certs init --dir"},
		{[]string{"certs", "server", "--dir", dir, "--host", "https://x:1", "--force"}, exitUsage, "neither a host name nor an IP address"},
		{[]string{"certs", "client", "--dir", dir, "--user", "a:b"}, exitUsage, "may not contain ':'"},
		{[]string{"certs", "client", "--dir", dir, "--user", "../bob"}, exitUsage, "without a path"},
		{[]string{"certs", "client", "--dir", dir}, exitUsage, `"user" not set`},
		{[]string{"certs", "init"}, exitUsage, `"dir" not set`},
		{[]string{"certs", "init", "--help"}, exitOK, ""},
	} {
		_, errOut, code := cli(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); err == nil {
		t.Error("certs client without a CA made the directory")
	}
}

// mtlsServe serves with dir's certificates, client certificates required, alice known by
// hers.
func mtlsServe(t *testing.T, dir string) (addr string, logs interface{ String() string }) {
	t.Helper()
	cfg := filepath.Join(dir, "mtls.hcl")
	writeConfig(t, cfg, `tls {
  cert_file           = "server.pem"
  key_file            = "server-key.pem"
  client_ca_file      = "ca.pem"
  require_client_cert = true
}
user "alice" {
  certificate = "CN=alice"
  publish {
    allow = ["orders.>"]
  }
}
`)
	a, l, done, cancel := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0")
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return a.String(), l
}

// A server with the certificates of `certs` and require_client_cert takes alice's
// certificate and refuses a client without one, saying so to the client and in its log, at
// most one line a second however many come.
func TestCertsMTLS(t *testing.T) {
	dir := certsDir(t)
	addr, logs := mtlsServe(t, dir)
	ca := filepath.Join(dir, "ca.pem")
	out := ok(t, "pub", "--addr", addr, "--tls-ca", ca, "--tls-cert", filepath.Join(dir, "alice.pem"), "--tls-key", filepath.Join(dir, "alice-key.pem"), "orders.1", "x")
	if !strings.Contains(out, "published") {
		t.Fatalf("pub with alice's certificate: %s", out)
	}
	_, errOut, code := cli(t, "pub", "--addr", addr, "--tls-ca", ca, "orders.1", "x")
	if code != exitFailure || !strings.Contains(errOut, "requires a client certificate") || !strings.Contains(errOut, "--tls-cert FILE --tls-key FILE") {
		t.Fatalf("pub without a certificate: exit %d, %s", code, errOut)
	}
	const refusal = "authentication failed: no client certificate in the TLS handshake"
	line := waitLog(t, logs, refusal)
	if !strings.Contains(line, "[WARN]") || !strings.Contains(line, "peer=127.0.0.1:") {
		t.Fatalf("the refusal's log line has no level WARN or no peer address: %s", line)
	}

	// A flood: one line a second, and the next says how many it held back.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // a new second
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(must(os.ReadFile(ca)))
	handshake := func() {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("a handshake without a certificate: %v", err)
		}
	}
	before := strings.Count(logs.String(), refusal)
	const flood = 30
	start := time.Now()
	for range flood {
		handshake()
	}
	elapsed := time.Since(start)
	lines := strings.Count(logs.String(), refusal) - before
	if max := int(elapsed/time.Second) + 2; lines > max {
		t.Fatalf("%d refused handshakes in %v logged %d lines, want at most %d", flood, elapsed, lines, max)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	handshake()
	if !strings.Contains(waitLog(t, logs, "suppressed_before="), refusal) {
		t.Fatal("the line after a flood does not say how many were held back")
	}
}

// waitLog waits until a line of logs contains s, and returns it.
func waitLog(t *testing.T, logs interface{ String() string }, s string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, s) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line says %q:\n%s", s, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Each TLS mistake of a client gets a message that names it and the flag or setting that
// fixes it, not "is a broker running?".
func TestTLSMistakes(t *testing.T) {
	dir := certsDir(t)
	other := filepath.Join(t.TempDir(), "other")
	ok(t, "certs", "init", "--dir", other)
	addr, _ := mtlsServe(t, dir)
	plain, _, done, cancel := startServe(t, "--listen", "127.0.0.1:0")
	t.Cleanup(func() { cancel(); <-done })
	ca := filepath.Join(dir, "ca.pem")
	alice := []string{"--tls-cert", filepath.Join(dir, "alice.pem"), "--tls-key", filepath.Join(dir, "alice-key.pem")}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no TLS to a TLS broker", []string{"pub", "--addr", addr}, []string{"the broker speaks TLS, and this client connected without it", "--tls-ca FILE"}},
		{"TLS to a plaintext broker", []string{"pub", "--addr", plain.String(), "--tls-ca", ca}, []string{"does not speak TLS", "drop the --tls flags", "tls block"}},
		{"an untrusted CA", append([]string{"pub", "--addr", addr, "--tls-ca", filepath.Join(other, "ca.pem")}, alice...),
			[]string{"signed by a CA this client does not trust", "--tls-ca FILE"}},
		{"the system's CAs", append([]string{"pub", "--addr", addr, "--tls"}, alice...), []string{"signed by a CA this client does not trust", "--tls-ca FILE"}},
		{"a wrong server name", append([]string{"pub", "--addr", addr, "--tls-ca", ca, "--tls-server-name", "broker.example"}, alice...),
			[]string{"not for the name this client checks (broker.example)", "valid for localhost", "--tls-server-name NAME", "--addr"}},
		{"no client certificate", []string{"pub", "--addr", addr, "--tls-ca", ca}, []string{"requires a client certificate", "require_client_cert", "--tls-cert FILE --tls-key FILE"}},
		{"a server certificate as a client's", []string{"pub", "--addr", addr, "--tls-ca", ca, "--tls-cert", filepath.Join(dir, "server.pem"), "--tls-key", filepath.Join(dir, "server-key.pem")},
			[]string{"refused this client's certificate", "client_ca_file"}},
		{"an admin command without TLS", []string{"groups", "ls", "--addr", addr}, []string{"the broker speaks TLS, and this client connected without it", "--tls-ca FILE"}},
		{"sub without a certificate", []string{"sub", "--addr", addr, "--tls-ca", ca, "orders.>"}, []string{"requires a client certificate", "--tls-cert FILE"}},
	} {
		args := c.args
		if args[0] == "pub" {
			args = append(args, "orders.1", "x")
		}
		_, errOut, code := cli(t, args...)
		if code != exitFailure || strings.Contains(errOut, "is a broker running") {
			t.Errorf("%s: exit %d, %s", c.name, code, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: the message does not say %q:\n%s", c.name, w, errOut)
			}
		}
	}
	// TLS files a context gave: the fix names the context, where the flags named are not
	// what the user typed.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(contextEnv, "")
	ok(t, append([]string{"context", "add", "wrongca", "--addr", addr, "--tls-ca", filepath.Join(other, "ca.pem")}, alice...)...)
	if _, errOut, code := cli(t, "pub", "--context", "wrongca", "orders.1", "x"); code != exitFailure ||
		!strings.Contains(errOut, "signed by a CA this client does not trust") || !strings.Contains(errOut, `context "wrongca"`) {
		t.Errorf("a context's wrong CA: exit %d, the message does not name the context:\n%s", code, errOut)
	}
	// No broker at all: the usual hint, not a TLS one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	none := l.Addr().String()
	l.Close()
	if _, errOut, _ := cli(t, "pub", "--addr", none, "--tls-ca", ca, "orders.1", "x"); !strings.Contains(errOut, "is a broker running") {
		t.Errorf("no broker: %s", errOut)
	}
}
