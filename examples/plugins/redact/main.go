// Command redact is a tinybroker plugin that redacts JSON payloads: in a published message
// whose payload is a JSON object, the values of the top-level fields named by the config key
// "fields" (a comma-separated list) are replaced by the string "[REDACTED]". The rest of the
// payload is kept byte for byte: key order, spacing and nested values are untouched.
//
// A payload that is not a JSON object is rejected (INVALID_ARGUMENT) unless the config key
// "invalid" says "drop" (drop it) or "pass" (let it through unchanged).
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
)

var (
	fields    map[string]bool // the top-level fields to redact
	onInvalid = "reject"      // what to do with a payload that is not a JSON object
)

func init() {
	plugin.Init(configure)
	onpublish.Handle(redactMessage)
}

func configure(cfg map[string]string) error {
	fields = make(map[string]bool)
	for f := range strings.SplitSeq(cfg["fields"], ",") {
		if f = strings.TrimSpace(f); f != "" {
			fields[f] = true
		}
	}
	if len(fields) == 0 {
		return errors.New(`redact: set "fields" in the plugin's config block to a comma-separated list of top-level JSON fields`)
	}
	if v, ok := cfg["invalid"]; ok {
		if v != "reject" && v != "drop" && v != "pass" {
			return errors.New("redact: invalid = " + strconv.Quote(v) + `: use "reject", "drop" or "pass"`)
		}
		onInvalid = v
	}
	return nil
}

func redactMessage(m *plugin.Message) plugin.Verdict {
	out, n, err := redact(m.Payload(), fields)
	if err != nil {
		why := "payload is not a JSON object: " + err.Error()
		switch onInvalid {
		case "pass":
			return plugin.Pass()
		case "drop":
			return plugin.Drop(why)
		default:
			return plugin.Reject(plugin.InvalidArgument, why)
		}
	}
	if n == 0 {
		return plugin.Pass() // nothing to redact: leave the payload alone
	}
	if err := m.SetPayload(out); err != nil {
		// "[REDACTED]" can make a payload longer than it was, and over max_message_bytes.
		return plugin.Reject(plugin.InvalidArgument, "redacted payload: "+err.Error())
	}
	return plugin.Pass()
}

func main() {}
