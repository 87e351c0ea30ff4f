// Package testcerts makes throwaway X.509 certificates for tests: a CA, a
// server certificate for 127.0.0.1 and localhost, and client certificates signed by it,
// expired, or signed by another CA. Keys are ECDSA P-256; nothing here is for production
// (`tinybroker certs` makes a development CA and certificates on disk).
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that signs certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// Pair is a certificate and its key, as PEM.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// NewCA returns a new self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Options describe a certificate to sign.
type Options struct {
	CommonName string
	DNS        []string
	IPs        []net.IP
	URIs       []string
	Emails     []string
	Server     bool      // for a server (ExtKeyUsageServerAuth); else a client
	NotAfter   time.Time // default: a day from now
}

// Sign returns a certificate signed by ca.
func (ca *CA) Sign(o Options) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	notAfter := o.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageClientAuth
	if o.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	notBefore := time.Now().Add(-time.Hour)
	if notAfter.Before(notBefore) {
		notBefore = notAfter.Add(-time.Hour)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: o.CommonName},
		NotBefore: notBefore, NotAfter: notAfter,
		DNSNames: o.DNS, IPAddresses: o.IPs, EmailAddresses: o.Emails,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	for _, u := range o.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			return Pair{}, err
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Pair{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}

// Server returns a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server() (Pair, error) {
	return ca.Sign(Options{CommonName: "tinybroker", DNS: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Server: true})
}

// TLS returns p as a tls.Certificate.
func (p Pair) TLS() (tls.Certificate, error) { return tls.X509KeyPair(p.CertPEM, p.KeyPEM) }

// Write writes p to dir/name.pem and dir/name-key.pem and returns their paths.
func (p Pair) Write(dir, name string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cert, p.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	return cert, key, os.WriteFile(key, p.KeyPEM, 0o600)
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}
