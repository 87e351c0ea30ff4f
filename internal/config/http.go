package config

import (
	"net"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// HTTP configures the ops HTTP listener: metrics, dashboard, profiling (package ops). It is
// off (Listen empty) unless the file has an http block or serve has --http-listen.
type HTTP struct {
	Listen      string // host:port; "127.0.0.1:7879" when the block leaves it out
	AllowRemote bool   // accept a non-loopback Listen (the listener has no authentication yet)
	// MetricsMaxGroups is how many groups get metrics of their own (1,000); the others are
	// summed under group="_other".
	MetricsMaxGroups int
}

// DefaultHTTPListen is the ops listener's address when an http block does not set one.
const DefaultHTTPListen = "127.0.0.1:7879"

var httpSection = section{
	attrs: []attribute{
		listenAttr("listen", func(c *Config) *string { return &c.HTTP.Listen }),
		boolAttr("allow_remote", func(c *Config) *bool { return &c.HTTP.AllowRemote }),
		positiveIntAttr("metrics_max_groups", func(c *Config) *int { return &c.HTTP.MetricsMaxGroups }),
	},
}

// decodeHTTP decodes the http block: its presence turns the listener on.
func decodeHTTP(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	d.cfg.HTTP.Listen = DefaultHTTPListen
	diags := d.section(b.Body, httpSection, path)
	if diags.HasErrors() || d.cfg.HTTP.AllowRemote || IsLoopback(d.cfg.HTTP.Listen) {
		return diags
	}
	return append(diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "HTTP listener not on loopback",
		Detail: "http listen " + d.cfg.HTTP.Listen + " is not a loopback address, and the HTTP listener has no authentication yet: anyone who reaches it could purge groups and replay dead letters. " +
			"Listen on 127.0.0.1 (reached through an SSH tunnel or an authenticating proxy), or set allow_remote = true in the http block to accept that.",
		Subject: d.rangeOf(path + ".listen"),
	})
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

func boolAttr(name string, field func(*Config) *bool) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		return decodeValue(name, "true or false", expr, cty.Bool, field(c))
	}}
}
