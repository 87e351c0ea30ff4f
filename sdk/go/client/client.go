// Package client is the Go client library for tinybroker.
//
// Dial a broker, then publish with [Client.Publish] (one unary call per message) or with a
// [Publisher] (pipelined: many messages in flight on one stream), and consume with
// [Client.Subscribe], which runs a [Handler] on worker goroutines, acks what it handled and
// reconnects when the broker restarts.
//
//	c, err := client.Dial("127.0.0.1:7878")
//	...
//	defer c.Close()
//	sub, err := c.Subscribe(ctx, client.SubscribeOptions{
//		ID: "thumbnails", Patterns: []string{"jobs.thumb.*"},
//		Mode: client.Balanced, Group: "thumbnailers", Concurrency: 4,
//	}, func(ctx context.Context, m *client.Message) error {
//		return resize(ctx, m.Payload) // nil acks, an error nacks (redelivered later)
//	})
//
// Delivery is at least once for balanced subscriptions: a message whose ack does not reach
// the broker (the member crashed, the connection broke) is delivered again, with
// [Message.Redelivered] set. Fanout subscriptions get each message at most once.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tinybroker/tinybroker/internal/grpcbuf"
	"github.com/tinybroker/tinybroker/internal/nodes"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// DefaultAddr is where `tinybroker serve` (and `make run`) listens by default.
const DefaultAddr = "127.0.0.1:7878"

// ErrClosed is returned by operations on a Client, Publisher or Subscription that was closed.
var ErrClosed = errors.New("tinybroker: closed")

// Option configures Dial.
type Option func(*config)

type config struct {
	dialOpts         []grpc.DialOption
	tls              *tls.Config
	token            string
	keepaliveTime    time.Duration
	keepaliveTimeout time.Duration
	backoffMin       time.Duration
	backoffMax       time.Duration
}

// WithDialOptions adds gRPC dial options, applied after the defaults (so they win), e.g.
// transport credentials for a broker behind TLS.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithTLS connects over TLS with cfg (ServerName, RootCAs for a private CA, Certificates for
// a client certificate); nil takes the system's roots. Without it Dial connects in
// plaintext.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		c.tls = cfg
	}
}

// WithToken authenticates every call as a user of the broker's configuration: token is
// "USER:TOKEN", sent as the metadata "authorization: Bearer USER:TOKEN". Use it with
// WithTLS unless the broker is on this machine: the token is sent as it is.
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithKeepalive sets how long a connection may be idle before the client pings the broker
// (default 20s; gRPC's minimum is 10s, and the broker refuses pings more often than every 5s)
// and how long it waits for the answer before it declares the connection dead (default 10s).
func WithKeepalive(interval, timeout time.Duration) Option {
	return func(c *config) { c.keepaliveTime, c.keepaliveTimeout = interval, timeout }
}

// WithReconnectBackoff sets how long a subscription waits before it re-opens a broken
// stream: first min, doubling after each failed attempt up to max (defaults 50ms and 5s).
// It also caps gRPC's own reconnection backoff at max.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(c *config) { c.backoffMin, c.backoffMax = min, max }
}

// Client is a connection to one broker. It is safe for concurrent use. Close it when done.
type Client struct {
	addr string
	cfg  config
	conn *grpc.ClientConn
	api  pb.BrokerClient

	mu      sync.Mutex
	closed  bool
	closers map[closer]struct{} // open publishers and subscriptions
}

type closer interface{ Close() error }

// Dial returns a Client for the broker at addr ("host:port"), without TLS unless WithTLS. It does not wait
// for the connection: the first call connects, and fails with codes.Unavailable if no broker
// listens there.
//
// addr may list several nodes of a cluster, separated by commas ("a:7878,b:7878,c:7878"), as
// NATS clients take them. The client connects to the first that answers, in the order given,
// and when that connection breaks it connects to the next node that answers: unary calls
// made meanwhile fail with codes.Unavailable, and subscriptions re-open on the new node
// (with the backoff of WithReconnectBackoff). Under WithTLS each node's certificate is
// checked against its own host name, unless the tls.Config sets ServerName.
func Dial(addr string, opts ...Option) (*Client, error) {
	cfg := config{keepaliveTime: 20 * time.Second, keepaliveTimeout: 10 * time.Second,
		backoffMin: 50 * time.Millisecond, backoffMax: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.backoffMin <= 0 || cfg.backoffMax < cfg.backoffMin {
		return nil, fmt.Errorf("tinybroker: WithReconnectBackoff(%v, %v): need 0 < min <= max", cfg.backoffMin, cfg.backoffMax)
	}
	bo := backoff.DefaultConfig
	bo.MaxDelay = cfg.backoffMax
	bo.BaseDelay = min(bo.BaseDelay, cfg.backoffMax)
	creds := insecure.NewCredentials()
	if cfg.tls != nil {
		creds = credentials.NewTLS(cfg.tls)
	}
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.token != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(TokenCredentials(cfg.token)))
	}
	dialOpts = append(append(dialOpts,
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.keepaliveTime, Timeout: cfg.keepaliveTimeout}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodecV2(grpcbuf.Codec{})),
		experimental.WithBufferPool(grpcbuf.Pool),
		grpc.WithInitialWindowSize(grpcbuf.StreamWindow), grpc.WithInitialConnWindowSize(grpcbuf.ConnWindow),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second})),
		cfg.dialOpts...)
	target, resolverOpt, err := nodes.Target(addr)
	if err != nil {
		return nil, fmt.Errorf("tinybroker: %w", err)
	}
	if resolverOpt != nil {
		dialOpts = append([]grpc.DialOption{resolverOpt}, dialOpts...)
	}
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("tinybroker: dial %q: %w", addr, err)
	}
	return &Client{addr: addr, cfg: cfg, conn: conn, api: pb.NewBrokerClient(conn), closers: make(map[closer]struct{})}, nil
}

// Addr returns the address the client was dialed with.
func (c *Client) Addr() string { return c.addr }

// Close closes every Publisher and Subscription opened on c (see their Close), then the
// connection. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	open := make([]closer, 0, len(c.closers))
	for cl := range c.closers {
		open = append(open, cl)
	}
	c.closers = nil
	c.mu.Unlock()
	for _, cl := range open {
		_ = cl.Close() // their errors belong to their owners, who may still ask
	}
	return c.conn.Close()
}

// track registers cl to be closed by Close; it fails if c is closed.
func (c *Client) track(cl closer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.closers[cl] = struct{}{}
	return nil
}

func (c *Client) untrack(cl closer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.closers, cl)
}

// PublishResult says what became of a published message.
type PublishResult struct {
	// SystemID identifies the message in this broker process.
	SystemID string
	// Routed is the number of fanout subscriptions and consumer groups the message went to;
	// 0 means no subscription matched and the message was dropped, or a plugin dropped it,
	// or it is delayed ([WithDelay]: it is routed when due).
	Routed int
	// DroppedBy names the plugin that dropped the message, and DropReason says why; both
	// empty unless a plugin dropped it.
	DroppedBy, DropReason string
	// Duplicate: the broker had the message already (its message id, within the broker's
	// dedupe window: a retry after a lost confirmation). Nothing was published again; the
	// rest is the first publish's result.
	Duplicate bool
}

// PublishOption changes one Client.Publish.
type PublishOption func(*pb.PublishRequest)

// WithMessageID publishes the message under id (at most 128 bytes) instead of a random
// one: the broker publishes a message of one id at most once within its dedupe window
// (limits { dedupe_window }, 2 minutes by default), so a publish retried with the same id,
// by this process or another of the same user after a crash, is not published twice. Use
// an id that names the message in the application (an order number, a hash of the event).
func WithMessageID(id string) PublishOption {
	return func(r *pb.PublishRequest) { r.MessageId = id }
}

// WithKey gives the message an ordering and fairness key (at most 256 bytes of printable
// text): a consumer group with Ordering OrderingKey delivers the messages of one key one at
// a time, in publish order, and one with FairBy "key" takes turns across keys. Use what
// must be processed in order (an order id, an account) or what must not crowd out others
// (a tenant).
func WithKey(key string) PublishOption {
	return func(r *pb.PublishRequest) { r.Key = key }
}

// WithPriority gives the message a priority, 0 (the default) to 9, higher first: a
// consumer group declared with a max_priority delivers, of the messages that may go now,
// one of the highest priority first; other groups ignore it. A negative p counts as 0; over
// 9 is refused (codes.InvalidArgument). See README.md, "Priorities".
func WithPriority(p int) PublishOption {
	return func(r *pb.PublishRequest) { r.Priority = uint32(max(p, 0)) }
}

// WithTTL makes the message expire ttl after the broker accepted it: a consumer group never
// delivers it after that, and dead-letters it with reason "expired" (or drops it, as the
// group's on_expire says).
func WithTTL(ttl time.Duration) PublishOption {
	return func(r *pb.PublishRequest) { r.Ttl = durationpb.New(ttl) }
}

// WithDelay makes the broker hold the message and publish it d after it accepted it, to
// the subscriptions and groups subscribed then; Publish answers at once with the system_id
// it will be delivered under (Routed 0). At most the broker's max_delay (24h by default);
// on the memory engine a delayed message is lost if the broker restarts (the JetStream
// engine stores it). Give WithDelay or WithDeliverAt, not both.
func WithDelay(d time.Duration) PublishOption {
	return func(r *pb.PublishRequest) { r.DeliverAfter = durationpb.New(d) }
}

// WithDeliverAt is WithDelay until the time t (on the broker's clock); a time already past
// publishes at once.
func WithDeliverAt(t time.Time) PublishOption {
	return func(r *pb.PublishRequest) { r.DeliverAt = timestamppb.New(t) }
}

// publishAttempts is how many times Publish sends a message whose confirmation was lost.
const publishAttempts = 4

// Publish publishes one message and waits for the broker to accept it. headers may be nil.
// Errors carry a gRPC status: codes.InvalidArgument for a bad topic or an oversize message,
// codes.ResourceExhausted when a consumer group is full, codes.Unavailable when the broker
// cannot be reached or is shutting down. For many messages, a [Publisher] is much faster.
//
// Every message carries a message id (random, unless [WithMessageID]), and a publish that
// fails with codes.Unavailable — the broker unreachable, restarting, or the connection lost
// before its answer came — is sent again with the same id, up to 4 times in all, after the
// reconnection back-off (WithReconnectBackoff) and while ctx lasts: the broker publishes
// it once whatever happened to the lost answers (PublishResult.Duplicate says a retry
// found it published).
func (c *Client) Publish(ctx context.Context, topic string, payload []byte, headers map[string]string, opts ...PublishOption) (PublishResult, error) {
	req := &pb.PublishRequest{Topic: topic, Payload: payload, Headers: headers}
	for _, o := range opts {
		o(req)
	}
	if req.MessageId == "" {
		req.MessageId = newMessageID()
	}
	var resp *pb.PublishResponse
	var err error
	wait := c.cfg.backoffMin
	for attempt := 1; ; attempt++ {
		resp, err = c.api.Publish(ctx, req)
		if err == nil || status.Code(err) != codes.Unavailable || attempt == publishAttempts || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, c.cfg.backoffMax)
	}
	if err != nil {
		return PublishResult{}, c.wrap(fmt.Sprintf("publish to %q", topic), err)
	}
	return PublishResult{SystemID: resp.GetSystemId(), Routed: int(resp.GetRouted()), DroppedBy: resp.GetDroppedBy(), DropReason: resp.GetDropReason(),
		Duplicate: resp.GetDuplicate()}, nil
}

// newMessageID returns a random message id: 16 bytes (128 bits, as a UUID's 122), in
// base64 (22 characters), which no two publishes meet by chance.
func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// wrap prefixes err with what was being done, keeping its gRPC status (status.Code still
// works on the result), and hints at the usual cause of codes.Unavailable: no broker there,
// or, when the TLS handshake failed, a TLS setting that does not match the broker's.
func (c *Client) wrap(what string, err error) error {
	if st, _ := status.FromError(err); st.Code() == codes.Unavailable && !strings.Contains(st.Message(), "shutting down") {
		if m := st.Message(); strings.Contains(m, "authentication handshake failed") || strings.Contains(m, "remote error: tls:") {
			return fmt.Errorf("tinybroker: %s: %w (the TLS handshake with %s failed: check WithTLS against the broker's tls block: RootCAs holding the CA of its certificate, a ServerName its certificate has, Certificates for a broker that asks for a client certificate)", what, err, c.addr)
		}
		return fmt.Errorf("tinybroker: %s: %w (is a broker running at %s? `tinybroker serve` or `make run` starts one)", what, err, c.addr)
	}
	return fmt.Errorf("tinybroker: %s: %w", what, err)
}

// TokenCredentials returns the credentials WithToken sends with every call, for code that
// dials the broker with gRPC itself.
func TokenCredentials(token string) credentials.PerRPCCredentials { return bearer("Bearer " + token) }

// bearer is a token sent with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(b)}, nil
}

// RequireTransportSecurity is false so that a broker on loopback without TLS can be used
// with a token; WithToken says to use TLS otherwise.
func (b bearer) RequireTransportSecurity() bool { return false }
