// Command tinybroker is the broker server, its command-line client and its admin tool.
//
//	tinybroker serve [--listen ADDR] [--config FILE] [--check] [--http-listen ADDR] [--log-format text|json] [--log-level LEVEL]
//	tinybroker pub   [--addr ADDR] [-H key=value]... TOPIC DATA
//	tinybroker sub   [--addr ADDR] [--group G] [--count N] PATTERN...
//	tinybroker groups ls|show|rm|purge, dlq ls|replay|purge, streams ls, stats, top
//	tinybroker bench [--addr ADDR] [-w W1,W2,W3,W5] ...
//	tinybroker plugin test [--config key=value]... [--hook HOOK] PLUGIN.wasm < messages
//	tinybroker plugin new  --lang go|rust|c|assemblyscript|zig|wat [--dir DIR] [--sdk TREE] NAME
//	tinybroker passwd < TOKEN
//	tinybroker certs init|server|client --dir DIR ...
//	tinybroker version, completion bash|zsh|fish|powershell
//
// Exit status: 0 on success (and for help), 1 when the command failed, 2 for a usage error
// (an unknown command or flag, a missing argument).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on w and returns the process's exit status for it.
func exitCode(err error, w io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(w, "tinybroker:", err)
	var u usageError
	if errors.As(err, &u) {
		if u.cmd != "" {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", u.cmd)
		}
		return exitUsage
	}
	return exitFailure
}

// usageError is a command line the command cannot run: exit status 2.
type usageError struct {
	err error
	cmd string // the command's path, for the hint
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(cmd *cobra.Command, format string, a ...any) error {
	return usageError{err: fmt.Errorf(format, a...), cmd: cmd.CommandPath()}
}

// app is what the commands share: where they write, and for tests, where serve reports its
// address.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	listening      chan<- net.Addr // serve sends the bound address here, if not nil
}

// run runs the command line args.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return (&app{stdin: stdin, stdout: stdout, stderr: stderr}).execute(ctx, args)
}

func (a *app) execute(ctx context.Context, args []string) error {
	root := a.newRoot()
	args = goStyleFlags(root, args)
	// An unknown command is a usage error, even with --help (which cobra would answer with
	// the root's help and exit 0). Cobra adds its help and completion commands when it runs:
	// the help command is added first, so that Find knows it; completion's are named.
	root.InitDefaultHelpCmd()
	if c, rest, err := root.Find(args); err == nil && c == root && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") &&
		rest[0] != "completion" && !strings.HasPrefix(rest[0], "__complete") {
		return usagef(root, "unknown command %q", rest[0])
	}
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		var u usageError
		if !errors.As(err, &u) && isCobraUsage(err) {
			return usageError{err: err, cmd: cmd.CommandPath()}
		}
	}
	return err
}

// isCobraUsage reports whether err is one of cobra's own errors about the command line.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument",
		"required flag", "accepts ", "requires at least", "bad flag syntax", "invalid choice", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// goStyleFlags rewrites "-name" and "-name=value" to "--name..." where name is a long flag of
// the command args run: the commands took Go's flag syntax before they moved to cobra, and
// scripts (bench/run.sh) still use it.
func goStyleFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	out := make([]string, len(args))
	copy(out, args)
	for i, arg := range out {
		if arg == "--" {
			break
		}
		if len(arg) < 3 || arg[0] != '-' || arg[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(arg[1:], "=")
		if f := cmd.Flags().Lookup(name); f != nil && len(name) > 1 {
			out[i] = "-" + arg
		} else if f := cmd.InheritedFlags().Lookup(name); f != nil && len(name) > 1 {
			out[i] = "-" + arg
		}
	}
	return out
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "tinybroker",
		Short: "A message broker spoken to over gRPC: in memory by default, or on NATS JetStream",
		Long: `tinybroker: a message broker spoken to over gRPC (in memory on one node by default, or on
NATS JetStream, one node or a cluster), and its client and admin tool. "tinybroker serve" runs the broker; the other commands speak to one (--addr,
default 127.0.0.1:7878; for a secured broker, --tls-ca FILE, --tls-cert FILE --tls-key FILE,
--tls-server-name NAME and --token-file FILE, or TINYBROKER_TOKEN=USER:TOKEN), or save
those settings once under a name: tinybroker context add NAME --addr ... --select.

Exit status: 0 on success and for help, 1 when the command failed, 2 for a usage error.`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown command %q", args[0])
			}
			cmd.SetOut(a.stderr)
			_ = cmd.Usage()
			return usagef(cmd, "no command given")
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err: err, cmd: cmd.CommandPath()} })
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddGroup(&cobra.Group{ID: "broker", Title: "Broker and client:"}, &cobra.Group{ID: "admin", Title: "Operating a broker:"},
		&cobra.Group{ID: "plugins", Title: "Plugins and benchmarks:"})
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("broker", a.serveCmd(), a.pubCmd(), a.subCmd())
	add("admin", a.groupsCmd(), a.dlqCmd(), a.streamsCmd(), a.usersCmd(), a.statsCmd(), a.topCmd())
	add("plugins", a.pluginCmd(), a.benchCmd())
	add("admin", a.passwdCmd(), a.certsCmd(), a.contextCmd())
	root.AddCommand(a.versionCmd())
	root.SetHelpCommandGroupID("")
	root.SetCompletionCommandGroupID("")
	return root
}

// parent makes a command whose work is in its subcommands: alone, or with an unknown
// subcommand, it is a usage error that lists them.
func (a *app) parent(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ArbitraryArgs,
		// `groups --addr X` alone: the subcommands' flags are not the parent's, and the
		// answer is which subcommand to use, not "unknown flag".
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			names := make([]string, 0, len(cmd.Commands()))
			for _, s := range cmd.Commands() {
				names = append(names, fmt.Sprintf("%q", cmd.Name()+" "+s.Name()))
			}
			hint := "use " + strings.Join(names, " or ")
			if len(args) > 0 {
				return usagef(cmd, "unknown command %q for %q: %s", args[0], cmd.CommandPath(), hint)
			}
			cmd.SetOut(a.stderr)
			_ = cmd.Usage()
			return usagef(cmd, "%s: %s", cmd.Name(), hint)
		}}
	c.AddCommand(subs...)
	for _, s := range subs {
		c.Example += "  tinybroker " + c.Name() + " " + s.Use + "\n"
	}
	c.Example = strings.TrimSuffix(c.Example, "\n")
	return c
}

// exactArgs is cobra.ExactArgs with a message that says what is missing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef(cmd, "%s needs %s, got %d arguments %q", cmd.CommandPath()[len("tinybroker "):], what, len(args), args)
		}
		return nil
	}
}

// noArgs refuses arguments, saying what the command takes instead.
func noArgs(hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef(cmd, "%s takes no arguments, got %q%s", cmd.Name(), args, hint)
		}
		return nil
	}
}

// keyValueFlag collects a repeated key=value flag (pub's -H, plugin test's --config) into
// values; what and example word its error.
type keyValueFlag struct {
	values        map[string]string
	what, example string
}

func (f *keyValueFlag) String() string {
	keys := slices.Sorted(maps.Keys(f.values))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + f.values[k]
	}
	return strings.Join(parts, ",")
}

func (f *keyValueFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%s %q: want key=value, e.g. %s", f.what, v, f.example)
	}
	f.values[k] = val
	return nil
}

func (*keyValueFlag) Type() string { return "key=value" }
