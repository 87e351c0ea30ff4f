package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
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
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			l := st.cur.Load()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*l.cert}, NextProtos: []string{"h2"}}
			if l.cas == nil {
				return c, nil
			}
			c.ClientAuth = tls.RequestClientCert
			if st.files.RequireClientCert {
				c.ClientAuth = tls.RequireAnyClientCert
			}
			remote := "unknown"
			if hello.Conn != nil {
				remote = hello.Conn.RemoteAddr().String()
			}
			// Verified here rather than by crypto/tls (ClientAuth *VerifyClientCert*) so that a
			// refused certificate is counted and logged with the peer's address;
			// VerifiedChains is set from the result for the identity.
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
					n := st.a.authFailures.Add(1)
					st.a.logs.warn(st.a.log, "authentication failed: client certificate refused", "peer", remote,
						"subject", leaf.Subject.String(), "reason", err.Error(), "auth_failures_total", n)
					return fmt.Errorf("tinybroker: client certificate refused: %w", err)
				}
				return nil
			}
			return c, nil
		},
	}
}
