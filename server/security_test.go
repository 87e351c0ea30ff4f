package server_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/testcerts"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/sdk/go/client"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

// The security tests run a real server over TLS on a loopback port, with certificates made
// here: a CA, the server's certificate for 127.0.0.1, client certificates.

type secure struct {
	*testBroker
	ca    *testcerts.CA
	dir   string
	guard *auth.Authenticator
	files auth.TLSFiles
	users []auth.User
}

func hash(t *testing.T, token string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(token), bcrypt.MinCost) // fast for tests
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// startSecure serves users over TLS; with clientCA, client certificates signed by the CA are
// verified (required if require).
func startSecure(t *testing.T, users []auth.User, clientCA, require bool) *secure {
	t.Helper()
	ca, err := testcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := srv.Write(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	files := auth.TLSFiles{CertFile: cert, KeyFile: key, RequireClientCert: require}
	if clientCA {
		files.ClientCAFile = filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(files.ClientCAFile, ca.PEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	guard, err := auth.New(auth.Options{Users: users, TLS: &files})
	if err != nil {
		t.Fatal(err)
	}
	tb := startWith(t, brokertest.Options{}, server.Options{Auth: guard})
	return &secure{testBroker: tb, ca: ca, dir: dir, guard: guard, files: files, users: users}
}

// as returns a client of the broker over TLS, sending token if not empty and presenting
// cert if not nil.
func (s *secure) as(t *testing.T, token string, cert *testcerts.Pair) pb.BrokerClient {
	t.Helper()
	c, _ := s.conn(t, token, cert)
	return c
}

// conn is as, and returns the connection too.
func (s *secure) conn(t *testing.T, token string, cert *testcerts.Pair) (pb.BrokerClient, *grpc.ClientConn) {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1"}
	if cert != nil {
		c, err := cert.TLS()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	}
	conn, err := grpc.NewClient(s.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewBrokerClient(conn), conn
}

// countingHooks counts the publishes the plugin chain sees.
type countingHooks struct{ n atomic.Int64 }

func (h *countingHooks) OnPublish(*broker.Draft) (broker.PublishVerdict, error) {
	h.n.Add(1)
	return broker.PublishVerdict{}, nil
}
func (h *countingHooks) OnPublishBatch(ds []broker.Draft, _ []broker.PublishVerdict, _ []error) {
	h.n.Add(int64(len(ds)))
}
func (h *countingHooks) WantsAck(string) bool                  { return false }
func (h *countingHooks) WantsRedeliver(string) bool            { return false }
func (h *countingHooks) OnAck(*broker.AckEvent) []broker.Draft { return nil }
func (h *countingHooks) OnRedeliver(*broker.RedeliverEvent) broker.RedeliverVerdict {
	return broker.RedeliverVerdict{}
}

var testUsers = func(t *testing.T) []auth.User {
	return []auth.User{
		{Name: "alice", TokenHash: hash(t, "a-token"),
			Publish:   auth.Rules{Allow: []string{"orders.>"}, Deny: []string{"orders.secret.>"}},
			Subscribe: auth.Rules{Allow: []string{"orders.>"}, Deny: []string{"orders.secret.>"}},
			Groups:    auth.Rules{Allow: []string{"billing", "shipping.*"}}},
		{Name: "bob", TokenHash: hash(t, "b-token"),
			Subscribe: auth.Rules{Allow: []string{"orders.eu.*"}}},
		{Name: "root", TokenHash: hash(t, "r-token"), Admin: true},
	}
}

// TestPermissions: every rule allows what it should and refuses the rest with
// UNAUTHENTICATED or PERMISSION_DENIED and a message naming the rule; a refused publish
// reaches no plugin; health stays open.
func TestPermissions(t *testing.T) {
	s := startSecure(t, testUsers(t), false, false)
	hooks := &countingHooks{}
	s.b.SetHooks(hooks)
	ctx := context.Background()
	alice, bob, root := s.as(t, "alice:a-token", nil), s.as(t, "bob:b-token", nil), s.as(t, "root:r-token", nil)

	// Authentication.
	_, err := s.as(t, "", nil).Publish(ctx, &pb.PublishRequest{Topic: "orders.1"})
	wantCode(t, err, codes.Unauthenticated, "requires authentication")
	_, err = s.as(t, "alice:wrong", nil).Publish(ctx, &pb.PublishRequest{Topic: "orders.1"})
	wantCode(t, err, codes.Unauthenticated, `wrong token for user "alice"`)
	_, err = s.as(t, "mallory:a-token", nil).Publish(ctx, &pb.PublishRequest{Topic: "orders.1"})
	wantCode(t, err, codes.Unauthenticated, "unknown user")
	_, err = s.as(t, "a-token", nil).Publish(ctx, &pb.PublishRequest{Topic: "orders.1"})
	wantCode(t, err, codes.Unauthenticated, "USER:TOKEN")
	if _, err := healthpb.NewHealthClient(dialTLS(t, s)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without credentials: %v", err)
	}

	// Publish.
	if _, err := alice.Publish(ctx, &pb.PublishRequest{Topic: "orders.1"}); err != nil {
		t.Fatalf("alice publishes to orders.1: %v", err)
	}
	seen := hooks.n.Load()
	_, err = alice.Publish(ctx, &pb.PublishRequest{Topic: "orders.secret.x"})
	wantCode(t, err, codes.PermissionDenied, `matches deny "orders.secret.>"`)
	_, err = alice.Publish(ctx, &pb.PublishRequest{Topic: "invoices.1"})
	wantCode(t, err, codes.PermissionDenied, `no allow pattern covers it (allow ["orders.>"])`)
	_, err = bob.Publish(ctx, &pb.PublishRequest{Topic: "orders.eu.1"})
	wantCode(t, err, codes.PermissionDenied, `user "bob" may not publish to "orders.eu.1": the user has no allow rule`)
	if n := hooks.n.Load(); n != seen {
		t.Fatalf("refused publishes reached the plugin chain (%d calls)", n-seen)
	}
	// In a PublishStream frame, each message is checked: the allowed ones go through.
	ps, err := alice.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{{Topic: "orders.2"}, {Topic: "orders.secret.2"}, {Topic: "orders.3"}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := ps.Recv()
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 3 || r[0].GetSystemId() == "" || r[2].GetSystemId() == "" || codes.Code(r[1].GetCode()) != codes.PermissionDenied || !contains(r[1].GetError(), "deny") {
		t.Fatalf("PublishStream results %v", r)
	}
	ps.CloseSend()

	// Subscribe: patterns must be covered by an allow and overlap no deny.
	_, err = openOn(t, bob, fanout("", "orders.>"))
	wantCode(t, err, codes.PermissionDenied, `no allow pattern covers it (allow ["orders.eu.*"])`)
	_, err = openOn(t, alice, fanout("", "orders.*"))
	if err != nil {
		t.Fatalf("alice subscribes to orders.*: %v", err)
	}
	_, err = openOn(t, alice, fanout("", ">"))
	wantCode(t, err, codes.PermissionDenied, "deny") // checked first: the more telling reason
	_, err = openOn(t, alice, fanout("", "*.eu"))
	wantCode(t, err, codes.PermissionDenied, "no allow pattern covers it")
	_, err = openOn(t, alice, fanout("", "orders.*.>"))
	wantCode(t, err, codes.PermissionDenied, `can match topics of deny "orders.secret.>"`)
	_, err = openOn(t, bob, fanout("", "dlq.>"))
	wantCode(t, err, codes.PermissionDenied, "subscribe")
	sub := s.openAs(t, bob, fanout("", "orders.eu.*"))
	// A later open on the same stream is refused by a frame, in order.
	sub.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("x", "orders.us.*")}})
	ev := <-sub.events
	if ref := ev.GetRefused(); ref == nil || codes.Code(ref.GetCode()) != codes.PermissionDenied || !contains(ref.GetError(), `subscribe to "orders.us.*"`) {
		t.Fatalf("later open answered %v, want refused PERMISSION_DENIED", ev)
	}

	// Groups: joining, and the unary ack and nack of a group's messages.
	g := s.openAs(t, alice, balanced("billing", "billing", 1, "orders.*"))
	_, err = openOn(t, alice, balanced("audit", "audit", 1, "orders.*"))
	wantCode(t, err, codes.PermissionDenied, `join consumer group "audit"`)
	if _, err := openOn(t, alice, balanced("shipping.eu", "shipping.eu", 1, "orders.*")); err != nil {
		t.Fatalf("alice joins shipping.eu (allowed by shipping.*): %v", err)
	}
	if _, err := alice.Publish(ctx, &pb.PublishRequest{Topic: "orders.4"}); err != nil {
		t.Fatal(err)
	}
	m := g.next()
	_, err = bob.Ack(ctx, &pb.Ack{SubscriptionId: "billing", SystemId: m.GetSystemId()})
	wantCode(t, err, codes.PermissionDenied, `join consumer group "billing"`)
	_, err = bob.Nack(ctx, &pb.Nack{SubscriptionId: "billing", SystemId: m.GetSystemId()})
	wantCode(t, err, codes.PermissionDenied, `user "bob" groups rules`)
	if _, err := alice.Ack(ctx, &pb.Ack{SubscriptionId: "billing", SystemId: m.GetSystemId()}); err != nil {
		t.Fatalf("alice acks her group's message: %v", err)
	}

	// Admin.
	_, err = alice.Stats(ctx, &pb.StatsRequest{})
	wantCode(t, err, codes.PermissionDenied, "admin = true")
	_, err = bob.Reload(ctx, &pb.ReloadRequest{})
	wantCode(t, err, codes.PermissionDenied, "call Reload")
	if _, err := root.Stats(ctx, &pb.StatsRequest{}); err != nil {
		t.Fatalf("admin Stats: %v", err)
	}
	if failures, denials := s.guard.Counts(); failures < 4 || denials < 12 {
		t.Fatalf("counted %d authentication failures and %d denials", failures, denials)
	}
}

func (s *secure) openAs(t *testing.T, c pb.BrokerClient, o *pb.OpenSubscription) *sub {
	t.Helper()
	sb, err := openOn(t, c, o)
	if err != nil {
		t.Fatalf("open %v: %v", o, err)
	}
	return sb
}

func dialTLS(t *testing.T, s *secure) *grpc.ClientConn {
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestMTLS: a client certificate identifies its user; one naming no user, an expired one,
// one from another CA and none at all are refused.
func TestMTLS(t *testing.T) {
	users := []auth.User{{Name: "carol", Certificate: "CN=carol", Publish: auth.Rules{Allow: []string{"carol.>"}}},
		{Name: "svc", Certificate: "URI:spiffe://example/svc", Publish: auth.Rules{Allow: []string{"svc.>"}}}}
	s := startSecure(t, users, true, true)
	ctx := context.Background()
	sign := func(o testcerts.Options, ca *testcerts.CA) *testcerts.Pair {
		p, err := ca.Sign(o)
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	carol := s.as(t, "", sign(testcerts.Options{CommonName: "carol"}, s.ca))
	if _, err := carol.Publish(ctx, &pb.PublishRequest{Topic: "carol.1"}); err != nil {
		t.Fatalf("carol by certificate: %v", err)
	}
	_, err := carol.Publish(ctx, &pb.PublishRequest{Topic: "svc.1"})
	wantCode(t, err, codes.PermissionDenied, `user "carol" may not publish`)
	svc := s.as(t, "", sign(testcerts.Options{CommonName: "whatever", URIs: []string{"spiffe://example/svc"}}, s.ca))
	if _, err := svc.Publish(ctx, &pb.PublishRequest{Topic: "svc.1"}); err != nil {
		t.Fatalf("svc by its URI SAN: %v", err)
	}
	_, err = s.as(t, "", sign(testcerts.Options{CommonName: "dave"}, s.ca)).Publish(ctx, &pb.PublishRequest{Topic: "carol.1"})
	wantCode(t, err, codes.Unauthenticated, "client certificate CN=dave names no user")

	before, _ := s.guard.Counts()
	other, err := testcerts.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string]*testcerts.Pair{
		"expired":    sign(testcerts.Options{CommonName: "carol", NotAfter: time.Now().Add(-time.Minute)}, s.ca),
		"another CA": sign(testcerts.Options{CommonName: "carol"}, other),
		"none":       nil,
	} {
		_, err := s.as(t, "", cert).Publish(ctx, &pb.PublishRequest{Topic: "carol.1"})
		if code := status.Code(err); code != codes.Unavailable {
			t.Errorf("%s certificate: %v, want the handshake refused (UNAVAILABLE)", name, err)
		}
	}
	if after, _ := s.guard.Counts(); after < before+2 {
		t.Fatalf("refused certificates counted %d, want at least 2 (expired, another CA)", after-before)
	}
}

// TestTLSReload: Reload re-reads the certificate files; new connections get the new one.
func TestTLSReload(t *testing.T) {
	s := startSecure(t, nil, false, false)
	serial := func() string {
		conn, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	next, err := s.ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := next.Write(s.dir, "server"); err != nil {
		t.Fatal(err)
	}
	if serial() != first {
		t.Fatal("the certificate changed before the reload")
	}
	if err := s.guard.Reload(s.users); err != nil {
		t.Fatal(err)
	}
	if serial() == first {
		t.Fatal("the reload did not take the new certificate")
	}
	if err := os.WriteFile(s.files.KeyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.guard.Reload(s.users); err == nil {
		t.Fatal("a reload with a broken key succeeded")
	}
	serial() // the loaded certificate stays
}

// TestPerUserLimits: each per-user limit refuses with RESOURCE_EXHAUSTED naming it, while
// another user keeps being served.
func TestPerUserLimits(t *testing.T) {
	all := auth.Rules{Allow: []string{">"}}
	users := []auth.User{
		{Name: "lim", TokenHash: hash(t, "l"), Publish: all, Subscribe: all, Groups: all,
			Limits: auth.Limits{MaxConnections: 1, MaxStreams: 2, MaxSubscriptions: 2}},
		{Name: "grp", TokenHash: hash(t, "g"), Publish: all, Subscribe: all, Groups: all,
			Limits: auth.Limits{MaxGroups: 1, MaxQueuedBytes: 8 << 10}},
		{Name: "other", TokenHash: hash(t, "o"), Publish: all, Subscribe: all, Groups: all},
	}
	s := startSecure(t, users, false, false)
	ctx := context.Background()
	other := s.as(t, "other:o", nil)
	otherServed := func() {
		t.Helper()
		if _, err := other.Publish(ctx, &pb.PublishRequest{Topic: "other.ping"}); err != nil {
			t.Fatalf("the other user is refused: %v", err)
		}
	}

	// max_connections: a second connection of the user is refused until the first closes.
	lim1, conn1 := s.conn(t, "lim:l", nil)
	if _, err := lim1.Publish(ctx, &pb.PublishRequest{Topic: "a"}); err != nil {
		t.Fatal(err)
	}
	lim := s.as(t, "lim:l", nil)
	_, err := lim.Publish(ctx, &pb.PublishRequest{Topic: "a"})
	wantCode(t, err, codes.ResourceExhausted, "limits { max_connections } of the user")
	otherServed()
	conn1.Close()
	brokertest.Eventually(t, "the first connection's slot given back", func() bool {
		_, err := lim.Publish(ctx, &pb.PublishRequest{Topic: "a"})
		return err == nil
	})

	// max_subscriptions: over all of the user's streams; a closed one gives its place back.
	st := s.openAs(t, lim, fanout("s1", "x.>"))
	st.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("s2", "y.>")}})
	st.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("s3", "z.>")}})
	if ev := <-st.events; ev.GetSubscribed().GetSubscriptionId() != "s2" {
		t.Fatalf("second open answered %v", ev)
	}
	ev := <-st.events
	if ref := ev.GetRefused(); codes.Code(ref.GetCode()) != codes.ResourceExhausted || !contains(ref.GetError(), "limits { max_subscriptions } of the user") {
		t.Fatalf("third open answered %v, want RESOURCE_EXHAUSTED naming max_subscriptions", ev)
	}
	if _, err := openOn(t, other, fanout("", "x.>")); err != nil {
		t.Fatalf("the other user cannot subscribe: %v", err)
	}
	st.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Close{Close: &pb.CloseSubscription{SubscriptionId: "s1"}}})
	st.send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: fanout("s4", "w.>")}})
	if ev := <-st.events; ev.GetSubscribed().GetSubscriptionId() != "s4" {
		t.Fatalf("open after a close answered %v", ev)
	}

	// max_streams: the Subscribe stream is one; a PublishStream is the second; a third is refused.
	ps, err := lim.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{{Topic: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Recv(); err != nil {
		t.Fatal(err)
	}
	ps3, err := lim.PublishStream(ctx)
	if err == nil {
		_, err = ps3.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, "limits { max_streams } of the user")
	otherServed()
	ps.CloseSend()

	// max_groups and max_queued_bytes: the groups the user created, charged to the user.
	grp := s.as(t, "grp:g", nil)
	s.openAs(t, grp, balanced("g1", "g1", 1, "grp.>"))
	_, err = openOn(t, grp, balanced("g2", "g2", 1, "grp.>"))
	wantCode(t, err, codes.ResourceExhausted, "limits { max_groups } of the user")
	if !engine.GroupBounds { // the bytes a user's groups hold are a bound per group
		t.Logf("engine %s has no bounds per consumer group: max_queued_bytes of the user not tested", engine.Name)
		return
	}
	s.openAs(t, other, balanced("og", "og", 1, "grp.x"))
	payload := make([]byte, 1024)
	for range 20 {
		if _, err := other.Publish(ctx, &pb.PublishRequest{Topic: "grp.x", Payload: payload}); err != nil {
			t.Fatalf("publish to both groups: %v", err)
		}
	}
	g1, _ := s.b.Group("g1")
	og, _ := s.b.Group("og")
	if g1.Rejected == 0 || g1.Bytes > 8<<10 || og.Queued+og.InFlight != 20 {
		t.Fatalf("g1 (grp's budget) rejected %d, holds %d bytes; og holds %d+%d of 20", g1.Rejected, g1.Bytes, og.Queued, og.InFlight)
	}
	_, err = other.Publish(ctx, &pb.PublishRequest{Topic: "grp.y", Payload: payload})
	wantCode(t, err, codes.ResourceExhausted, `the byte budget of user "grp"'s consumer groups`)
}
