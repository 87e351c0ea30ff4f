package auth

import (
	"crypto/tls"
	"net"
	"net/http"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// HTTP authenticates an HTTP request (the ops listener's: metrics, dashboard) as the gRPC
// interceptors authenticate a call, against the same users: "Authorization: Bearer
// USER:TOKEN", HTTP Basic with the user's name and token (what a browser asks for), or a
// client certificate the handshake of TLSConfig verified. It returns the Caller (nil when
// authentication is off); the error is a gRPC status, codes.Unauthenticated.
func (a *Authenticator) HTTP(r *http.Request) (*Caller, error) {
	if !a.Enabled() {
		return nil, nil
	}
	pr := &peer.Peer{}
	if addr, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		pr.Addr = addr
	}
	if r.TLS != nil {
		pr.AuthInfo = credentials.TLSInfo{State: *r.TLS}
	}
	ctx := peer.NewContext(r.Context(), pr)
	header := r.Header.Get("Authorization")
	if user, token, ok := r.BasicAuth(); ok {
		header = "Bearer " + user + ":" + token
	}
	if header != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", header))
	}
	p, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return &Caller{p: p, peer: r.RemoteAddr, a: a}, nil
}

// TLSConfig returns the configuration the gRPC listener serves TLS with (nil without TLS):
// the same certificate, re-read on Reload, and the same client certificates verified, for
// another listener of the broker.
func (a *Authenticator) TLSConfig() *tls.Config {
	if a == nil || a.tls == nil {
		return nil
	}
	return a.tls.serverConfig()
}
