package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tinybroker/tinybroker/sdk/go/client"
)

// How the client commands (pub, sub, bench) reach a secured broker: TLS and a token. One
// place, so that every client command takes the same flags.

// tokenEnv holds the token when neither --token nor --token-file is given.
const tokenEnv = "TINYBROKER_TOKEN"

// dialFlags are the connection flags of a client command.
type dialFlags struct {
	tls                   bool
	ca, cert, key, server string
	token, tokenFile      string
	context               string // --context (context.go)
	getenv                func(string) string
	readFile              func(string) ([]byte, error)
	fs                    *pflag.FlagSet // the command's flags, which a context fills where unset
	contextApplied        bool
	contextUsed           string // the context that gave a TLS or token setting (contextNote)
	explicitContext       bool   // only --context applies (bench: without -addr it runs its own broker)
}

// addDialFlags declares the connection flags on fs.
func addDialFlags(fs *pflag.FlagSet) *dialFlags {
	d := &dialFlags{getenv: os.Getenv, readFile: os.ReadFile, fs: fs}
	fs.StringVar(&d.context, "context", "", "use the saved connection settings `NAME` (default: "+contextEnv+", else the selected context; see tinybroker context)")
	fs.BoolVar(&d.tls, "tls", false, "connect over TLS, trusting the system's CAs (implied by the other --tls-* flags)")
	fs.StringVar(&d.ca, "tls-ca", "", "PEM `file` of the CA that signed the broker's certificate (implies --tls)")
	fs.StringVar(&d.cert, "tls-cert", "", "PEM `file` of a client certificate, for a broker that asks for one (with --tls-key)")
	fs.StringVar(&d.key, "tls-key", "", "PEM `file` of the client certificate's key")
	fs.StringVar(&d.server, "tls-server-name", "", "`name` the broker's certificate must have (default: the host of --addr)")
	fs.StringVar(&d.token, "token", "", "`USER:TOKEN` to authenticate with (visible to other users of this machine: prefer "+tokenEnv+" or --token-file)")
	fs.StringVar(&d.tokenFile, "token-file", "", "`file` whose first line is USER:TOKEN")
	return d
}

// tlsConfig returns the TLS configuration the flags ask for, or nil for plaintext.
func (d *dialFlags) tlsConfig() (*tls.Config, error) {
	if !d.tls && d.ca == "" && d.cert == "" && d.key == "" && d.server == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: d.server}
	if d.ca != "" {
		pem, err := d.readFile(d.ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", d.ca)
		}
	}
	if (d.cert == "") != (d.key == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: the client certificate and its key")
	}
	if d.cert != "" {
		c, err := tls.LoadX509KeyPair(d.cert, d.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// tokenValue returns the token from --token, --token-file or the environment ("" if none).
func (d *dialFlags) tokenValue() (string, error) {
	tok := d.token
	switch {
	case d.token != "" && d.tokenFile != "":
		return "", errors.New("give --token or --token-file, not both")
	case d.tokenFile != "":
		b, err := d.readFile(d.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		tok, _, _ = strings.Cut(string(b), "\n")
		tok = strings.TrimSpace(tok)
		if tok == "" {
			return "", fmt.Errorf("--token-file %s is empty", d.tokenFile)
		}
	case tok == "":
		tok = strings.TrimSpace(d.getenv(tokenEnv))
	}
	if tok != "" && !strings.Contains(tok, ":") {
		return "", errors.New("the token must be USER:TOKEN, the user's name, a colon and the token (without revealing it here)")
	}
	return tok, nil
}

// resolve returns what the flags ask for: a TLS configuration (nil: plaintext) and a token
// ("": none).
func (d *dialFlags) resolve() (*tls.Config, string, error) {
	if err := d.applyContext(); err != nil {
		return nil, "", err
	}
	cfg, err := d.tlsConfig()
	if err != nil {
		return nil, "", d.contextNote(err)
	}
	tok, err := d.tokenValue()
	return cfg, tok, d.contextNote(err)
}

// clientOptions returns the flags as options of the Go client.
func (d *dialFlags) clientOptions() ([]client.Option, error) {
	return dialOptions(d, client.WithTLS, client.WithToken)
}

// grpcOptions returns the flags as gRPC dial options (for bench, which dials by itself).
func (d *dialFlags) grpcOptions() ([]grpc.DialOption, error) {
	return dialOptions(d, func(cfg *tls.Config) grpc.DialOption { return grpc.WithTransportCredentials(credentials.NewTLS(cfg)) },
		func(tok string) grpc.DialOption { return grpc.WithPerRPCCredentials(client.TokenCredentials(tok)) })
}

// dialOptions returns the flags as options of one kind: withTLS's for the TLS configuration,
// withToken's for the token (resolve).
func dialOptions[O any](d *dialFlags, withTLS func(*tls.Config) O, withToken func(string) O) ([]O, error) {
	cfg, tok, err := d.resolve()
	if err != nil {
		return nil, err
	}
	var opts []O
	if cfg != nil {
		opts = append(opts, withTLS(cfg))
	}
	if tok != "" {
		opts = append(opts, withToken(tok))
	}
	return opts, nil
}
