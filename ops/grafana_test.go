package ops_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

// Every metric the Grafana dashboard of examples/grafana queries is one the broker exports,
// under its current name.
func TestGrafanaDashboardMetrics(t *testing.T) {
	src, err := os.ReadFile("../examples/grafana/tinybroker.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(src, &dash); err != nil {
		t.Fatal(err)
	}
	s := start(t, stackOptions{plugins: []plugins.Spec{{Name: "pass", Wasm: wasm(t, "pass")}}})
	if err := s.b.Declare(broker.GroupConfig{Name: "g", Patterns: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	mfs := s.scrape(t)
	name := regexp.MustCompile(`\b(tinybroker|go|process)_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			for _, m := range name.FindAllString(target.Expr, -1) {
				n++
				family := m
				if mfs[m] == nil {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if f := strings.TrimSuffix(m, suffix); f != m && mfs[f] != nil {
							family = f
						}
					}
				}
				if mfs[family] == nil {
					t.Errorf("panel %q queries %s, which /metrics does not export", p.Title, m)
				} else if strings.HasPrefix(mfs[family].GetHelp(), "Deprecated") {
					t.Errorf("panel %q queries %s, a deprecated name: %s", p.Title, m, mfs[family].GetHelp())
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d metric references found in the dashboard", n)
	}
}
