// Command w4-filter is workload W4's filter plugin: it reads one header and passes the message.
package main

import (
	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
)

func init() {
	onpublish.Handle(func(m *plugin.Message) plugin.Verdict {
		if t, ok := m.Header("tenant"); ok && t == "blocked" {
			return plugin.Drop("blocked tenant")
		}
		return plugin.Pass()
	})
}

func main() {}
