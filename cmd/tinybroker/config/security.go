package config

import (
	"fmt"
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/crypto/bcrypt"

	"github.com/tinybroker/tinybroker/server/auth"
)

// The security settings: `tls { ... }`, `user "name" { ... }` (any number) and
// `insecure = true`. See README.md, "Securing tinybroker".

var tlsSection = section{
	attrs: []attribute{
		pathAttr("cert_file", func(c *Config) *string { return &c.TLS.CertFile }),
		pathAttr("key_file", func(c *Config) *string { return &c.TLS.KeyFile }),
		pathAttr("client_ca_file", func(c *Config) *string { return &c.TLS.ClientCAFile }),
		boolAttr("require_client_cert", func(c *Config) *bool { return &c.TLS.RequireClientCert }),
	},
}

func decodeTLS(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	d.cfg.TLS = &auth.TLSFiles{}
	diags := d.section(b.Body, tlsSection, path)
	t := d.cfg.TLS
	switch {
	case diags.HasErrors():
		return diags
	case t.CertFile == "" || t.KeyFile == "":
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Incomplete tls block",
			Detail: "tls needs cert_file and key_file: the server's certificate (chain) and its private key, PEM files relative to this file's folder.", Subject: b.DefRange.Ptr()})
	case t.RequireClientCert && t.ClientCAFile == "":
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing client_ca_file",
			Detail: "require_client_cert needs client_ca_file: the CAs whose certificates clients must present.", Subject: d.rangeOf(path + ".require_client_cert")})
	}
	for _, f := range []*string{&t.CertFile, &t.KeyFile, &t.ClientCAFile} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(d.dir, *f)
		}
	}
	return diags
}

func lastUser(c *Config) *auth.User { return &c.Users[len(c.Users)-1] }

var userSection = section{
	attrs: []attribute{
		{name: "token_hash", decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
			var s string
			if diags := decodeString(name, "a bcrypt hash in quotes, from `tinybroker passwd`", expr, &s); diags.HasErrors() {
				return diags
			}
			if _, err := bcrypt.Cost([]byte(s)); err != nil {
				return invalid(expr, "Invalid token_hash", "token_hash is not a bcrypt hash (%v); make one with `tinybroker passwd`, which reads the token from the terminal.", err)
			}
			lastUser(c).TokenHash = s
			return nil
		}},
		{name: "certificate", decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
			var s string
			if diags := decodeString(name, `a certificate identity in quotes, e.g. "CN=alice"`, expr, &s); diags.HasErrors() {
				return diags
			}
			if err := auth.CheckCertificateName(s); err != nil {
				return invalid(expr, "Invalid certificate", "%v.", err)
			}
			lastUser(c).Certificate = s
			return nil
		}},
		boolAttr("admin", func(c *Config) *bool { return &lastUser(c).Admin }),
	},
	blocks: []blockType{
		{name: "publish", decode: sectionBlock(rulesSection(func(u *auth.User) *auth.Rules { return &u.Publish }))},
		{name: "subscribe", decode: sectionBlock(rulesSection(func(u *auth.User) *auth.Rules { return &u.Subscribe }))},
		{name: "groups", decode: sectionBlock(rulesSection(func(u *auth.User) *auth.Rules { return &u.Groups }))},
		{name: "limits", decode: sectionBlock(userLimitsSection)},
	},
}

func rulesSection(rules func(*auth.User) *auth.Rules) section {
	return section{attrs: []attribute{
		stringListAttr("allow", patternProblem, func(c *Config) *[]string { return &rules(lastUser(c)).Allow }),
		stringListAttr("deny", patternProblem, func(c *Config) *[]string { return &rules(lastUser(c)).Deny }),
	}}
}

var userLimitsSection = section{
	attrs: []attribute{
		positiveIntAttr("max_connections", func(c *Config) *int { return &lastUser(c).Limits.MaxConnections }),
		positiveIntAttr("max_streams", func(c *Config) *int { return &lastUser(c).Limits.MaxStreams }),
		positiveIntAttr("max_subscriptions", func(c *Config) *int { return &lastUser(c).Limits.MaxSubscriptions }),
		positiveIntAttr("max_groups", func(c *Config) *int { return &lastUser(c).Limits.MaxGroups }),
		sizeAttr("max_queued_bytes", func(c *Config) *int64 { return &lastUser(c).Limits.MaxQueuedBytes }),
	},
}

func decodeUser(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	name := b.Labels[0]
	if diags := declare(&d.cfg.Users, auth.User{Name: name}, func(u auth.User) string { return u.Name }, b, "user", "user"); diags != nil {
		return diags
	}
	diags := d.section(b.Body, userSection, path+"."+name)
	if diags.HasErrors() {
		return diags
	}
	u := lastUser(&d.cfg)
	if err := u.Check(); err != nil {
		return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid user",
			Detail: err.Error() + ".", Subject: b.DefRange.Ptr()})
	}
	for _, other := range d.cfg.Users[:len(d.cfg.Users)-1] {
		if u.Certificate != "" && other.Certificate == u.Certificate {
			return append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate certificate",
				Detail:  fmt.Sprintf("users %q and %q both have certificate %q; a certificate identifies one user.", other.Name, name, u.Certificate),
				Subject: d.rangeOf(path + "." + name + ".certificate")})
		}
	}
	return diags
}

// boolAttr is true or false, without quotes.
func boolAttr(name string, field func(*Config) *bool) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		return decodeValue(name, "true or false", expr, cty.Bool, field(c))
	}}
}
