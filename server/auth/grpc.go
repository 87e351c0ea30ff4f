package auth

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// ServerOptions returns the gRPC server options that put a on a server: TLS credentials if
// configured, and, with users, interceptors that authenticate every call of service (its
// full name, e.g. "tinybroker.v1.Broker"), keep admin methods (e.g. "Stats") to admins,
// apply the per-user limits on connections and streams, and store the Caller in the
// context (FromContext). Other services (health, reflection) stay open.
func (a *Authenticator) ServerOptions(service string, admin ...string) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if a.tls != nil {
		opts = append(opts, grpc.Creds(loggedCreds{TransportCredentials: credentials.NewTLS(a.tls.serverConfig()), a: a}))
	}
	if !a.Enabled() {
		return opts
	}
	g := &guard{a: a, prefix: "/" + service + "/", admin: make(map[string]bool)}
	for _, m := range admin {
		g.admin[g.prefix+m] = true
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream))
	if a.set.Load().connLimit { // a stats handler sees every message: only when needed
		opts = append(opts, grpc.StatsHandler(g))
	}
	return opts
}

type guard struct {
	a      *Authenticator
	prefix string
	admin  map[string]bool
}

// enter authenticates the call of method and counts its connection against the user.
func (g *guard) enter(ctx context.Context, method string) (*Caller, error) {
	p, err := g.a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	c := &Caller{p: p, peer: peerAddr(ctx), a: g.a}
	if g.admin[method] {
		if err := c.Admin(strings.TrimPrefix(method, g.prefix)); err != nil {
			return nil, err
		}
	}
	if p.hasConnLimit {
		if cs, _ := ctx.Value(connKey{}).(*connState); cs != nil {
			if err := cs.attach(c); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, g.prefix) {
		return handler(ctx, req)
	}
	c, err := g.enter(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(context.WithValue(ctx, callerKey{}, c), req)
}

func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !strings.HasPrefix(info.FullMethod, g.prefix) {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	c, err := g.enter(ctx, info.FullMethod)
	if err != nil {
		return err
	}
	if max := c.p.Limits.MaxStreams; max > 0 {
		if n := c.p.streams.Add(1); n > int64(max) {
			c.p.streams.Add(-1)
			return c.limit("streams", max, "max_streams", "end some, or publish several topics on one PublishStream")
		}
		defer c.p.streams.Add(-1)
	}
	return handler(srv, &callerStream{ServerStream: ss, ctx: context.WithValue(ctx, callerKey{}, c)})
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// A connection counts against each user who made a call on it, from their first call to
// the connection's end.
type connKey struct{}

type connState struct {
	mu     sync.Mutex
	users  []*principal
	closed bool
}

func (cs *connState) attach(c *Caller) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, p := range cs.users {
		if p == c.p {
			return nil
		}
	}
	if cs.closed {
		return status.Error(codes.Unavailable, "tinybroker: connection closing")
	}
	if n := c.p.conns.Add(1); n > int64(c.p.Limits.MaxConnections) {
		c.p.conns.Add(-1)
		return c.limit("connections", c.p.Limits.MaxConnections, "max_connections", "share one connection between clients, or close others")
	}
	cs.users = append(cs.users, c.p)
	return nil
}

func (g *guard) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connState{})
}

func (g *guard) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); !ok {
		return
	}
	cs, _ := ctx.Value(connKey{}).(*connState)
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	for _, p := range cs.users {
		p.conns.Add(-1)
	}
	cs.users = nil
}

func (g *guard) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (g *guard) HandleRPC(context.Context, stats.RPCStats)                       {}
