package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release and commit the commit it was built from, set at build time with
// -ldflags "-X main.version=v1.2.3 -X main.commit=<sha>" (make build, make run); otherwise
// the module's version or "devel", and the commit Go's VCS stamping recorded, if any (none
// under -buildvcs=false, or outside a git checkout).
var version, commit = "", ""

type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	if v.Commit == "" {
		v.Commit = commit
	}
	return v
}

// versionString is `tinybroker --version`'s line.
func versionString() string {
	v := buildVersion()
	s := "tinybroker " + v.Version
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "+modified"
		}
		s += " (" + c + ")"
	}
	return s + " " + v.Go + " " + v.Platform
}

func (a *app) versionCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  noArgs(""),
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				b, err := json.MarshalIndent(buildVersion(), "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s\n", b)
				return err
			}
			_, err := fmt.Fprintln(a.stdout, versionString())
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) pluginCmd() *cobra.Command {
	return a.parent("plugin", "Test, start, deploy and list plugins",
		`WebAssembly routing plugins: test runs one on messages without a broker, new starts a project;
deploy, ls, pause, resume, rollback, rm and promote manage a running broker's plugins (admins
only).`,
		append([]*cobra.Command{a.pluginTestCmd(), a.pluginNewCmd()}, a.pluginLifecycleCmds()...)...)
}
