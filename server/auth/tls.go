package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"
)

// TLSFiles are the tls block of the configuration file.
type TLSFiles struct {
	CertFile, KeyFile string // the server's certificate chain and key, PEM
	// ClientCAFile, if set, holds the CAs whose client certificates are accepted (they
	// identify users by their certificate field). RequireClientCert refuses connections
	// without one (mTLS); otherwise a client may connect without and send a token.
	ClientCAFile      string
	RequireClientCert bool
}

// tlsState holds the files' contents as last loaded; every handshake takes the current one,
// so a reload applies to the next connections.
type tlsState struct {
	files TLSFiles
	a     *Authenticator
	cur   atomic.Pointer[tlsLoaded]
}

type tlsLoaded struct {
	cert *tls.Certificate
	cas  *x509.CertPool // nil: client certificates are not asked for
}

func newTLSState(f TLSFiles, a *Authenticator) (*tlsState, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tls needs cert_file and key_file")
	}
	if f.RequireClientCert && f.ClientCAFile == "" {
		return nil, errors.New("tls: require_client_cert needs client_ca_file, the CAs that sign the clients' certificates")
	}
	st := &tlsState{files: f, a: a}
	return st, st.load()
}

// load reads the files; on error the current ones stay.
func (st *tlsState) load() error {
	cert, err := tls.LoadX509KeyPair(st.files.CertFile, st.files.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: cert_file %s, key_file %s: %w", st.files.CertFile, st.files.KeyFile, err)
	}
	l := &tlsLoaded{cert: &cert}
	if st.files.ClientCAFile != "" {
		pem, err := os.ReadFile(st.files.ClientCAFile)
		if err != nil {
			return fmt.Errorf("tls: client_ca_file: %w", err)
		}
		l.cas = x509.NewCertPool()
		if !l.cas.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls: client_ca_file %s holds no PEM certificate", st.files.ClientCAFile)
		}
	}
	st.cur.Store(l)
	return nil
}

// serverConfig returns the listener's configuration: each handshake gets the files' current
// contents, and its client certificate is verified here so that a refusal is audited with
// the peer's address.
func (st *tlsState) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := st.cur.Load()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*l.cert}, NextProtos: []string{"h2"}}
			if l.cas == nil {
				return c, nil
			}
			c.ClientAuth = tls.RequestClientCert
			if st.files.RequireClientCert {
				c.ClientAuth = tls.RequireAnyClientCert
			}
			// Verified here rather than by crypto/tls (ClientAuth *VerifyClientCert*) so that a
			// refused certificate is counted, and logged with its subject and the reason
			// (loggedCreds logs the refusal with the peer's address).
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return nil // RequireAnyClientCert has refused it already if required
				}
				inter := x509.NewCertPool()
				for _, ic := range cs.PeerCertificates[1:] {
					inter.AddCert(ic)
				}
				leaf := cs.PeerCertificates[0]
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: l.cas, Intermediates: inter, CurrentTime: time.Now(),
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
					return certRefused{subject: leaf.Subject.String(), err: err}
				}
				return nil
			}
			return c, nil
		},
	}
}

// certRefused is a client certificate that VerifyConnection refused.
type certRefused struct {
	subject string
	err     error
}

func (e certRefused) Error() string {
	return "tinybroker: client certificate refused: " + e.err.Error()
}
func (e certRefused) Unwrap() error { return e.err }

// loggedCreds are the server's TLS credentials, which count and log each refused handshake:
// at WARN, with the peer's address and why, one line a second at most (with the number held
// back since the last line), so that a flood of bad handshakes cannot fill the log. A
// connection closed before or during its handshake (a port scan, a load balancer's TCP
// check) is not logged.
type loggedCreds struct {
	credentials.TransportCredentials
	a *Authenticator
}

func (c loggedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	peer := raw.RemoteAddr().String()
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.a.handshakeRefused(peer, err)
	}
	return conn, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), a: c.a}
}

// handshakeRefused counts and logs a failed TLS handshake with peer.
func (a *Authenticator) handshakeRefused(peer string, err error) {
	var refused certRefused
	msg := err.Error()
	switch {
	case errors.As(err, &refused):
		n := a.authFailures.Add(1)
		a.handshakeLogs.warn(a.log, "authentication failed: client certificate refused in the TLS handshake", "peer", peer,
			"subject", refused.subject, "reason", refused.err.Error(), "auth_failures_total", n)
	case strings.Contains(msg, "didn't provide a certificate"):
		n := a.authFailures.Add(1)
		a.handshakeLogs.warn(a.log, "authentication failed: no client certificate in the TLS handshake (require_client_cert = true)", "peer", peer,
			"auth_failures_total", n)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
	default:
		args := []any{"peer", peer, "reason", msg}
		if strings.Contains(msg, "first record does not look like a TLS handshake") {
			args = append(args, "hint", "the client does not speak TLS (tinybroker's clients: --tls-ca FILE)")
		}
		a.handshakeLogs.warn(a.log, "TLS handshake refused", args...)
	}
}
