package auth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
)

// Options configure an Authenticator.
type Options struct {
	// Users may call the broker. With none, every call is allowed without authentication
	// (the command refuses to serve so on any but a loopback address).
	Users []User
	// TLS, if not nil, serves TLS from these files (re-read by Reload).
	TLS    *TLSFiles
	Logger hclog.Logger
}

// Authenticator authenticates calls and holds each user's permissions, counters and quota.
// It is safe for concurrent use.
type Authenticator struct {
	set       atomic.Pointer[userSet] // the users now; Reload swaps it
	reloading sync.Mutex              // one Reload at a time: each revokes what the last set held
	tls       *tlsState
	log       hclog.Logger

	cacheMu sync.Mutex
	cache   map[[32]byte]*principal // verified tokens, by SHA-256 of "Bearer ..." text
	verify  *verifier               // schedules bcrypt comparisons fairly across user names (verify.go)

	authFailures, denials atomic.Uint64
	logs                  logLimiter
	handshakeLogs         logLimiter // refused TLS handshakes: one line a second (tls.go)
}

// userSet is the users of one configuration.
type userSet struct {
	users     map[string]*principal // by name
	certs     map[string]*principal // by certificate identity, e.g. "CN=alice"
	connLimit bool                  // some user has limits { max_connections }
}

// principal is one user's state: its settings, and what it holds now.
type principal struct {
	User
	quota                  *broker.Quota // nil when the user has no group limits
	conns, streams, subs   atomic.Int64
	tokenHash              []byte
	hasConnLimit, hasLimit bool
	// revoked is closed when a reload removed or changed the user: its calls in progress
	// end, and its callers are refused from then on (they must authenticate again).
	revoked chan struct{}
}

// isRevoked says whether a reload revoked p.
func (p *principal) isRevoked() bool {
	select {
	case <-p.revoked:
		return true
	default:
		return false
	}
}

// maxCachedTokens bounds the verified-token cache; past it the cache starts over.
const maxCachedTokens = 4096

// dummyHash is compared against when a token names no user, so that a wrong user name
// takes as long to refuse as a wrong token.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("tinybroker: no such user"), bcrypt.DefaultCost)

// New checks the users and loads the TLS files.
func New(o Options) (*Authenticator, error) {
	a := &Authenticator{log: o.Logger, cache: make(map[[32]byte]*principal), verify: newVerifier(), handshakeLogs: logLimiter{burst: 1}}
	if a.log == nil {
		a.log = hclog.NewNullLogger()
	}
	set, err := newUserSet(o.Users, nil)
	if err != nil {
		return nil, err
	}
	a.set.Store(set)
	if o.TLS != nil {
		st, err := newTLSState(*o.TLS, a)
		if err != nil {
			return nil, err
		}
		a.tls = st
	}
	return a, nil
}

// newUserSet checks users and makes their set. A user declared in old exactly as in users
// keeps its state there (what it holds, its callers).
func newUserSet(users []User, old *userSet) (*userSet, error) {
	set := &userSet{users: make(map[string]*principal), certs: make(map[string]*principal)}
	for _, u := range users {
		if err := u.Check(); err != nil {
			return nil, err
		}
		if _, dup := set.users[u.Name]; dup {
			return nil, fmt.Errorf("user %q is declared twice", u.Name)
		}
		p := old.same(u)
		if p == nil {
			p = &principal{User: u, tokenHash: []byte(u.TokenHash), revoked: make(chan struct{})}
			if l := u.Limits; l.MaxGroups > 0 || l.MaxQueuedBytes > 0 {
				p.quota = &broker.Quota{Owner: fmt.Sprintf("user %q", u.Name), MaxGroups: l.MaxGroups, MaxBytes: l.MaxQueuedBytes}
			}
			p.hasConnLimit = u.Limits.MaxConnections > 0
			p.hasLimit = u.Limits.MaxStreams > 0 || u.Limits.MaxSubscriptions > 0
		}
		set.users[u.Name] = p
		set.connLimit = set.connLimit || p.hasConnLimit
		if u.Certificate != "" {
			if other, dup := set.certs[u.Certificate]; dup {
				return nil, fmt.Errorf("users %q and %q both have certificate %q", other.Name, u.Name, u.Certificate)
			}
			set.certs[u.Certificate] = p
		}
	}
	return set, nil
}

// same returns the principal of s declared exactly as u, or nil.
func (s *userSet) same(u User) *principal {
	if s == nil {
		return nil
	}
	if p := s.users[u.Name]; p != nil && reflect.DeepEqual(p.User, u) {
		return p
	}
	return nil
}

// Reload re-reads the TLS files and replaces the users with users, as a configuration
// reload (SIGHUP) does; on error nothing changes. A user removed or changed in any way
// (token, certificate, rules, limits) is revoked: its streams end with UNAUTHENTICATED and
// its clients must call again, as the new configuration says; a user declared exactly as
// before is untouched. Authentication cannot be turned on or off by a reload, nor can
// max_connections be set when no user had it at start (its bookkeeping is set up then).
func (a *Authenticator) Reload(users []User) error {
	if a == nil {
		if len(users) > 0 {
			return errors.New("users were added to a broker that started without any: authentication is turned on at start only; restart the broker")
		}
		return nil
	}
	a.reloading.Lock()
	defer a.reloading.Unlock()
	old := a.set.Load()
	set, err := newUserSet(users, old)
	if err != nil {
		return err
	}
	switch {
	case len(old.users) > 0 && len(set.users) == 0:
		return errors.New("the reload removes every user, which would turn authentication off: that needs a restart (and is refused on a non-loopback address)")
	case len(old.users) == 0 && len(set.users) > 0:
		return errors.New("users were added to a broker that started without any: authentication is turned on at start only; restart the broker")
	case set.connLimit && !old.connLimit:
		return errors.New("limits { max_connections } of a user: no user had it at start, and the connection bookkeeping it needs is set up then; restart the broker")
	}
	if a.tls != nil {
		if err := a.tls.load(); err != nil {
			return err
		}
	}
	a.set.Store(set)
	for name, p := range old.users {
		if set.users[name] != p {
			close(p.revoked)
		}
	}
	// The verified tokens of users declared as before stay verified (newUserSet kept their
	// principals): a reload does not send every client back to bcrypt, where a flood of
	// wrong tokens would make each wait its turn. Those of removed or changed users go.
	a.cacheMu.Lock()
	for k, p := range a.cache {
		if p.isRevoked() {
			delete(a.cache, k)
		}
	}
	a.cacheMu.Unlock()
	return nil
}

// Enabled reports whether calls must be authenticated: whether any user is configured.
func (a *Authenticator) Enabled() bool { return a != nil && len(a.set.Load().users) > 0 }

// Comparisons returns how many tokens were compared with a bcrypt hash since New: the work
// logins cost (a flood of wrong tokens refused at once costs none).
func (a *Authenticator) Comparisons() uint64 { return a.verify.comparisons() }

// Counts returns the authentication failures and permission denials since New.
func (a *Authenticator) Counts() (authFailures, denials uint64) {
	return a.authFailures.Load(), a.denials.Load()
}

// authenticate identifies the caller of ctx: by its token if it sent one, else by its
// verified client certificate.
func (a *Authenticator) authenticate(ctx context.Context) (*principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if vals := md.Get("authorization"); len(vals) > 0 {
		return a.byToken(ctx, vals[0])
	}
	ids := certIdentities(ctx)
	certs := a.set.Load().certs
	for _, id := range ids {
		if p := certs[id]; p != nil {
			return p, nil
		}
	}
	if len(ids) > 0 {
		return nil, a.unauthenticated(ctx, "", "client certificate %s names no user: add certificate = %q to a user block, or send a token", strings.Join(ids, ", "), ids[0])
	}
	return nil, a.unauthenticated(ctx, "", "this broker requires authentication: send the metadata \"authorization: Bearer USER:TOKEN\" (tinybroker --token or TINYBROKER_TOKEN) or a client certificate of a user")
}

func (a *Authenticator) byToken(ctx context.Context, header string) (*principal, error) {
	key := sha256.Sum256([]byte(header))
	a.cacheMu.Lock()
	p := a.cache[key]
	a.cacheMu.Unlock()
	if p != nil && !p.isRevoked() {
		return p, nil
	}
	cred, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return nil, a.unauthenticated(ctx, "", "the authorization metadata must be \"Bearer USER:TOKEN\"")
	}
	name, token, ok := strings.Cut(cred, ":")
	if !ok {
		return nil, a.unauthenticated(ctx, "", "the token must be USER:TOKEN, the user's name, a colon and the token")
	}
	p = a.set.Load().users[name]
	hash := dummyHash
	if p != nil && len(p.tokenHash) > 0 {
		hash = p.tokenHash
	}
	queue := name // bcrypt takes tens of milliseconds of CPU: its turns are shared out by name
	if p == nil || len(p.tokenHash) == 0 {
		queue = unknownName
	}
	if err := a.verify.acquire(ctx, queue); err != nil {
		if r, ok := err.(refusal); ok {
			return nil, a.refuse(ctx, name, codes.Unavailable, r.msg)
		}
		return nil, status.FromContextError(err).Err()
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(token))
	matched := err == nil && p != nil && len(p.tokenHash) > 0
	a.verify.release(queue, matched)
	if !matched {
		return nil, a.unauthenticated(ctx, name, "unknown user or wrong token for user %q", name)
	}
	a.cacheMu.Lock()
	if len(a.cache) >= maxCachedTokens {
		clear(a.cache)
	}
	a.cache[key] = p
	a.cacheMu.Unlock()
	return p, nil
}

// certIdentities returns the identities of the caller's verified client certificate:
// "CN=..." and its SANs.
func certIdentities(ctx context.Context) []string {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	// The server's TLS configuration (tls.go) asks for client certificates only with a
	// client_ca_file, and verifies every one it gets against it in VerifyConnection, which
	// fails the handshake otherwise: a certificate here is verified (VerifiedChains stays
	// empty since crypto/tls did not do it itself).
	return Identities(ti.State.PeerCertificates[0])
}

// Identities returns the names by which a user's certificate field can name c.
func Identities(c *x509.Certificate) []string {
	var ids []string
	if c.Subject.CommonName != "" {
		ids = append(ids, "CN="+c.Subject.CommonName)
	}
	for _, d := range c.DNSNames {
		ids = append(ids, "DNS:"+d)
	}
	for _, u := range c.URIs {
		ids = append(ids, "URI:"+u.String())
	}
	for _, e := range c.EmailAddresses {
		ids = append(ids, "EMAIL:"+e)
	}
	return ids
}

func peerAddr(ctx context.Context) string {
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		return pr.Addr.String()
	}
	return "unknown"
}

// unauthenticated counts and logs an authentication failure and returns its status.
func (a *Authenticator) unauthenticated(ctx context.Context, user, format string, args ...any) error {
	return a.refuse(ctx, user, codes.Unauthenticated, fmt.Sprintf(format, args...))
}

// refuse counts and logs an authentication failure and returns its status with code.
func (a *Authenticator) refuse(ctx context.Context, user string, code codes.Code, msg string) error {
	n := a.authFailures.Add(1)
	a.logs.warn(a.log, "authentication failed", "user", user, "peer", peerAddr(ctx), "reason", msg, "auth_failures_total", n)
	return status.Error(code, "tinybroker: "+msg)
}

// Caller is an authenticated caller of one RPC or stream. A nil *Caller (authentication
// off) may do anything.
type Caller struct {
	p    *principal
	peer string
	a    *Authenticator
}

// Revoked is closed when a configuration reload removed or changed the caller's user (nil
// for a nil Caller: never). A stream of the caller's ends then, with Valid's error.
func (c *Caller) Revoked() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.p.revoked
}

// Valid returns UNAUTHENTICATED if a reload revoked the caller's user, else nil.
func (c *Caller) Valid() error {
	if c == nil || !c.p.isRevoked() {
		return nil
	}
	return status.Errorf(codes.Unauthenticated, "tinybroker: user %q was removed or changed by a configuration reload; call again with the credentials the configuration now gives", c.p.Name)
}

// Name returns the caller's user name ("" for a nil Caller).
func (c *Caller) Name() string {
	if c == nil {
		return ""
	}
	return c.p.Name
}

// deny counts and logs a permission denial and returns its status; rule names the rule.
func (c *Caller) deny(what, rule, why string) error {
	n := c.a.denials.Add(1)
	c.a.logs.warn(c.a.log, "permission denied", "user", c.p.Name, "peer", c.peer, "request", what, "rule", rule, "reason", why, "denials_total", n)
	return status.Errorf(codes.PermissionDenied, "tinybroker: user %q may not %s: %s (%s)", c.p.Name, what, why, rule)
}

// check asks allows, the Topic or Pattern method of the user's rules of kind, whether the
// caller may do verb to s, and denies it if not.
func (c *Caller) check(allows func(string) (bool, string), kind, verb, s string) error {
	if err := c.Valid(); err != nil {
		return err
	}
	if ok, why := allows(s); !ok {
		return c.deny(fmt.Sprintf("%s %q", verb, s), fmt.Sprintf("user %q %s rules", c.p.Name, kind), why)
	}
	return nil
}

// Publish checks that the caller may publish to topic.
func (c *Caller) Publish(topic string) error {
	if c == nil {
		return nil
	}
	return c.check(c.p.Publish.Topic, "publish", "publish to", topic)
}

// Subscribe checks that the caller may open o — every pattern, and for a consumer group its
// subscription_id — and gives o the user's quota.
func (c *Caller) Subscribe(o *broker.SubscribeOptions) error {
	if c == nil {
		return nil
	}
	for _, pat := range o.Patterns {
		if err := c.check(c.p.Subscribe.Pattern, "subscribe", "subscribe to", pat); err != nil {
			return err
		}
	}
	if o.Mode == broker.Balanced {
		if err := c.balanced(o); err != nil {
			return err
		}
	}
	o.Quota = c.p.quota
	return nil
}

// Join checks that the caller may be a member of the consumer group of subscription_id id,
// and so ack, nack and touch its messages.
func (c *Caller) Join(id string) error {
	if c == nil {
		return nil
	}
	return c.check(c.p.Groups.Topic, "groups", "join consumer group", id)
}

// Admin checks that the caller may call an admin method.
func (c *Caller) Admin(method string) error {
	if c == nil {
		return nil
	}
	if err := c.Valid(); err != nil {
		return err
	}
	if c.p.Admin {
		return nil
	}
	return c.deny("call "+method, fmt.Sprintf("user %q admin", c.p.Name), "only users with admin = true may")
}

// AdminCall authenticates a call of an admin-only service (tinybroker.admin.v1.Admin, through
// the server's one admin hook) and refuses it unless the caller is an admin. Without users
// every call is allowed. The per-user connection limits do not count admin calls.
func (a *Authenticator) AdminCall(ctx context.Context, method string) error {
	if !a.Enabled() {
		return nil
	}
	p, err := a.authenticate(ctx)
	if err != nil {
		return err
	}
	c := &Caller{p: p, peer: peerAddr(ctx), a: a}
	return c.Admin(method[strings.LastIndexByte(method, '/')+1:])
}

// TakeSubscription counts one more open subscription of the caller, or refuses it past the
// user's max_subscriptions. Give it back with ReleaseSubscriptions.
func (c *Caller) TakeSubscription() error {
	if c == nil || c.p.Limits.MaxSubscriptions <= 0 {
		return nil
	}
	if n := c.p.subs.Add(1); n > int64(c.p.Limits.MaxSubscriptions) {
		c.p.subs.Add(-1)
		return c.limit("subscriptions", c.p.Limits.MaxSubscriptions, "max_subscriptions", "close some")
	}
	return nil
}

// ReleaseSubscriptions gives back n subscriptions taken with TakeSubscription.
func (c *Caller) ReleaseSubscriptions(n int) {
	if c != nil && c.p.Limits.MaxSubscriptions > 0 {
		c.p.subs.Add(-int64(n))
	}
}

// CountsSubscriptions reports whether the caller's subscriptions are counted (TakeSubscription
// can refuse).
func (c *Caller) CountsSubscriptions() bool { return c != nil && c.p.Limits.MaxSubscriptions > 0 }

func (c *Caller) limit(what string, max int, setting, fix string) error {
	n := c.a.denials.Add(1)
	c.a.logs.warn(c.a.log, "per-user limit reached", "user", c.p.Name, "peer", c.peer, "limit", setting, "max", max, "denials_total", n)
	return status.Errorf(codes.ResourceExhausted, "tinybroker: user %q has %d %s open, the most the user may have (limits { %s } of the user); %s", c.p.Name, max, what, setting, fix)
}

type callerKey struct{}

// FromContext returns the Caller the interceptors stored in ctx; nil when authentication
// is off.
func FromContext(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// logLimiter lets through at most burst (default logBurst) warnings a second, and says how
// many it held back on the next line it lets through.
type logLimiter struct {
	burst      int
	mu         sync.Mutex
	second     int64
	n          int
	suppressed int
}

const logBurst = 10

func (l *logLimiter) warn(log hclog.Logger, msg string, args ...any) {
	now := time.Now().Unix()
	l.mu.Lock()
	if now != l.second {
		if l.suppressed > 0 {
			args = append(args, "suppressed_before", l.suppressed)
		}
		l.second, l.n, l.suppressed = now, 0, 0
	}
	l.n++
	if l.n > cmp.Or(l.burst, logBurst) {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	log.Warn(msg, args...)
}
