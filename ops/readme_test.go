package ops_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// readmeMetric is a row of README.md's table of metrics.
type readmeMetric struct {
	typ    string
	labels []string
}

// readmeTable returns the rows of the table of README.md whose header is header, by the
// name in backquotes in their first cell, with their second and third cells.
func readmeTable(t *testing.T, header string) map[string]readmeMetric {
	t.Helper()
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), header+"\n")
	if !ok {
		t.Fatalf("README.md has no table headed %q", header)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	quoted := regexp.MustCompile("`([^`]+)`")
	rows := make(map[string]readmeMetric)
	for _, line := range strings.Split(table, "\n")[1:] { // past the |---| line
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 2 {
			t.Fatalf("README.md: a row of %d cells: %q", len(cells), line)
		}
		name := quoted.FindStringSubmatch(cells[0])
		if name == nil {
			t.Fatalf("README.md: a row without a `name`: %q", line)
		}
		r := readmeMetric{typ: strings.TrimSpace(cells[1])}
		if len(cells) > 2 {
			for _, l := range quoted.FindAllStringSubmatch(cells[2], -1) {
				r.labels = append(r.labels, l[1])
			}
		}
		rows[name[1]] = r
	}
	return rows
}

// README.md lists every metric /metrics exports, with its type and labels, and no metric it
// does not export; deprecated names are in its table of renames.
func TestREADMEListsEveryMetric(t *testing.T) {
	rows := readmeTable(t, "| metric | type | labels | meaning |")
	renamed := readmeTable(t, "| old name | new name |")
	mfs := richStack(t).scrape(t)
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "tinybroker_") {
			continue
		}
		if _, ok := renamed[name]; ok {
			if !strings.HasPrefix(mf.GetHelp(), "Deprecated") {
				t.Errorf("%s is in README.md's renames but its help does not say it is deprecated: %q", name, mf.GetHelp())
			}
			continue
		}
		r, ok := rows[name]
		if !ok {
			t.Errorf("README.md's table of metrics does not list %s (%s)", name, mf.GetType())
			continue
		}
		if want := strings.ToLower(mf.GetType().String()); r.typ != want {
			t.Errorf("README.md says %s is a %q; it is a %s", name, r.typ, want)
		}
		if got := labelNames(mf); !slices.Equal(got, sorted(r.labels)) {
			t.Errorf("README.md says %s has labels %v; it has %v", name, r.labels, got)
		}
	}
	for name := range rows {
		if strings.HasPrefix(name, "tinybroker_") && mfs[name] == nil {
			t.Errorf("README.md lists %s, which /metrics does not export", name)
		}
	}
	for old, r := range renamed {
		if mfs[old] == nil {
			t.Errorf("README.md's renames list %s, which /metrics does not export (any more?)", old)
		}
		if to := strings.Trim(r.typ, "`"); rows[to].typ == "" { // the second cell: the new name
			t.Errorf("README.md renames %s to %s, which its table of metrics does not list", old, to)
		}
	}
}

// labelNames returns the names of the labels of mf's series, sorted.
func labelNames(mf *dto.MetricFamily) []string {
	var names []string
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if !slices.Contains(names, l.GetName()) {
				names = append(names, l.GetName())
			}
		}
	}
	return sorted(names)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
