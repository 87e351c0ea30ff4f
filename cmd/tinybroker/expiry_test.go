package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
)

// A group declared with max_age and on_expire has them from start-up: DescribeGroup (groups
// show, --json and text) reports them; a group without them says it dead-letters.
func TestServeDeclaredExpiry(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, stop := serveWithConfig(t, "group \"billing\" {\n  topics = [\"pay.>\"]\n  max_age = \"90s\"\n  on_expire = \"drop\"\n}\ngroup \"plain\" {\n  topics = [\"p.>\"]\n}\n")
	defer stop()
	var g adminpb.Group
	fromJSON(t, ok(t, "groups", "show", "--json", "--addr", addr.String(), "billing"), &g)
	if s := g.GetSettings(); s.GetMaxAge().AsDuration() != 90*time.Second || s.GetOnExpire() != "drop" {
		t.Fatalf("declared group: %v, want max_age 90s, on_expire drop", &g)
	}
	if out := ok(t, "groups", "show", "--addr", addr.String(), "billing"); !strings.Contains(out, "max age:") || !strings.Contains(out, "1m30s (then drop)") {
		t.Fatalf("groups show:\n%s\nwant a max age line", out)
	}
	fromJSON(t, ok(t, "groups", "show", "--json", "--addr", addr.String(), "plain"), &g)
	if s := g.GetSettings(); s.GetMaxAge() != nil || s.GetOnExpire() != "dead_letter" {
		t.Fatalf("plain group: %v, want no max_age, on_expire dead_letter", &g)
	}
}
