package main

// The Debian package of a linux release: the binary, a config for the service, a hardened
// systemd unit and the maintainer scripts that create (and on purge remove) its user, all
// from internal/release/debian. Written by nfpm as a library (RATIONALE.md, "Why nfpm for
// the Debian package?").

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// debianDir holds the package's own files, relative to the repository's root (where make
// release runs, as for docs).
const debianDir = "internal/release/debian"

// debMaintainer is the package's Maintainer field: the maintainers' address as the
// repository's commits give it.
const debMaintainer = "tinybroker maintainers <maintainers@users.noreply.a-seed-af53cab5.example>"

// debContents are what the package installs: source (relative to the repository's root, "bin"
// for the binary), destination, nfpm type and mode.
var debContents = []struct {
	src, dst, typ string
	mode          os.FileMode
}{
	{"bin", "/usr/bin/tinybroker", files.TypeFile, 0o755},
	// A conffile; the postinst's statoverride makes it root:tinybroker.
	{debianDir + "/tinybroker.hcl", "/etc/tinybroker/tinybroker.hcl", files.TypeConfigNoReplace, 0o640},
	{debianDir + "/tinybroker.service", "/lib/systemd/system/tinybroker.service", files.TypeFile, 0o644},
	{"examples/config/tinybroker.hcl", "/usr/share/doc/tinybroker/examples/tinybroker.hcl", files.TypeFile, 0o644},
	{"README.md", "/usr/share/doc/tinybroker/README.md", files.TypeFile, 0o644},
	{"CHANGELOG.md", "/usr/share/doc/tinybroker/CHANGELOG.md", files.TypeFile, 0o644},
}

// addDeb writes dist's tinybroker_<version>_<arch>.deb from the linux binary bin, and adds
// its checksum to sums.
func addDeb(out, version, goarch, bin string, sums map[string]string) error {
	path := filepath.Join(out, fmt.Sprintf("tinybroker_%s_%s.deb", strings.TrimPrefix(version, "v"), goarch))
	if err := writeDeb(path, version, goarch, bin); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	sum, err := sha256File(path)
	if err != nil {
		return err
	}
	sums[filepath.Base(path)] = sum
	fmt.Println(path)
	return nil
}

func writeDeb(path, version, goarch, bin string) error {
	var contents files.Contents
	for _, c := range debContents {
		src := c.src
		if src == "bin" {
			src = bin
		}
		contents = append(contents, &files.Content{Source: src, Destination: c.dst, Type: c.typ,
			FileInfo: &files.ContentFileInfo{Mode: c.mode, Owner: "root", Group: "root"}})
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "tinybroker",
		Arch:          goarch,
		Platform:      "linux",
		Version:       debVersion(version),
		VersionSchema: "none", // debVersion has made it a Debian version already
		Section:       "net",
		Priority:      "optional",
		Maintainer:    debMaintainer,
		Homepage:      "https://github.com/tinybroker/tinybroker",
		Description: "message broker spoken to over gRPC, with Wasm plugins\n" +
			"tinybroker keeps topics, fanout subscriptions and balanced consumer groups in\n" +
			"memory or on NATS JetStream. The package installs a systemd unit,\n" +
			"tinybroker.service, which it does not enable or start.",
		MTime: time.Unix(0, 0),
		Overridables: nfpm.Overridables{
			Depends:  []string{"passwd"}, // useradd, groupadd, userdel
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(debianDir, "postinst"),
				PreRemove:   filepath.Join(debianDir, "prerm"),
				PostRemove:  filepath.Join(debianDir, "postrm"),
			},
		},
	})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := deb.Default.Package(info, f); err != nil {
		return err
	}
	return f.Close()
}

var (
	// describeTail is what git describe adds past a tag: commits since it and the commit.
	describeTail = regexp.MustCompile(`-([0-9]+)-(g[0-9a-f]+)$`)
	tagVersion   = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)
	notDebian    = regexp.MustCompile(`[^A-Za-z0-9.+~]+`)
)

// debVersion turns make release's version (git describe --tags --always --dirty) into a
// Debian version that sorts as it should: v1.2.3 is 1.2.3, a pre-release v1.2.3-rc.1 comes
// before it (1.2.3~rc.1), a build past the tag after it (1.2.3+5.gabc1234, .dirty if so), and
// a version that is no tag (a bare commit, "devel") before every release (0~abc1234).
func debVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	var after []string
	dirty := strings.HasSuffix(v, "-dirty")
	v = strings.TrimSuffix(v, "-dirty")
	if m := describeTail.FindStringSubmatch(v); m != nil {
		v = strings.TrimSuffix(v, m[0])
		after = append(after, m[1], m[2])
	}
	if dirty {
		after = append(after, "dirty")
	}
	clean := func(s string) string { return strings.Trim(notDebian.ReplaceAllString(s, "."), ".") }
	base, pre, _ := strings.Cut(v, "-")
	if !tagVersion.MatchString(base) {
		base, pre = "0", v
	}
	out := base
	if pre = clean(pre); pre != "" {
		out += "~" + pre
	}
	if len(after) > 0 {
		out += "+" + strings.Join(after, ".")
	}
	return out
}
