package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
)

// users ls lists the users in force with their rules, limits and what they hold, never a
// token or its hash, to admins only.
func TestUsersList(t *testing.T) {
	dir := t.TempDir()
	h, _ := bcrypt.GenerateFromPassword([]byte("tok"), bcrypt.MinCost)
	cfg := filepath.Join(dir, "users.hcl")
	os.WriteFile(cfg, []byte(`user "alice" {
  token_hash = "`+string(h)+`"
  admin      = true
}
user "bob" {
  token_hash = "`+string(h)+`"
  publish {
    allow = ["orders.>"]
    deny  = ["orders.internal.>"]
  }
  subscribe {
    allow = ["orders.*"]
  }
  limits {
    max_connections  = 4
    max_groups       = 2
    max_queued_bytes = "1MiB"
  }
}
`), 0o644)
	for _, u := range []string{"alice", "bob"} {
		os.WriteFile(filepath.Join(dir, u+".token"), []byte(u+":tok\n"), 0o600)
	}
	addr, _, done, cancel := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0")
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	as := func(user string) []string {
		return []string{"--addr", addr.String(), "--token-file", filepath.Join(dir, user+".token")}
	}

	var all adminpb.ListUsersResponse
	out := ok(t, append([]string{"users", "ls", "--json"}, as("alice")...)...)
	fromJSON(t, out, &all)
	if strings.Contains(out, "$2a$") || strings.Contains(out, string(h)) {
		t.Fatalf("users ls shows a token hash:\n%s", out)
	}
	us := all.GetUsers()
	if len(us) != 2 || us[0].GetName() != "alice" || us[1].GetName() != "bob" {
		t.Fatalf("users: %v, want alice and bob in order", us)
	}
	alice, bob := us[0], us[1]
	if !alice.GetAdmin() || bob.GetAdmin() || !alice.GetToken() || !bob.GetToken() {
		t.Errorf("admin/token: alice %v/%v, bob %v/%v", alice.GetAdmin(), alice.GetToken(), bob.GetAdmin(), bob.GetToken())
	}
	if p := bob.GetPublish(); strings.Join(p.GetAllow(), ",") != "orders.>" || strings.Join(p.GetDeny(), ",") != "orders.internal.>" {
		t.Errorf("bob's publish rules: %v", p)
	}
	if l := bob.GetLimits(); l.GetMaxConnections() != 4 || l.GetMaxGroups() != 2 || l.GetMaxQueuedBytes() != 1<<20 || l.GetMaxStreams() != 0 {
		t.Errorf("bob's limits: %v", l)
	}

	text := ok(t, append([]string{"users", "ls"}, as("alice")...)...)
	for _, want := range []string{"USER", "alice", "bob", "orders.> -orders.internal.>", "token"} {
		if !strings.Contains(text, want) {
			t.Errorf("users ls text lacks %q:\n%s", want, text)
		}
	}
	_, errOut, code := cli(t, append([]string{"users", "ls"}, as("bob")...)...)
	if code == 0 || !strings.Contains(errOut, "PermissionDenied") && !strings.Contains(errOut, "admin") {
		t.Fatalf("users ls as bob (no admin): exit %d\n%s", code, errOut)
	}
}
