package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tinybroker/tinybroker/server/auth"
)

// `tinybroker certs`: a development CA and the certificates it signs, so that TLS and mTLS
// can be tried without openssl. Keys are ECDSA P-256, written 0600; nothing is overwritten
// without --force.

// Validity of what certs writes: long enough not to expire under a development setup, short
// enough that a forgotten key does not stay good for ever.
const (
	caValidity   = 5 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// The files of the CA in the directory.
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

func (a *app) certsCmd() *cobra.Command {
	return a.parent("certs", "Make a development CA and the certificates it signs (TLS, mTLS)",
		`Makes what a broker served over TLS needs, without openssl: a development CA (certs init),
a server certificate signed by it (certs server) and client certificates for users
(certs client), in one directory. Keys are ECDSA P-256 and written readable by their owner
only; keep the directory out of version control (e.g. .secrets/, which .gitignore lists).
Existing files are not overwritten unless --force. For production, use your organisation's CA.`,
		a.certsInitCmd(), a.certsServerCmd(), a.certsClientCmd())
}

// certsFlags are the flags every certs subcommand takes.
type certsFlags struct {
	dir   string
	force bool
	days  int
}

func addCertsFlags(c *cobra.Command, days time.Duration) *certsFlags {
	f := &certsFlags{}
	c.Flags().StringVar(&f.dir, "dir", "", "`directory` of the CA and certificates (created if missing, mode 0700)")
	c.Flags().BoolVar(&f.force, "force", false, "overwrite existing files")
	c.Flags().IntVar(&f.days, "days", int(days/(24*time.Hour)), "validity, in days")
	_ = c.MarkFlagRequired("dir")
	return f
}

func (f *certsFlags) check(cmd *cobra.Command) error {
	if f.dir == "" {
		return usagef(cmd, "--dir is empty: name the directory of the CA and certificates, e.g. --dir .secrets")
	}
	if f.days < 1 {
		return usagef(cmd, "--days %d: want 1 or more", f.days)
	}
	return nil
}

func (f *certsFlags) validity() time.Duration { return time.Duration(f.days) * 24 * time.Hour }

func (a *app) certsInitCmd() *cobra.Command {
	var f *certsFlags
	c := &cobra.Command{
		Use:   "init --dir DIR",
		Short: "Make a development CA: DIR/ca.pem and DIR/ca-key.pem",
		Long: `Makes a self-signed development CA: DIR/ca.pem (give it to clients as --tls-ca, and to the
broker as client_ca_file for client certificates) and DIR/ca-key.pem (its key, mode 0600:
whoever has it can make certificates this CA vouches for).`,
		Example: "  tinybroker certs init --dir .secrets",
		Args:    noArgs(" (the directory is --dir)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			host, _ := os.Hostname()
			name := "tinybroker development CA"
			if host != "" {
				name += " (" + host + ")"
			}
			ca, err := newCA(name, f.validity())
			if err != nil {
				return err
			}
			if err := writePair(f.dir, caCertFile, caKeyFile, ca, f.force); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s (%s, valid until %s)\nnext: tinybroker certs server --dir %s --host localhost,127.0.0.1\n",
				filepath.Join(f.dir, caCertFile), filepath.Join(f.dir, caKeyFile), name, ca.cert.NotAfter.Format(time.DateOnly), f.dir)
			return nil
		},
	}
	f = addCertsFlags(c, caValidity)
	return c
}

func (a *app) certsServerCmd() *cobra.Command {
	var f *certsFlags
	var hosts []string
	var name string
	c := &cobra.Command{
		Use:   "server --dir DIR [--host NAME,IP,...] [--name server]",
		Short: "Make a server certificate signed by DIR's CA: DIR/server.pem and DIR/server-key.pem",
		Long: `Makes a certificate for the broker, signed by the CA of certs init, valid for the host names
and IP addresses of --host (its subject alternative names: clients check the one they dial,
or --tls-server-name). The config file's tls block names the files:
  tls {
    cert_file = "server.pem"
    key_file  = "server-key.pem"
  }
--name writes NAME.pem and NAME-key.pem instead, e.g. one per node of a cluster.`,
		Example: `  tinybroker certs server --dir .secrets
  tinybroker certs server --dir .secrets --host broker.internal,10.0.0.7 --name node1`,
		Args: noArgs(" (the names are --host)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			if err := checkFileName(name); err != nil {
				return usagef(cmd, "--name %q: %v", name, err)
			}
			tmpl, err := serverTemplate(hosts)
			if err != nil {
				return usagef(cmd, "--host: %v", err)
			}
			ca, err := loadCA(f.dir)
			if err != nil {
				return err
			}
			p, err := ca.sign(tmpl, f.validity())
			if err != nil {
				return err
			}
			cert, key := name+".pem", name+"-key.pem"
			if err := writePair(f.dir, cert, key, p, f.force); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s for %s (valid until %s)\n", filepath.Join(f.dir, cert), filepath.Join(f.dir, key),
				strings.Join(hosts, ", "), p.cert.NotAfter.Format(time.DateOnly))
			return nil
		},
	}
	f = addCertsFlags(c, leafValidity)
	c.Flags().StringSliceVar(&hosts, "host", []string{"localhost", "127.0.0.1", "::1"}, "host `names and IP addresses` the certificate is for, comma-separated")
	c.Flags().StringVar(&name, "name", "server", "`base name` of the files: NAME.pem and NAME-key.pem")
	return c
}

func (a *app) certsClientCmd() *cobra.Command {
	var f *certsFlags
	var user string
	c := &cobra.Command{
		Use:   "client --dir DIR --user NAME",
		Short: "Make a client certificate for a user, signed by DIR's CA: DIR/NAME.pem and DIR/NAME-key.pem",
		Long: `Makes a client certificate for the user NAME, signed by the CA of certs init: its subject's
common name is NAME, which the broker maps to the user whose block says
certificate = "CN=NAME". The broker asks for client certificates with client_ca_file (the
CA's ca.pem) in its tls block, and refuses connections without one with
require_client_cert = true. The client passes --tls-cert DIR/NAME.pem --tls-key DIR/NAME-key.pem.`,
		Example: "  tinybroker certs client --dir .secrets --user alice",
		Args:    noArgs(" (the user is --user)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			if err := (auth.User{Name: user, Certificate: "CN=" + user}).Check(); err != nil {
				return usagef(cmd, "--user: %v", err)
			}
			if err := checkFileName(user); err != nil {
				return usagef(cmd, "--user %q: %v (it names the files)", user, err)
			}
			ca, err := loadCA(f.dir)
			if err != nil {
				return err
			}
			p, err := ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: user},
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, f.validity())
			if err != nil {
				return err
			}
			cert, key := user+".pem", user+"-key.pem"
			if err := writePair(f.dir, cert, key, p, f.force); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s for user %q (valid until %s)\nits user block in the config file: certificate = \"CN=%s\"\n",
				filepath.Join(f.dir, cert), filepath.Join(f.dir, key), user, p.cert.NotAfter.Format(time.DateOnly), user)
			return nil
		},
	}
	f = addCertsFlags(c, leafValidity)
	c.Flags().StringVar(&user, "user", "", "the user's `name`, as in its user block (the certificate's common name)")
	_ = c.MarkFlagRequired("user")
	return c
}

// checkFileName reports whether name can name files in the directory.
func checkFileName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return errors.New("want a plain file name, without a path")
	}
	if name == "ca" {
		return errors.New("ca.pem and ca-key.pem are the CA's files")
	}
	return nil
}

// serverTemplate returns a server certificate's template for hosts: IP addresses and DNS
// names, the first as its common name.
func serverTemplate(hosts []string) (*x509.Certificate, error) {
	tmpl := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(strings.Trim(h, "[]")); {
		case h == "":
			return nil, errors.New("an empty name")
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case strings.ContainsAny(h, ":/ "):
			return nil, fmt.Errorf("%q is neither a host name nor an IP address (no port, no scheme)", h)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
		if tmpl.Subject.CommonName == "" {
			tmpl.Subject.CommonName = h
		}
	}
	if tmpl.Subject.CommonName == "" {
		return nil, errors.New("give at least one host name or IP address")
	}
	return tmpl, nil
}

// keyPair is a certificate and its key.
type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(name string, validity time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name, Organization: []string{"tinybroker development"}},
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	return create(tmpl, nil, key, validity)
}

// sign returns a new key and its certificate from tmpl, signed by ca.
func (ca *keyPair) sign(tmpl *x509.Certificate, validity time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	if validity > time.Until(ca.cert.NotAfter) {
		validity = time.Until(ca.cert.NotAfter) // not past the CA's own end
	}
	return create(tmpl, ca, key, validity)
}

// create completes tmpl (serial, validity) and signs it with parent's key, or key's own when
// parent is nil.
func create(tmpl *x509.Certificate, parent *keyPair, key *ecdsa.PrivateKey, validity time.Duration) (*keyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-5 * time.Minute) // a little clock skew between machines
	tmpl.NotAfter = now.Add(validity)
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

// loadCA reads the CA of certs init from dir.
func loadCA(dir string) (*keyPair, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no CA in %s (%s is missing): make one first with `tinybroker certs init --dir %s`", dir, certPath, dir)
		}
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing: certs signs with the CA's key, which `tinybroker certs init` writes next to %s", keyPath, certPath)
		}
		return nil, err
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", certPath)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%s holds no PEM key", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s is not the key of %s", keyPath, certPath)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("the CA %s expired on %s: make a new one with `tinybroker certs init --dir %s --force` (and new certificates)",
			certPath, cert.NotAfter.Format(time.DateOnly), dir)
	}
	return &keyPair{cert: cert, key: key}, nil
}

// writePair writes p's certificate to dir/certName (0644) and its key to dir/keyName (0600),
// creating dir (0700) if needed. Unless force, it refuses, before writing anything, if
// either exists.
func writePair(dir, certName, keyName string, p *keyPair, force bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if !force {
		for _, path := range []string{certPath, keyPath} {
			if _, err := os.Lstat(path); err == nil {
				return fmt.Errorf("%s exists: not overwriting it (--force does)", path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	kder, err := x509.MarshalPKCS8PrivateKey(p.key)
	if err != nil {
		return err
	}
	// The key first: a certificate without its key is of no use, but harmless.
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600, force); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.cert.Raw}), 0o644, force)
}

// writeFile writes data to path with mode perm: without force, only if path does not exist
// (O_EXCL); with it, through a temporary file renamed over path, so that a key never exists
// with a wider mode than perm, even for a moment.
func writeFile(path string, data []byte, perm os.FileMode, force bool) error {
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s exists: not overwriting it (--force does)", path)
			}
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, there is nothing there
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
