package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
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
