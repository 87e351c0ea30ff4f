// Command tenant-filter is a tinybroker plugin that drops every published message whose
// "tenant" header is not in the allow-list of its configuration (config key "allow", a
// comma-separated list of tenants). A message with no tenant header is dropped too.
package main

import (
	"errors"
	"strings"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
)

// allowed holds the tenants of the "allow" configuration key.
var allowed map[string]bool

func init() {
	plugin.Init(configure)
	onpublish.Handle(filter)
}

func configure(cfg map[string]string) error {
	list, ok := cfg["allow"]
	if !ok {
		return errors.New(`tenant-filter: set "allow" in the plugin's config block to a comma-separated list of tenants`)
	}
	allowed = parseAllowList(list)
	if len(allowed) == 0 {
		plugin.Log(plugin.LevelWarn, "tenant-filter: the allow-list is empty: every message will be dropped")
	}
	return nil
}

// parseAllowList splits a comma-separated list, trimming spaces and skipping empty items.
func parseAllowList(list string) map[string]bool {
	set := make(map[string]bool)
	for t := range strings.SplitSeq(list, ",") {
		if t = strings.TrimSpace(t); t != "" {
			set[t] = true
		}
	}
	return set
}

func filter(m *plugin.Message) plugin.Verdict {
	tenant, ok := m.Header("tenant")
	if !ok {
		return plugin.Drop("no tenant header")
	}
	if !allowed[tenant] {
		return plugin.Drop("tenant " + tenant + " is not allowed")
	}
	return plugin.Pass()
}

func main() {}
