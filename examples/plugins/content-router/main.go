// Command content-router is a tinybroker plugin that re-routes urgent orders: a message
// published on orders.X (exactly two tokens) with the header priority=high goes to
// orders.priority.X instead. Every other message passes unchanged.
package main

import (
	"strings"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
)

func init() { onpublish.Handle(route) }

func route(m *plugin.Message) plugin.Verdict {
	if p, _ := m.Header("priority"); p != "high" {
		return plugin.Pass()
	}
	to, ok := priorityTopic(m.Topic())
	if !ok {
		return plugin.Pass()
	}
	if err := m.SetTopic(to); err != nil {
		// Cannot happen for a valid orders.X, but say so rather than fail silently.
		plugin.Log(plugin.LevelWarn, "content-router: "+err.Error())
	}
	return plugin.Pass()
}

// priorityTopic maps orders.X to orders.priority.X; ok is false for any other topic.
func priorityTopic(topic string) (to string, ok bool) {
	x, ok := strings.CutPrefix(topic, "orders.")
	if !ok || x == "" || strings.Contains(x, ".") {
		return "", false
	}
	return "orders.priority." + x, true
}

func main() {}
