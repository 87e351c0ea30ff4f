package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TLS mistakes, named. A client that gets TLS wrong sees gRPC's UNAVAILABLE, which reads as
// "no broker there"; explain says which mistake it is and which flag or setting fixes it:
// from the error's text when crypto/tls named the cause (an unknown CA, another name, a
// plaintext broker, a refused client certificate), else (the connection just closed, as it
// does when a client without TLS meets a TLS broker, or without a certificate meets one that
// requires it) by asking the broker once more, with a bare handshake.

// tlsMistake is a failed call and the TLS mistake behind it. status.Code and errors.Is see
// the call's error.
type tlsMistake struct {
	addr, cause, fix, detail string
	err                      error
}

func (e tlsMistake) Error() string {
	s := fmt.Sprintf("cannot connect to %s: %s\n  fix: %s", e.addr, e.cause, e.fix)
	if e.detail != "" {
		s += "\n  (" + e.detail + ")"
	}
	return s
}

func (e tlsMistake) Unwrap() error { return e.err }

// probeTimeout bounds the second look at the broker.
const probeTimeout = 3 * time.Second

// explain returns err, a failed call to the broker at addr (one address or a comma list), as
// a tlsMistake if a TLS mistake caused it, else as it is.
func (d *dialFlags) explain(err error, addr string) error {
	if err == nil || status.Code(err) != codes.Unavailable {
		return err
	}
	cfg, cerr := d.tlsConfig()
	if cerr != nil {
		return err
	}
	detail := err.Error()
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		detail = se.GRPCStatus().Message()
	}
	if strings.Contains(detail, "shutting down") || strings.Contains(detail, "connection refused") {
		return err // a broker stopping, or none there: the usual hint says so
	}
	m := d.classify(detail, cfg != nil)
	if m == nil {
		for a := range strings.SplitSeq(addr, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if m = d.probe(a, cfg); m != nil {
				addr = a
				break
			}
		}
	}
	if m == nil {
		return err
	}
	m.addr, m.detail, m.err = addr, detail, err
	if d.contextUsed != "" {
		m.fix += fmt.Sprintf("; the TLS settings came from context %q (tinybroker context show %s): the flags override it, or save it again with tinybroker context add %s", d.contextUsed, d.contextUsed, d.contextUsed)
	}
	return *m
}

var validFor = regexp.MustCompile(`x509: certificate is (valid for [^"\\]*|not valid for any names[^"\\]*)`)

// classify names the mistake a TLS error's text shows, if it does; withTLS says whether the
// client spoke TLS.
func (d *dialFlags) classify(msg string, withTLS bool) *tlsMistake {
	certFlags := "--tls-cert FILE --tls-key FILE"
	switch {
	case !withTLS:
		return nil
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return &tlsMistake{cause: "the broker does not speak TLS, and this client spoke TLS to it",
			fix: "drop the --tls flags (--tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name), or serve TLS: a tls block with cert_file and key_file in the broker's config file (tinybroker certs server makes them)"}
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		cause, fix := "the broker's certificate is signed by a CA this client does not trust",
			"pass the CA that signed it with --tls-ca FILE (the ca.pem that `tinybroker certs init` wrote, for a development CA)"
		if d.ca != "" {
			cause += " (not the CA of --tls-ca " + d.ca + ")"
			fix = "pass the CA that signed the broker's certificate with --tls-ca FILE (made by `tinybroker certs`: the ca.pem of the --dir its server.pem was made in)"
		}
		return &tlsMistake{cause: cause, fix: fix}
	case validFor.MatchString(msg):
		name := d.server
		if name == "" {
			name = "the host of --addr"
		}
		return &tlsMistake{cause: "the broker's certificate is not for the name this client checks (" + name + "): it is " + strings.TrimPrefix(validFor.FindStringSubmatch(msg)[1], "x509: certificate is "),
			fix: "dial the broker by a name its certificate has (--addr HOST:PORT), or give one with --tls-server-name NAME; or make the certificate for this name: tinybroker certs server --host NAME,... --force"}
	case strings.Contains(msg, "x509: certificate has expired or is not yet valid"):
		return &tlsMistake{cause: "the broker's certificate has expired (or is not valid yet: check the clocks)",
			fix: "renew it (tinybroker certs server --dir DIR --force, or from your CA) and reload the broker (SIGHUP): it re-reads its tls files"}
	case strings.Contains(msg, "remote error: tls: certificate required"),
		d.cert == "" && strings.Contains(msg, "remote error: tls: bad certificate"):
		return &tlsMistake{cause: "the broker requires a client certificate (require_client_cert = true in its tls block), and this client sent none",
			fix: "pass one with " + certFlags + " (tinybroker certs client --dir DIR --user NAME makes NAME.pem and NAME-key.pem)"}
	case d.cert != "" && strings.Contains(msg, "remote error: tls:"):
		return &tlsMistake{cause: "the broker refused this client's certificate (--tls-cert " + d.cert + ")",
			fix: "use a certificate for client authentication, signed by a CA in the broker's client_ca_file and not expired (tinybroker certs client --dir DIR --user NAME makes one with the broker's CA); the broker's log says why it refused it"}
	}
	return nil
}

// probe connects to addr once more to find the mistake the call's error did not show: a
// TLS broker that closed the connection of a client without TLS, or the alert a broker sends
// a client without a certificate (which can come after the client wrote, and be lost).
func (d *dialFlags) probe(addr string, cfg *tls.Config) *tlsMistake {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer raw.Close()
	deadline, _ := ctx.Deadline()
	_ = raw.SetDeadline(deadline)
	if cfg == nil {
		// A ClientHello, and the first byte of the answer: 22 is a TLS handshake record. The
		// handshake ends there, without an alert (the broker sees the connection close).
		host, _, _ := net.SplitHostPort(addr)
		sniff := &firstByte{Conn: raw}
		_ = tls.Client(sniff, &tls.Config{ServerName: host, InsecureSkipVerify: true, NextProtos: []string{"h2"}}).HandshakeContext(ctx) // no certificate is looked at
		if sniff.seen && sniff.b == 22 {
			return &tlsMistake{cause: "the broker speaks TLS, and this client connected without it",
				fix: "add --tls-ca FILE, the CA that signed the broker's certificate (the ca.pem of `tinybroker certs init`), or --tls if a CA this system trusts signed it"}
		}
		return nil
	}
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c.NextProtos = []string{"h2"}
	conn := tls.Client(raw, c)
	if err := conn.HandshakeContext(ctx); err != nil {
		return d.classify(err.Error(), true)
	}
	// TLS 1.3: the broker checks the client's certificate after the client's handshake
	// ends, and answers with an alert; a broker that accepts it sends its HTTP/2 settings.
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return d.classify(err.Error(), true)
	}
	return nil
}

// firstByte is a connection that ends at the first byte it reads, and keeps it.
type firstByte struct {
	net.Conn
	b    byte
	seen bool
}

var errSeen = errors.New("first byte read")

func (c *firstByte) Read(p []byte) (int, error) {
	if c.seen {
		return 0, errSeen
	}
	n, err := c.Conn.Read(p[:min(len(p), 1)])
	if n > 0 {
		c.b, c.seen = p[0], true
		return 0, errSeen
	}
	return 0, err
}
