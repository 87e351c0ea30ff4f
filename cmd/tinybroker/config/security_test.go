package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/server/auth"
)

// The secure example parses to what its comments say.
func TestExampleSecureConfig(t *testing.T) {
	c, err := Load("../../../examples/config/secure.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS == nil || !strings.HasSuffix(c.TLS.CertFile, string(filepath.Separator)+filepath.Join(".secrets", "server.pem")) || c.TLS.RequireClientCert {
		t.Fatalf("tls %+v", c.TLS)
	}
	if len(c.Users) != 3 {
		t.Fatalf("%d users", len(c.Users))
	}
	a := c.Users[0]
	want := auth.User{Name: "alice", TokenHash: a.TokenHash,
		Publish:   auth.Rules{Allow: []string{"orders.>"}, Deny: []string{"orders.internal.>"}},
		Subscribe: auth.Rules{Allow: []string{"orders.*", "dlq.billing"}},
		Groups:    auth.Rules{Allow: []string{"billing"}},
		Limits:    auth.Limits{MaxConnections: 16, MaxStreams: 64, MaxSubscriptions: 256, MaxGroups: 4, MaxQueuedBytes: 256 << 20}}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("alice = %+v\nwant %+v", a, want)
	}
	if c.Users[1].Certificate != "CN=bob" || !c.Users[2].Admin || c.Users[1].Admin {
		t.Fatalf("bob %+v, ops %+v", c.Users[1], c.Users[2])
	}
	if _, err := auth.New(auth.Options{Users: c.Users}); err != nil {
		t.Fatalf("the example's users: %v", err)
	}
}

func TestSecurityBlocks(t *testing.T) {
	c := mustParse(t, "insecure = true\ntls {\n  cert_file = \"/c.pem\"\n  key_file = \"k.pem\"\n  client_ca_file = \"ca.pem\"\n  require_client_cert = true\n}\n", "/etc/tb/t.hcl")
	if !c.Insecure || *c.TLS != (auth.TLSFiles{CertFile: "/c.pem", KeyFile: "/etc/tb/k.pem", ClientCAFile: "/etc/tb/ca.pem", RequireClientCert: true}) {
		t.Fatalf("insecure %v, tls %+v", c.Insecure, c.TLS)
	}
	const hash = `"$2a$04$0123456789012345678901uRJyCLAbcVf7wR5f1R2iS6YmvJUMSxi"`
	for _, c := range []struct{ name, src, want string }{
		{"tls without key", "tls {\n  cert_file = \"c.pem\"\n}\n", "t.hcl:1,1-4: Incomplete tls block"},
		{"require without CA", "tls {\n  cert_file = \"c\"\n  key_file = \"k\"\n  require_client_cert = true\n}\n", "t.hcl:4,25-29: Missing client_ca_file"},
		{"insecure as a string", "insecure = \"yes\"\n", "t.hcl:1,12-17: Wrong type for insecure"},
		{"user without credentials", "user \"a\" {\n  admin = true\n}\n", "t.hcl:1,1-9: Invalid user; user \"a\" has no way to authenticate"},
		{"bad token hash", "user \"a\" {\n  token_hash = \"secret\"\n}\n", "t.hcl:2,16-24: Invalid token_hash"},
		{"bad certificate", "user \"a\" {\n  certificate = \"alice\"\n}\n", "t.hcl:2,17-24: Invalid certificate"},
		{"bad pattern", "user \"a\" {\n  certificate = \"CN=a\"\n  publish {\n    allow = [\"a.>.b\"]\n  }\n}\n", "t.hcl:4,14-21: Invalid allow"},
		{"unknown rule", "user \"a\" {\n  certificate = \"CN=a\"\n  publish {\n    permit = [\"a\"]\n  }\n}\n", "t.hcl:4,5-11: Unsupported argument"},
		{"unknown limit", "user \"a\" {\n  certificate = \"CN=a\"\n  limits {\n    max_bytes = 1\n  }\n}\n", "t.hcl:4,5-14: Unsupported argument"},
		{"duplicate user", "user \"a\" {\n  token_hash = " + hash + "\n}\nuser \"a\" {\n  token_hash = " + hash + "\n}\n", "t.hcl:4,6-9: Duplicate user"},
		{"duplicate certificate", "user \"a\" {\n  certificate = \"CN=x\"\n}\nuser \"b\" {\n  certificate = \"CN=x\"\n}\n", "t.hcl:5,17-23: Duplicate certificate"},
		{"bad emit_topics", "plugin \"p\" {\n  path = \"x.wasm\"\n  emit_topics = [\">.a\"]\n}\n", "t.hcl:3,18-23: Invalid emit_topics"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.src), "t.hcl")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse = %v\nwant it to contain %q", err, c.want)
			}
		})
	}
}
