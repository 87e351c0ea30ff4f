package config

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// The engine block chooses the message engine: `engine "memory" {}` (the default, the same
// as no block) or `engine "jetstream" { ... }`:
//
//	engine "jetstream" {
//	  data_dir = "/var/lib/tinybroker"  # an embedded NATS server keeps its files here (relative to this file)
//	  # url    = "nats://n1:4222,nats://n2:4222"  # or: an existing NATS cluster, instead of data_dir
//	  # credentials = "tinybroker.creds"   # url only: a NATS credentials file
//	  # tls_ca_file = "ca.pem"             # url only: verify the NATS servers with these CAs
//	  # tls_cert_file = "client.pem"       # url only: a client certificate for NATS
//	  # tls_key_file  = "client-key.pem"
//	  replicas = 1                        # of the stream and consumers: 1, or 3 in a cluster
//	  storage  = "file"                   # or "memory": not kept across a restart (replicas still apply)
//	  max_bytes = "10GiB"                 # bounds what the consumer groups hold; past it publishes are refused (default: JetStream's own limits)
//	  prefix   = "tb"                     # NATS subjects: <prefix>.f.<topic>, <prefix>.g.<topic>
//	  stream   = "TB"                     # the JetStream stream of the consumer groups
//	  nats_listen = "127.0.0.1:4222"      # embedded only: also serve NATS clients here
//	  server_name = "node1"              # embedded only: unique in the cluster
//	  cluster {                           # embedded only: form a cluster with other tinybroker nodes
//	    name   = "tinybroker"
//	    listen = "0.0.0.0:6222"
//	    routes = ["node1:6222", "node2:6222", "node3:6222"]
//	  }
//	}

// Engine names.
const (
	EngineMemory    = "memory"
	EngineJetStream = "jetstream"
)

// JetStream configures the JetStream engine (engine "jetstream").
type JetStream struct {
	DataDir                            string // embedded: JetStream's files; made relative to the file's folder
	URL                                string // external NATS instead of an embedded server
	Credentials                        string // external: a credentials file
	TLSCAFile, TLSCertFile, TLSKeyFile string // external: TLS to NATS
	Replicas                           int    // 1
	MemoryStorage                      bool   // storage = "memory" (default "file")
	MaxBytes                           int64  // max_bytes of the stream (0: JetStream's own limits)
	Prefix, Stream                     string // "tb", "TB"
	NATSListen                         string // embedded: also serve NATS clients
	ServerName                         string // embedded: the server's name
	ClusterName, ClusterListen         string // embedded: the cluster
	Routes                             []string
}

var jetStreamSection = section{
	attrs: []attribute{
		pathAttr("data_dir", func(c *Config) *string { return &c.JetStream.DataDir }),
		stringAttr("url", "a NATS URL such as \"nats://127.0.0.1:4222\"", func(c *Config) *string { return &c.JetStream.URL }),
		pathAttr("credentials", func(c *Config) *string { return &c.JetStream.Credentials }),
		pathAttr("tls_ca_file", func(c *Config) *string { return &c.JetStream.TLSCAFile }),
		pathAttr("tls_cert_file", func(c *Config) *string { return &c.JetStream.TLSCertFile }),
		pathAttr("tls_key_file", func(c *Config) *string { return &c.JetStream.TLSKeyFile }),
		positiveIntAttr("replicas", func(c *Config) *int { return &c.JetStream.Replicas }),
		enumAttr("storage", storageChoices, func(c *Config) *bool { return &c.JetStream.MemoryStorage }),
		sizeAttr("max_bytes", func(c *Config) *int64 { return &c.JetStream.MaxBytes }),
		stringAttr("prefix", "a NATS subject prefix such as \"tb\"", func(c *Config) *string { return &c.JetStream.Prefix }),
		stringAttr("stream", "a JetStream stream name such as \"TB\"", func(c *Config) *string { return &c.JetStream.Stream }),
		listenAttr("nats_listen", func(c *Config) *string { return &c.JetStream.NATSListen }),
		stringAttr("server_name", "a name for this NATS server", func(c *Config) *string { return &c.JetStream.ServerName }),
	},
	blocks: []blockType{{name: "cluster", decode: sectionBlock(clusterSection)}},
}

// storageChoices: where JetStream keeps the stream and the consumers' state (false: files).
var storageChoices = []choice[bool]{
	{"file", false},
	{"memory", true},
}

var clusterSection = section{
	attrs: []attribute{
		stringAttr("name", "a cluster name", func(c *Config) *string { return &c.JetStream.ClusterName }),
		listenAttr("listen", func(c *Config) *string { return &c.JetStream.ClusterListen }),
		stringListAttr("routes", func(s string) string {
			if _, _, err := net.SplitHostPort(strings.TrimPrefix(s, "nats://")); err != nil {
				return fmt.Sprintf("route %q is not host:port (the cluster listen address of another node)", s)
			}
			return ""
		}, func(c *Config) *[]string { return &c.JetStream.Routes }),
	},
}

// decodeEngine decodes the engine block.
func decodeEngine(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	kind := b.Labels[0]
	switch kind {
	case EngineMemory:
		d.cfg.Engine = kind
		return d.section(b.Body, section{}, path)
	case EngineJetStream:
	default:
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unknown engine",
			Detail: fmt.Sprintf("engine %q is not an engine of tinybroker; use \"memory\" (the default) or \"jetstream\".", kind), Subject: b.LabelRanges[0].Ptr()}}
	}
	d.cfg.Engine = kind
	path = "engine"
	diags := d.section(b.Body, jetStreamSection, path)
	if diags.HasErrors() {
		return diags
	}
	j := &d.cfg.JetStream
	bad := func(at *hcl.Range, summary, detail string) hcl.Diagnostics {
		if at == nil {
			at = b.DefRange.Ptr()
		}
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: at})
	}
	embedded := j.URL == ""
	switch {
	case j.URL != "" && j.DataDir != "":
		return bad(d.rangeOf(path+".url"), "Both url and data_dir",
			"engine \"jetstream\" takes url (an existing NATS server) or data_dir (a NATS server embedded in tinybroker), not both.")
	case embedded && j.DataDir == "":
		return bad(nil, "Missing data_dir",
			"engine \"jetstream\" needs data_dir = \"...\" (where the embedded NATS server keeps its files) or url = \"nats://...\" (an existing NATS server).")
	case !embedded && (j.NATSListen != "" || j.ServerName != "" || j.ClusterListen != "" || len(j.Routes) > 0):
		return bad(d.rangeOf(path+".nats_listen", path+".server_name", path+".cluster.listen", path+".cluster.routes"), "Setting of the embedded server with url",
			"nats_listen, server_name and cluster configure the NATS server tinybroker embeds; with url, configure your NATS servers themselves.")
	case embedded && (j.Credentials != "" || j.TLSCAFile != "" || j.TLSCertFile != "" || j.TLSKeyFile != ""):
		return bad(d.rangeOf(path+".credentials", path+".tls_ca_file", path+".tls_cert_file", path+".tls_key_file"), "Setting of an external server with data_dir",
			"credentials and tls_* are how tinybroker connects to an external NATS server (url); the embedded one is reached in-process.")
	case (j.TLSCertFile == "") != (j.TLSKeyFile == ""):
		return bad(d.rangeOf(path+".tls_cert_file", path+".tls_key_file"), "Incomplete client certificate",
			"tls_cert_file and tls_key_file go together.")
	case j.Replicas > 5:
		return bad(d.rangeOf(path+".replicas"), "Invalid replicas", fmt.Sprintf("replicas is %d; JetStream keeps 1 to 5 copies (1, or 3 in a cluster of three).", j.Replicas))
	case embedded && j.Replicas > 1 && j.ClusterListen == "":
		return bad(d.rangeOf(path+".replicas"), "Replicas without a cluster",
			fmt.Sprintf("replicas = %d needs a cluster of at least %d nodes: add a cluster block (listen, routes), or set replicas = 1.", j.Replicas, j.Replicas))
	case embedded && len(j.Routes) > 0 && j.ClusterListen == "":
		return bad(d.rangeOf(path+".cluster.routes"), "Routes without a cluster listen address",
			"cluster needs listen = \"host:port\": where the other nodes' routes reach this one.")
	}
	if j.Replicas == 0 {
		j.Replicas = 1
	}
	for _, f := range []*string{&j.DataDir, &j.Credentials, &j.TLSCAFile, &j.TLSCertFile, &j.TLSKeyFile} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(d.dir, *f)
		}
	}
	if j.Stream != "" && strings.ContainsAny(j.Stream, ".*> \t/\\") {
		return bad(d.rangeOf(path+".stream"), "Invalid stream", "a JetStream stream name may not contain '.', '*', '>', spaces or slashes.")
	}
	if j.Prefix != "" {
		if strings.ContainsAny(j.Prefix, "*> \t") || strings.HasPrefix(j.Prefix, "$") || strings.HasPrefix(j.Prefix, "_") || strings.HasPrefix(j.Prefix, ".") || strings.HasSuffix(j.Prefix, ".") {
			return bad(d.rangeOf(path+".prefix"), "Invalid prefix", "prefix is the start of NATS subjects: tokens without '*', '>', spaces, and not starting with '$' or '_' (NATS's own subjects).")
		}
	}
	return diags
}
