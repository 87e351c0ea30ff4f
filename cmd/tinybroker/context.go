package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Contexts, as the nats CLI has them: a named set of connection settings (the address list,
// TLS files, a token file) that every client command uses unless its flags or the environment
// say otherwise. Kept in the user's config folder ($XDG_CONFIG_HOME/tinybroker, or
// ~/.config/tinybroker): context/NAME.json, one per context, 0600, and context.txt, the name
// of the selected one. A context names a token file, never a token.

// contextEnv names the context to use instead of the selected one.
const contextEnv = "TINYBROKER_CONTEXT"

// brokerContext is one context's file.
type brokerContext struct {
	Description   string `json:"description,omitempty"`
	Addr          string `json:"addr,omitempty"`
	TLS           bool   `json:"tls,omitempty"`
	TLSCA         string `json:"tls_ca,omitempty"`
	TLSCert       string `json:"tls_cert,omitempty"`
	TLSKey        string `json:"tls_key,omitempty"`
	TLSServerName string `json:"tls_server_name,omitempty"`
	TokenFile     string `json:"token_file,omitempty"`
}

var contextName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$`)

func contextDir() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("contexts: %w (set XDG_CONFIG_HOME or HOME)", err)
	}
	return filepath.Join(dir, "tinybroker"), nil
}

func checkContextName(name string) error {
	if !contextName.MatchString(name) {
		return fmt.Errorf("context name %q: use letters, digits, '.', '_' and '-' (64 at most, not starting with '.')", name)
	}
	return nil
}

// contexts lists the contexts' names, sorted, and the selected one ("" if none).
func contexts() (names []string, selected string, err error) {
	dir, err := contextDir()
	if err != nil {
		return nil, "", err
	}
	files, err := filepath.Glob(filepath.Join(dir, "context", "*.json"))
	if err != nil {
		return nil, "", err
	}
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	slices.Sort(names)
	b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, "", err
	}
	return names, strings.TrimSpace(string(b)), nil
}

// loadContext reads context name; a missing one (or a name no context can have) is a usage
// error naming those there are.
func loadContext(name string) (brokerContext, error) {
	var c brokerContext
	if err := checkContextName(name); err != nil {
		return c, usageError{err: err}
	}
	dir, err := contextDir()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "context", name+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		names, _, _ := contexts()
		have := "there are none (tinybroker context add NAME --addr ...)"
		if len(names) > 0 {
			have = "there are " + strings.Join(names, ", ")
		}
		return c, usageError{err: fmt.Errorf("no context %q: %s", name, have)}
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("context %q (%s): %w", name, filepath.Join(dir, "context", name+".json"), err)
	}
	return c, nil
}

// writeFile0600 writes b to path through a temporary file, 0600, in a folder made 0700 (made
// so if it was there before: it lists the contexts and their files' paths).
func writeFile0600(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func selectContext(name string) error {
	if _, err := loadContext(name); err != nil {
		return err
	}
	dir, err := contextDir()
	if err != nil {
		return err
	}
	return writeFile0600(filepath.Join(dir, "context.txt"), []byte(name+"\n"))
}

// applyContext fills what the command's flags and the environment leave unset from the
// context of --context, TINYBROKER_CONTEXT or the selected one (none: nothing to do). Each
// setting on its own: a flag for one (--tls-server-name, say) keeps the context's others,
// except that the client certificate and its key go together, and --tls=false given on the
// command line takes no TLS from the context.
func (d *dialFlags) applyContext() error {
	if d.fs == nil || d.contextApplied {
		return nil
	}
	d.contextApplied = true
	if d.explicitContext && d.context == "" {
		return nil
	}
	name, selected := d.context, false
	if name == "" {
		name = d.getenv(contextEnv)
	}
	if name == "" {
		_, sel, err := contexts()
		if err != nil || sel == "" {
			return nil // no selected context (or no config folder): the defaults
		}
		name, selected = sel, true
	}
	c, err := loadContext(name)
	if err != nil {
		if selected {
			// Not the command line's mistake: exit 1, not 2.
			return fmt.Errorf("the selected context: %v (tinybroker context select another, or context rm it)", err)
		}
		return err
	}
	changed := func(names ...string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return d.fs.Changed(n) })
	}
	used := false
	fill := func(flag string, dst *string, v string) {
		if v != "" && !changed(flag) {
			*dst, used = v, true
		}
	}
	if f := d.fs.Lookup("addr"); f != nil && c.Addr != "" && !f.Changed && d.getenv("TINYBROKER_ADDR") == "" {
		if err := f.Value.Set(c.Addr); err != nil {
			return fmt.Errorf("context %q: addr: %w", name, err)
		}
	}
	if !changed("tls") || d.tls {
		if c.TLS && !changed("tls") {
			d.tls, used = true, true
		}
		fill("tls-ca", &d.ca, c.TLSCA)
		fill("tls-server-name", &d.server, c.TLSServerName)
		if !changed("tls-cert", "tls-key") {
			fill("tls-cert", &d.cert, c.TLSCert)
			fill("tls-key", &d.key, c.TLSKey)
		}
	}
	if !changed("token", "token-file") && d.getenv(tokenEnv) == "" {
		fill("token-file", &d.tokenFile, c.TokenFile)
	}
	if used {
		d.contextUsed = name
	}
	return nil
}

// contextNote adds to err, a TLS file or token file that could not be used, the context it
// came from, if one gave any: the error names the flag, which the command line may not have.
func (d *dialFlags) contextNote(err error) error {
	if err == nil || d.contextUsed == "" {
		return err
	}
	return fmt.Errorf("%w (TLS or token settings from context %q: tinybroker context show %s)", err, d.contextUsed, d.contextUsed)
}

func (a *app) contextCmd() *cobra.Command {
	var c brokerContext
	var sel bool
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Save connection settings under a name (replacing any of that name)",
		Long: `Saves an address list, TLS files and a token file under NAME, for every client command
(pub, sub, the admin commands, top, bench) to use when it is selected (context select) or
named (--context NAME, or TINYBROKER_CONTEXT). Flags and the environment (TINYBROKER_ADDR,
TINYBROKER_TOKEN) still win over it, setting by setting.

A context stores the paths of its files (TLS files, the token file), never their contents,
and never a token: --token is refused; put USER:TOKEN in a file only you can read and give
--token-file. File paths are saved absolute. The context's file is
$XDG_CONFIG_HOME/tinybroker/context/NAME.json (default ~/.config/tinybroker/...), 0600.`,
		Example: `  tinybroker context add prod --addr n1:7878,n2:7878,n3:7878 --tls-ca ca.pem --token-file ~/.secrets/alice.token --select
  tinybroker groups ls --context prod`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkContextName(args[0]); err != nil {
				return usagef(cmd, "%v", err)
			}
			if cmd.Flags().Changed("token") {
				return usagef(cmd, "a context keeps no token: put USER:TOKEN in a file (0600) and give --token-file")
			}
			for _, p := range []*string{&c.TLSCA, &c.TLSCert, &c.TLSKey, &c.TokenFile} {
				if *p != "" {
					abs, err := filepath.Abs(*p)
					if err != nil {
						return err
					}
					*p = abs
				}
			}
			if (c.TLSCert == "") != (c.TLSKey == "") {
				return usagef(cmd, "--tls-cert and --tls-key go together")
			}
			// A file not there yet is allowed (a certificate still to be issued), and named.
			for _, p := range []string{c.TLSCA, c.TLSCert, c.TLSKey, c.TokenFile} {
				if _, err := os.Stat(p); p != "" && err != nil {
					fmt.Fprintf(a.stderr, "note: %v; the context keeps the path\n", err)
				}
			}
			b, _ := json.MarshalIndent(c, "", "  ")
			dir, err := contextDir()
			if err != nil {
				return err
			}
			if err := writeFile0600(filepath.Join(dir, "context", args[0]+".json"), append(b, '\n')); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "saved context %s\n", args[0])
			if sel {
				if err := selectContext(args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "selected context %s\n", args[0])
			}
			return nil
		},
	}
	f := add.Flags()
	f.StringVar(&c.Addr, "addr", "", "broker address (`host:port`), or a cluster's nodes separated by commas (none saved: the client commands' default)")
	f.StringVar(&c.Description, "description", "", "what the context is for")
	f.BoolVar(&c.TLS, "tls", false, "connect over TLS, trusting the system's CAs (implied by the other --tls-* flags)")
	f.StringVar(&c.TLSCA, "tls-ca", "", "PEM `file` of the CA that signed the broker's certificate")
	f.StringVar(&c.TLSCert, "tls-cert", "", "PEM `file` of a client certificate (with --tls-key)")
	f.StringVar(&c.TLSKey, "tls-key", "", "PEM `file` of the client certificate's key")
	f.StringVar(&c.TLSServerName, "tls-server-name", "", "`name` the broker's certificate must have")
	f.StringVar(&c.TokenFile, "token-file", "", "`file` whose first line is USER:TOKEN (the context keeps its path, never the token)")
	f.String("token", "", "refused: a context keeps no token (use --token-file)")
	_ = f.MarkHidden("token")
	f.BoolVar(&sel, "select", false, "select the context once saved")

	var asJSON bool
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the contexts, the selected one marked *",
		Args:    noArgs(""),
		RunE: func(*cobra.Command, []string) error {
			names, selected, err := contexts()
			if err != nil {
				return err
			}
			if asJSON {
				type entry struct {
					Name     string `json:"name"`
					Selected bool   `json:"selected"`
					brokerContext
				}
				out := []entry{}
				for _, n := range names {
					c, err := loadContext(n)
					if err != nil {
						return err
					}
					out = append(out, entry{n, n == selected, c})
				}
				return json.NewEncoder(a.stdout).Encode(out)
			}
			tw := a.listing(len(names), "no contexts (tinybroker context add NAME --addr ...)", "\tNAME\tADDR\tTLS\tTOKEN FILE\tDESCRIPTION")
			if tw == nil {
				return nil
			}
			for _, n := range names {
				c, err := loadContext(n)
				if err != nil {
					return err
				}
				mark := ""
				if n == selected {
					mark = "*"
				}
				tls := "-"
				if c.TLS || c.TLSCA != "" || c.TLSCert != "" {
					tls = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", mark, n, c.Addr, tls, c.TokenFile, c.Description)
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	show := &cobra.Command{
		Use:   "show [NAME]",
		Short: "Print a context's settings (default: the selected one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			} else if _, name, _ = contexts(); name == "" {
				return usagef(cmd, "no context is selected: name one (tinybroker context ls)")
			}
			c, err := loadContext(name)
			if err != nil {
				return err
			}
			b, _ := json.MarshalIndent(struct {
				Name string `json:"name"`
				brokerContext
			}{name, c}, "", "  ")
			_, err = fmt.Fprintf(a.stdout, "%s\n", b)
			return err
		},
	}
	selectCmd := &cobra.Command{
		Use:   "select NAME",
		Short: "Use context NAME from now on, for every client command",
		Args:  exactArgs(1, "NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := selectContext(args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.stdout, "selected context %s\n", args[0])
			return err
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a context (and unselect it)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			if _, err := loadContext(args[0]); err != nil {
				return err
			}
			dir, err := contextDir()
			if err != nil {
				return err
			}
			if err := os.Remove(filepath.Join(dir, "context", args[0]+".json")); err != nil {
				return err
			}
			if _, sel, _ := contexts(); sel == args[0] {
				if err := os.Remove(filepath.Join(dir, "context.txt")); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(a.stdout, "deleted context %s\n", args[0])
			return err
		},
	}
	return a.parent("context", "Save and select connection settings (address list, TLS, token file)",
		"Contexts are named connection settings, as the nats CLI's: add, ls, show, select, rm. Every client command uses --context NAME, else TINYBROKER_CONTEXT, else the selected context, under its own flags and the environment.",
		add, ls, show, selectCmd, rm)
}
