package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/tinybroker/tinybroker/internal/testing/testcerts"
)

// Contexts: add, ls, show, select, rm; files 0600 in a 0700 folder; a context's address and
// token file reach every client command, under the flags and the environment.
func TestContexts(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("TINYBROKER_ADDR", "")
	t.Setenv("TINYBROKER_TOKEN", "")
	t.Setenv(contextEnv, "")
	dir := t.TempDir()
	h, _ := bcrypt.GenerateFromPassword([]byte("tok"), bcrypt.MinCost)
	cfg := filepath.Join(dir, "users.hcl")
	os.WriteFile(cfg, []byte("user \"alice\" {\n  token_hash = \""+string(h)+"\"\n  admin = true\n}\n"), 0o644)
	tokenFile := filepath.Join(dir, "alice.token")
	os.WriteFile(tokenFile, []byte("alice:tok\n"), 0o600)
	addr, _, done, cancel := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0")
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	fails := func(want string, args ...string) {
		t.Helper()
		out, errOut, code := cli(t, args...)
		if code == 0 || !strings.Contains(out+errOut, want) {
			t.Fatalf("tinybroker %s: exit %d, want a failure saying %q\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
	}

	// Without a context, the default address (nothing there) and no token.
	fails("Unauthenticated", "groups", "ls", "--addr", addr.String())
	ok(t, "context", "add", "prod", "--addr", addr.String(), "--token-file", tokenFile, "--description", "the test's", "--select")
	ok(t, "groups", "ls") // the selected context's address and token
	conf, _ := os.UserConfigDir()
	for path, mode := range map[string]os.FileMode{
		filepath.Join(conf, "tinybroker", "context", "prod.json"): 0o600,
		filepath.Join(conf, "tinybroker", "context.txt"):          0o600,
		filepath.Join(conf, "tinybroker", "context"):              0o700 | os.ModeDir,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want mode %v", path, fi.Mode(), err, mode)
		}
	}

	// Flags and the environment win over the context.
	fails("127.0.0.1:1", "groups", "ls", "--addr", "127.0.0.1:1")
	t.Setenv("TINYBROKER_ADDR", "127.0.0.1:1")
	fails("127.0.0.1:1", "groups", "ls")
	t.Setenv("TINYBROKER_ADDR", "")
	t.Setenv("TINYBROKER_TOKEN", "alice:wrong")
	fails("Unauthenticated", "groups", "ls")
	t.Setenv("TINYBROKER_TOKEN", "")

	// --context and TINYBROKER_CONTEXT name another; an unknown one is an error naming those there are.
	ok(t, "context", "add", "dev", "--addr", "127.0.0.1:1")
	fails("127.0.0.1:1", "groups", "ls", "--context", "dev")
	t.Setenv(contextEnv, "dev")
	fails("127.0.0.1:1", "groups", "ls")
	ok(t, "groups", "ls", "--context", "prod")
	t.Setenv(contextEnv, "")
	fails(`no context "nope": there are dev, prod`, "groups", "ls", "--context", "nope")
	fails("keeps no token", "context", "add", "x", "--addr", "a:1", "--token", "alice:tok")

	var list []struct {
		Name     string `json:"name"`
		Selected bool   `json:"selected"`
		Addr     string `json:"addr"`
	}
	if err := json.Unmarshal([]byte(ok(t, "context", "ls", "--json")), &list); err != nil || len(list) != 2 ||
		list[0].Name != "dev" || list[0].Selected || list[1].Name != "prod" || !list[1].Selected || list[1].Addr != addr.String() {
		t.Fatalf("context ls --json: %+v %v", list, err)
	}
	if out := ok(t, "context", "ls"); !regexpMatch(`\*\s+prod`, out) {
		t.Errorf("context ls does not mark prod selected:\n%s", out)
	}
	if out := ok(t, "context", "show"); !strings.Contains(out, tokenFile) || strings.Contains(out, "alice:tok") {
		t.Errorf("context show: want the token file's path, never the token:\n%s", out)
	}
	ok(t, "context", "select", "dev")
	fails("127.0.0.1:1", "groups", "ls")
	ok(t, "context", "rm", "dev")
	if out := ok(t, "context", "ls"); strings.Contains(out, "dev") || strings.Contains(out, "*") {
		t.Errorf("after rm dev, the selected one: context ls still shows it:\n%s", out)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// contextHome gives the test a config folder of its own and clears the environment that
// would pick an address, a token or a context for it; it returns the contexts' folder.
func contextHome(t *testing.T) string {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("TINYBROKER_ADDR", "")
	t.Setenv("TINYBROKER_TOKEN", "")
	t.Setenv(contextEnv, "")
	conf, err := os.UserConfigDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(conf, "tinybroker")
}

// wantExit runs a command line that must end with exit status code, saying want.
func wantExit(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	out, errOut, got := cli(t, args...)
	if got != code || !strings.Contains(out+errOut, want) {
		t.Fatalf("tinybroker %s: exit %d, want %d saying %q\n%s%s", strings.Join(args, " "), got, code, want, out, errOut)
	}
}

// A context that is not there, named by --context or TINYBROKER_CONTEXT, is a usage error
// (exit 2) naming those there are, for every client command and for context's own; a
// selected context whose file went away is a failure (1) saying to select another. No
// broker is needed: each is refused before dialing.
func TestContextUsageErrors(t *testing.T) {
	home := contextHome(t)
	wantExit(t, exitUsage, `no context "nope": there are none`, "groups", "ls", "--context", "nope")
	ok(t, "context", "add", "b", "--addr", "127.0.0.1:1")
	ok(t, "context", "add", "a", "--addr", "127.0.0.1:1")
	for _, args := range [][]string{
		{"groups", "ls", "--context", "nope"},
		{"pub", "--context", "nope", "t", "x"},
		{"sub", "--context", "nope", "t"},
		{"top", "--once", "--context", "nope"},
		{"stats", "--context", "nope"},
		{"bench", "--context", "nope"},
		{"context", "show", "nope"},
		{"context", "select", "nope"},
		{"context", "rm", "nope"},
	} {
		wantExit(t, exitUsage, `no context "nope": there are a, b`, args...)
	}
	t.Setenv(contextEnv, "nope")
	wantExit(t, exitUsage, `no context "nope": there are a, b`, "groups", "ls")
	wantExit(t, exitUsage, `no context "nope": there are a, b`, "pub", "t", "x")
	t.Setenv(contextEnv, "")

	wantExit(t, exitUsage, "context name", "context", "add", "../x", "--addr", "a:1")
	wantExit(t, exitUsage, "context name", "groups", "ls", "--context", "a/b")
	wantExit(t, exitUsage, "keeps no token", "context", "add", "x", "--addr", "a:1", "--token", "alice:tok")
	wantExit(t, exitUsage, "go together", "context", "add", "x", "--addr", "a:1", "--tls-cert", "c.pem")
	wantExit(t, exitUsage, "no context is selected", "context", "show")
	if _, err := os.Stat(filepath.Join(home, "context", "x.json")); err == nil {
		t.Fatal("a refused context add wrote its file")
	}

	ok(t, "context", "select", "a")
	os.Remove(filepath.Join(home, "context", "a.json")) // by hand, not context rm
	wantExit(t, exitFailure, "the selected context", "groups", "ls")
	wantExit(t, exitFailure, "127.0.0.1:1", "groups", "ls", "--context", "b") // another, named, is used
}

// Files 0600 in 0700 folders, also when the folders were there before with more open modes;
// a context keeps absolute paths and never the token a token file holds.
func TestContextFiles(t *testing.T) {
	home := contextHome(t)
	if err := os.MkdirAll(filepath.Join(home, "context"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(home, 0o755)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "alice.token"), []byte("alice:s3cret-token\n"), 0o600)
	t.Chdir(dir)
	_, errOut, code := cli(t, "context", "add", "prod", "--addr", "n1:7878,n2:7878", "--tls-ca", "ca.pem",
		"--token-file", "alice.token", "--tls-server-name", "broker.example", "--description", "production", "--select")
	if code != 0 || !strings.Contains(errOut, "ca.pem") {
		t.Fatalf("context add: exit %d, want 0 and a note that ca.pem is not there\n%s", code, errOut)
	}
	for path, mode := range map[string]os.FileMode{
		filepath.Join(home, "context", "prod.json"): 0o600,
		filepath.Join(home, "context.txt"):          0o600,
		filepath.Join(home, "context"):              0o700 | os.ModeDir,
		home:                                        0o700 | os.ModeDir,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want mode %v", path, fi.Mode(), err, mode)
		}
	}
	b, err := os.ReadFile(filepath.Join(home, "context", "prod.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c brokerContext
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	want := brokerContext{Description: "production", Addr: "n1:7878,n2:7878", TLSCA: filepath.Join(dir, "ca.pem"),
		TLSServerName: "broker.example", TokenFile: filepath.Join(dir, "alice.token")}
	if c != want {
		t.Errorf("prod.json holds %+v, want %+v", c, want)
	}
	if sel, _ := os.ReadFile(filepath.Join(home, "context.txt")); strings.TrimSpace(string(sel)) != "prod" {
		t.Errorf("context.txt: %q, want prod", sel)
	}
	for _, args := range [][]string{{"context", "show"}, {"context", "show", "prod"}, {"context", "ls"}, {"context", "ls", "--json"}} {
		out := ok(t, args...)
		if strings.Contains(out, "s3cret") || !strings.Contains(out, filepath.Join(dir, "alice.token")) {
			t.Errorf("tinybroker %s: want the token file's path, never the token:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := ok(t, "context", "show", "prod"); !strings.Contains(out, "broker.example") || !strings.Contains(out, "production") {
		t.Errorf("context show prod lacks its settings:\n%s", out)
	}
	if strings.Contains(string(b), "s3cret") {
		t.Fatal("the context's file holds the token")
	}
	ok(t, "context", "rm", "prod")
	if _, err := os.Stat(filepath.Join(home, "context", "prod.json")); err == nil {
		t.Error("context rm left the file")
	}
	if _, err := os.Stat(filepath.Join(home, "context.txt")); err == nil {
		t.Error("context rm of the selected context left it selected")
	}
	if out := ok(t, "context", "ls"); !strings.Contains(out, "no contexts") {
		t.Errorf("context ls after rm:\n%s", out)
	}
}

// A context with TLS files and a token file reaches a secured broker, selected or named:
// a CA and a token file (alice), a CA and a client certificate (ops). A flag for one TLS
// setting keeps the context's others; --tls=false takes none. The flag beats the
// environment, which beats the context.
func TestContextSecureServe(t *testing.T) {
	contextHome(t)
	dir, ca, h := secureDir(t, "context test CA")
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.PEM, 0o644)
	pair, err := ca.Sign(testcerts.Options{CommonName: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pair.Write(dir, "ops")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "secure.hcl")
	os.WriteFile(cfg, []byte(`tls {
  cert_file      = "server.pem"
  key_file       = "server-key.pem"
  client_ca_file = "ca.pem"
}
user "alice" {
  token_hash = "`+string(h)+`"
  admin      = true
  publish {
    allow = ["orders.>"]
  }
}
user "ops" {
  certificate = "CN=ops"
  admin       = true
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
	a := addr.String()
	fails := func(want string, args ...string) {
		t.Helper()
		out, errOut, code := cli(t, args...)
		if code == 0 || !strings.Contains(out+errOut, want) {
			t.Fatalf("tinybroker %s: exit %d, want a failure saying %q\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
	}

	// Without a context: plaintext, refused as such.
	fails("speaks TLS, and this client connected without it", "groups", "ls", "--addr", a)

	ok(t, "context", "add", "alice", "--addr", a, "--tls-ca", caFile, "--token-file", tokenFile, "--select")
	ok(t, "context", "add", "ops", "--addr", a, "--tls-ca", caFile, "--tls-cert", cert, "--tls-key", key)
	ok(t, "groups", "ls")
	if out := ok(t, "pub", "orders.1", "x"); !strings.Contains(out, "published") {
		t.Fatalf("pub through the selected context: %s", out)
	}
	if out := ok(t, "top", "--once", "--interval", "10ms"); out == "" {
		t.Fatal("top through the selected context printed nothing")
	}
	ok(t, "users", "ls", "--context", "ops")
	t.Setenv(contextEnv, "ops")
	ok(t, "users", "ls")
	// ops may not publish: its context, not alice's selected one, was used.
	fails("PermissionDenied", "pub", "orders.1", "x")
	t.Setenv(contextEnv, "")

	// One TLS flag keeps the context's other settings (here its CA).
	ok(t, "groups", "ls", "--tls-server-name", "localhost")
	fails("not for the name this client checks (elsewhere.example)", "groups", "ls", "--tls-server-name", "elsewhere.example")
	// --tls=false on the command line: no TLS from the context.
	fails("speaks TLS, and this client connected without it", "groups", "ls", "--tls=false")
	// A token on the command line or in the environment beats the context's token file.
	fails("Unauthenticated", "groups", "ls", "--token", "alice:wrong")
	t.Setenv("TINYBROKER_TOKEN", "alice:wrong")
	fails("Unauthenticated", "groups", "ls")
	t.Setenv("TINYBROKER_TOKEN", "")

	// Address: flag > TINYBROKER_ADDR > context.
	t.Setenv("TINYBROKER_ADDR", "127.0.0.1:1")
	fails("127.0.0.1:1", "groups", "ls")
	ok(t, "groups", "ls", "--addr", a)
	t.Setenv("TINYBROKER_ADDR", "")

	// A context's file that went away: the error names the context.
	os.Rename(tokenFile, tokenFile+".moved")
	fails(`from context "alice"`, "groups", "ls")
}
