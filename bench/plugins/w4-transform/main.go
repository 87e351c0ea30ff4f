// Command w4-transform is workload W4's transform plugin: it adds a header.
package main

import (
	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
)

func init() {
	onpublish.Handle(func(m *plugin.Message) plugin.Verdict {
		if err := m.SetHeader("x-w4", "1"); err != nil {
			plugin.Logf(plugin.LevelError, "w4-transform: %v", err)
		}
		return plugin.Pass()
	})
}

func main() {}
