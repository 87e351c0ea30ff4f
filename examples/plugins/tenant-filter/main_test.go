package main

import (
	"maps"
	"testing"
)

func TestParseAllowList(t *testing.T) {
	got := parseAllowList(" acme, globex ,,initech,")
	want := map[string]bool{"acme": true, "globex": true, "initech": true}
	if !maps.Equal(got, want) {
		t.Errorf("parseAllowList = %v, want %v", got, want)
	}
	if got := parseAllowList(""); len(got) != 0 {
		t.Errorf(`parseAllowList("") = %v, want empty`, got)
	}
}
