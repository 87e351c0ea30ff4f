package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/server/auth"
)

// checkExposure refuses to serve a non-loopback address without authentication, unless the
// configuration says insecure = true (then it warns, at every start). RATIONALE.md,
// "Security", says why (Redis's protected mode does the same).
func checkExposure(cfg config.Config, configPath string, log hclog.Logger) error {
	if len(cfg.Users) > 0 {
		return nil
	}
	loopback, why := isLoopback(cfg.Listen)
	if loopback {
		return nil
	}
	if cfg.Insecure {
		log.Warn("INSECURE: serving without authentication on a non-loopback address (insecure = true): anyone who can reach "+cfg.Listen+
			" may publish anywhere, read every topic, ack any group's messages and reload the configuration; declare users to stop this",
			"listen", cfg.Listen)
		return nil
	}
	return fmt.Errorf(`refusing to serve %s without authentication: %s, and no user is configured, so anyone who could reach it could publish anywhere, read every topic and reload the broker.
  - to serve this machine only, listen on a loopback address: --listen 127.0.0.1:7878;
  - to serve others, declare users in the config file (%s) and give them tokens or certificates:
      user "alice" {
        token_hash = "..."              # tinybroker passwd
        publish   { allow = ["orders.>"] }
        subscribe { allow = ["orders.>"] }
      }
    with a tls { cert_file = "...", key_file = "..." } block so that tokens do not travel in clear (README.md, "Securing tinybroker");
  - or, on a network you trust entirely, set insecure = true in the config file`, cfg.Listen, why, cfgName(configPath))
}

// isLoopback reports whether addr (host:port) listens only on loopback addresses, and if
// not, why.
func isLoopback(addr string) (bool, string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err.Error()
	}
	if host == "" {
		return false, "an empty host listens on every address of the machine"
	}
	if host == "localhost" {
		return true, ""
	}
	if ip := net.ParseIP(strings.SplitN(host, "%", 2)[0]); ip != nil {
		if ip.IsLoopback() {
			return true, ""
		}
		if ip.IsUnspecified() {
			return false, host + " listens on every address of the machine"
		}
		return false, host + " is not a loopback address"
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false, fmt.Sprintf("%s does not resolve to loopback addresses only", host)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, fmt.Sprintf("%s resolves to %s, not a loopback address", host, ip)
		}
	}
	return true, ""
}

// passwdCmd is `tinybroker passwd`: it reads a token (without echo from a terminal, else the
// first line of standard input) and prints its bcrypt hash for a user's token_hash.
func (a *app) passwdCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passwd < TOKEN",
		Short: "Print the bcrypt hash of a user's token, for the config file",
		Long: `Reads a token from the terminal (not echoed, asked twice) or the first line of standard
input, and prints its bcrypt hash, for a user's token_hash in the config file. Clients then
send USER:TOKEN (tinybroker --token-file FILE, or TINYBROKER_TOKEN).
A random token: head -c 24 /dev/urandom | base64`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "passwd takes no arguments (the token is read from standard input, never from the command line), got %q", args)
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error { return passwd(a.stdin, a.stdout, a.stderr) },
	}
}

func passwd(in io.Reader, stdout, stderr io.Writer) error {
	token, err := readToken(in, stderr)
	if err != nil {
		return err
	}
	h, err := auth.HashToken(token)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, h)
	return nil
}

func readToken(in io.Reader, stderr io.Writer) ([]byte, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "Token: ")
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return nil, err
		}
		fmt.Fprint(stderr, "Again: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return nil, err
		}
		if string(a) != string(b) {
			return nil, errors.New("the two tokens differ")
		}
		return a, nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return nil, fmt.Errorf("read the token from standard input: %w", err)
	}
	return []byte(strings.TrimRight(line, "\r\n")), nil
}
