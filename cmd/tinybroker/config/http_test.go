package config

import (
	"strings"
	"testing"
	"time"
)

func TestHTTPBlock(t *testing.T) {
	if c := Default(); c.HTTP.Listen != "" {
		t.Fatalf("the HTTP listener is on by default: %q", c.HTTP.Listen)
	}
	c := mustParse(t, "http {}\n", "t.hcl")
	if c.HTTP.Listen != DefaultHTTPListen || c.HTTP.AllowRemote || c.HTTP.MetricsMaxGroups != 1000 {
		t.Errorf("http {} = %+v; want listen %s, allow_remote false, metrics_max_groups 1000", c.HTTP, DefaultHTTPListen)
	}
	c = mustParse(t, "http {\n  listen = \"[::1]:9000\"\n  metrics_max_groups = 5\n  stuck_after = \"30s\"\n}\n", "t.hcl")
	if c.HTTP.Listen != "[::1]:9000" || c.HTTP.MetricsMaxGroups != 5 || c.HTTP.StuckAfter != 30*time.Second {
		t.Errorf("http = %+v", c.HTTP)
	}
	if c, err := Parse([]byte("http {\n  listen = \"0.0.0.0:9000\"\n  allow_remote = true\n}\n"), "t.hcl"); err != nil || c.HTTP.Listen != "0.0.0.0:9000" || !c.HTTP.AllowRemote {
		t.Errorf("allow_remote: %+v, %v", c.HTTP, err)
	}
}

func TestHTTPBlockErrors(t *testing.T) {
	for src, want := range map[string]string{
		"http {\n  listen = \"0.0.0.0:7879\"\n}\n":   "t.hcl:2,12-26: HTTP listener not on loopback; http listen 0.0.0.0:7879 is not a loopback address",
		"http {\n  listen = \":7879\"\n}\n":          "HTTP listener not on loopback",
		"http {\n  allow_remote = \"yes\"\n}\n":      "allow_remote must be true or false",
		"http {}\nhttp {}\n":                         "Duplicate http block",
		"http {\n  listen = \"localhost\"\n}\n":      "Invalid listen address",
		"http {\n  metrics_max_groups = 0\n}\n":      "metrics_max_groups must be greater than zero",
		"http {\n  stuck_after = \"0s\"\n}\n":        "stuck_after must be greater than zero",
		"http {\n  listen = \"127.0.0.1:7879\"\n}\n": "",
		"http {\n  listen = \"0.0.0.0:7879\"\n}\nuser \"ops\" {\n  certificate = \"CN=ops\"\n  admin = true\n}\n": "", // users authenticate it
	} {
		_, err := Parse([]byte(src), "t.hcl")
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", src, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v; want it to contain %q", src, err, want)
		}
	}
}
