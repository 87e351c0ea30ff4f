package config

import (
	"net"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// HTTP configures the ops HTTP listener: metrics, dashboard, profiling (package ops). It is
// off (Listen empty) unless the file has an http block or serve has --http-listen.
type HTTP struct {
	Listen      string // host:port; "127.0.0.1:7879" when the block leaves it out
	AllowRemote bool   // accept a non-loopback Listen without users to authenticate requests
	// MetricsMaxGroups is how many groups get metrics of their own (1,000); the others are
	// summed under group="_other".
	MetricsMaxGroups int
	// StuckAfter is how long a consumer group may have messages queued, members with room
	// and deliver nothing before it is reported stuck (1m; ops.Options.StuckAfter).
	StuckAfter time.Duration
}

// DefaultHTTPListen is the ops listener's address when an http block does not set one.
const DefaultHTTPListen = "127.0.0.1:7879"

var httpSection = section{
	attrs: []attribute{
		listenAttr("listen", func(c *Config) *string { return &c.HTTP.Listen }),
		boolAttr("allow_remote", func(c *Config) *bool { return &c.HTTP.AllowRemote }),
		positiveIntAttr("metrics_max_groups", func(c *Config) *int { return &c.HTTP.MetricsMaxGroups }),
		durationAttr("stuck_after", func(c *Config) *time.Duration { return &c.HTTP.StuckAfter }),
	},
}

// decodeHTTP decodes the http block: its presence turns the listener on.
func decodeHTTP(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	d.cfg.HTTP.Listen = DefaultHTTPListen
	return d.section(b.Body, httpSection, path)
}

// checkHTTP refuses a non-loopback http listen when nothing authenticates its requests: no
// users (who authenticate there as on the gRPC API) and no allow_remote.
func (d *decoder) checkHTTP() hcl.Diagnostics {
	h := d.cfg.HTTP
	if h.Listen == "" || h.AllowRemote || len(d.cfg.Users) > 0 || IsLoopback(h.Listen) {
		return nil
	}
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "HTTP listener not on loopback",
		Detail: "http listen " + h.Listen + " is not a loopback address, and no user is declared to authenticate its requests: anyone who reached it could purge groups and replay dead letters. " +
			"Listen on 127.0.0.1 (reached through an SSH tunnel), declare users (admins may use the HTTP listener), or set allow_remote = true in the http block to accept that.",
		Subject: d.rangeOf("http.listen"),
	}}
}

// IsLoopback reports whether the host of addr is localhost or a loopback IP address.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
