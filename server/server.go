// Package server adapts a broker.Engine (any engine) to the tinybroker.v1 gRPC protocol. It also registers
// the gRPC health service and server reflection, so grpcurl and health probes work.
package server

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/msgid"
	"github.com/tinybroker/tinybroker/internal/grpcbuf"
	"github.com/tinybroker/tinybroker/internal/wire"
	"github.com/tinybroker/tinybroker/plugins"
	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server/auth"
)

// Options configure a Server. Zero values take the defaults shown.
type Options struct {
	// KeepaliveTime: ping a client whose connection has been idle this long (30s).
	KeepaliveTime time.Duration
	// KeepaliveTimeout: close the connection if a ping is not answered in this long (10s);
	// a group member lost this way leaves its group and its messages are redelivered.
	KeepaliveTimeout time.Duration
	// MaxBatchMessages and MaxBatchBytes bound one server frame of messages (256, 64 KiB).
	MaxBatchMessages int
	MaxBatchBytes    int
	// MaxRecvBytes is the largest client frame accepted, a unary Publish or a frame of a
	// stream (default: ReceiveLimit of the broker's message limits, 1.375 MiB by default).
	MaxRecvBytes int
	// MaxHeaderBytes is the broker's header limit (64 KiB), used to size MaxRecvBytes.
	MaxHeaderBytes int
	// MaxHeaders is the broker's max_headers (broker.DefaultMaxHeaders): a message's headers
	// are decoded up to the first past it, the rest skipped, and the message refused by
	// the broker (INVALID_ARGUMENT).
	MaxHeaders int
	// MaxPublishBatch is the most messages one PublishStream frame may carry (4,096); a frame
	// with more ends its stream with RESOURCE_EXHAUSTED.
	MaxPublishBatch int
	// MaxStreamsPerConnection is HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS (4,096): gRPC
	// clients wait for a stream to end before opening more.
	MaxStreamsPerConnection int
	// MaxConnections is the most client connections open at once (4,096); further ones are
	// closed at once, counted and logged.
	MaxConnections int
	// MaxUnansweredOpens is how many opens of a Subscribe stream may wait for their answer
	// (65,536); past it the stream stops reading the client's frames until answers go out.
	MaxUnansweredOpens int
	// HandshakeTimeout is how long a new connection has to complete the HTTP/2 handshake
	// (10s); a connection that sends nothing, or only part of it, is closed.
	HandshakeTimeout time.Duration
	Logger           hclog.Logger
	// Reload backs the Reload RPC (nil: UNIMPLEMENTED); it returns the plugins now loaded.
	Reload func(ctx context.Context) ([]string, error)
	// Plugins reports the plugins' counters for Stats (nil: none).
	Plugins func() []plugins.PluginStats
	// Auth, if not nil, serves TLS if it has TLS files, and with users authenticates every
	// call, checks its permissions and applies the per-user limits (see server/auth). Stats
	// and Reload are for admins; health and reflection stay open.
	Auth *auth.Authenticator
	// AdminAuthorize, if set, is asked before every call of the tinybroker.admin.v1.Admin
	// service (see admin.go, adminGate): an error refuses the call with its status. By
	// default, with Auth's users, only admins may call it (auth.Authenticator.AdminCall);
	// without users every admin call is allowed.
	AdminAuthorize func(ctx context.Context, fullMethod string) error
	// PluginLifecycle backs the admin service's plugin RPCs (nil: UNIMPLEMENTED).
	PluginLifecycle PluginLifecycle
}

// Server serves the tinybroker.v1.Broker service over gRPC.
type Server struct {
	pb.UnimplementedBrokerServer
	b      broker.Engine
	opts   Options
	log    hclog.Logger
	grpc   *grpc.Server
	health *health.Server
	wg     sync.WaitGroup // goroutines started by handlers
	quit   chan struct{}  // closed when Shutdown starts
	once   sync.Once

	batches sync.Pool // *[]broker.Delivery of cap MaxBatchMessages, lent to a stream while it sends
	conns   atomic.Pointer[connLimiter]
	traffic traffic // for the metrics (metrics.go)
}

// New returns a Server for engine b. maxMessageBytes is the engine's payload limit, used to
// size the gRPC receive limit.
func New(b broker.Engine, maxMessageBytes int, opts Options) *Server {
	if opts.KeepaliveTime <= 0 {
		opts.KeepaliveTime = 30 * time.Second
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = 10 * time.Second
	}
	if opts.MaxBatchMessages <= 0 {
		opts.MaxBatchMessages = 256
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = 64 << 10
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = 64 << 10
	}
	if opts.MaxHeaders <= 0 {
		opts.MaxHeaders = broker.Limits{}.WithDefaults().MaxHeaders
	}
	if opts.MaxRecvBytes <= 0 {
		opts.MaxRecvBytes = ReceiveLimit(maxMessageBytes, opts.MaxHeaderBytes)
	}
	if opts.MaxPublishBatch <= 0 {
		opts.MaxPublishBatch = 4096
	}
	if opts.MaxStreamsPerConnection <= 0 {
		opts.MaxStreamsPerConnection = 4096
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 4096
	}
	if opts.MaxUnansweredOpens <= 0 {
		opts.MaxUnansweredOpens = 65_536
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Server{b: b, opts: opts, log: opts.Logger, health: health.NewServer(), quit: make(chan struct{})}
	s.batches.New = func() any {
		b := make([]broker.Delivery, 0, opts.MaxBatchMessages)
		return &b
	}
	grpcOpts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(wire.ServerCodec(opts.MaxHeaders)),
		experimental.BufferPool(grpcbuf.Pool),
		grpc.MaxRecvMsgSize(opts.MaxRecvBytes),
		grpc.MaxConcurrentStreams(uint32(min(uint64(opts.MaxStreamsPerConnection), math.MaxUint32))),
		grpc.ConnectionTimeout(opts.HandshakeTimeout),
		grpc.InitialWindowSize(grpcbuf.StreamWindow),
		grpc.InitialConnWindowSize(grpcbuf.ConnWindow),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: opts.KeepaliveTime, Timeout: opts.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if opts.Auth != nil {
		grpcOpts = append(grpcOpts, opts.Auth.ServerOptions(pb.Broker_ServiceDesc.ServiceName, "Stats", "Reload")...)
		if s.opts.AdminAuthorize == nil && opts.Auth.Enabled() {
			s.opts.AdminAuthorize = opts.Auth.AdminCall
		}
	}
	grpcOpts = append(grpcOpts, grpc.ChainUnaryInterceptor(s.adminGate))
	s.grpc = grpc.NewServer(grpcOpts...)
	pb.RegisterBrokerServer(s.grpc, s)
	adminpb.RegisterAdminServer(s.grpc, &adminServer{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.setHealth()
	s.wg.Go(s.watchReady)
	return s
}

// readyEvery is how often the health service asks the engine whether it serves.
const readyEvery = time.Second

// setHealth sets the health service's status from the engine's readiness: SERVING, or
// NOT_SERVING while the engine cannot serve (a JetStream engine that cannot reach its NATS
// server or its cluster), the state the HTTP listener's /readyz reports too.
func (s *Server) setHealth() {
	st := healthpb.HealthCheckResponse_SERVING
	if s.b.Ready() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(pb.Broker_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus(adminpb.Admin_ServiceDesc.ServiceName, st)
}

// watchReady keeps the health service's status up to date until Shutdown.
func (s *Server) watchReady() {
	t := time.NewTicker(readyEvery)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.setHealth()
		}
	}
}

// ReceiveLimit is the largest client frame the server accepts by default: a message at both
// limits, with room for its headers' framing (twice their counted size) and its topic, and
// for the framing of the messages of a PublishStream frame (256 KiB). It bounds what one
// unary call or stream frame makes the server allocate before the broker sees it.
func ReceiveLimit(maxMessageBytes, maxHeaderBytes int) int {
	return maxMessageBytes + 2*maxHeaderBytes + 256<<10
}

// Serve accepts connections on lis until Shutdown, at most MaxConnections at once. It returns
// nil after a Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	return ServeError(s.grpc.Serve(s.limitConns(lis)), grpc.ErrServerStopped)
}

// ServeError is what a Serve method returns when the server it runs returned err: nil if err
// is stopped, the error that server returns once it has been shut down, else err.
func ServeError(err, stopped error) error {
	if errors.Is(err, stopped) {
		return nil
	}
	return err
}

// Shutdown marks the server NOT_SERVING, shuts the broker down (refusing new work, waiting
// until ctx is done for in-flight acks, then ending every subscription with UNAVAILABLE), and
// stops the gRPC server, closing streams that are still open. It waits for every goroutine
// the server started. Idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		close(s.quit)
		s.health.Shutdown()
		err = s.b.Shutdown(ctx)
		stopped := make(chan struct{})
		s.wg.Go(func() { // waited for below, with the handlers' goroutines
			s.grpc.GracefulStop()
			close(stopped)
		})
		t := time.NewTimer(time.Second) // idle publish streams would hold GracefulStop forever
		select {
		case <-stopped:
		case <-t.C:
			s.grpc.Stop()
			<-stopped
		}
		t.Stop()
		s.wg.Wait()
	})
	return err
}

// Publish implements the unary publish.
func (s *Server) Publish(ctx context.Context, req *pb.PublishRequest) (*pb.PublishResponse, error) {
	caller := auth.FromContext(ctx)
	if err := caller.Publish(req.GetTopic()); err != nil {
		return nil, err
	}
	var res broker.PublishResult
	err := s.tooManyHeaders(len(req.GetHeaders()))
	if err == nil {
		err = msgid.Check(req.GetMessageId())
	}
	switch {
	case err != nil:
	case req.GetMessageId() == "" && req.GetKey() == "" && req.GetTtl() == nil && req.GetDeliverAfter() == nil && req.GetDeliverAt() == nil && req.GetPriority() == 0:
		res, err = s.b.Publish(req.GetTopic(), req.GetPayload(), req.GetHeaders())
	default: // a message id, a key, a ttl, a delay or a priority: only PublishBatch takes them
		res, err = s.publishOnce(caller, req)
	}
	if err != nil {
		s.traffic.refuse(codeOf(err))
		return nil, toStatus(err)
	}
	if !res.Duplicate {
		s.traffic.publishedBytes.Add(uint64(len(req.GetPayload())))
	}
	if res.DroppedBy != "" {
		s.log.Debug("publish dropped by a plugin", "topic", req.GetTopic(), "plugin", res.DroppedBy, "reason", res.DropReason)
	}
	return &pb.PublishResponse{SystemId: res.SystemID, Routed: uint32(res.Routed), DroppedBy: res.DroppedBy, DropReason: res.DropReason, Duplicate: res.Duplicate}, nil
}

// publishOnce publishes a message that has a message_id (under the caller's dedupe key,
// msgid.Key), a key, a ttl or a delay, as a frame of one.
func (s *Server) publishOnce(caller *auth.Caller, req *pb.PublishRequest) (broker.PublishResult, error) {
	d := [1]broker.Draft{{Topic: req.GetTopic(), Payload: req.GetPayload(), Headers: broker.MakeHeaders(req.GetHeaders()), Key: req.GetKey(),
		TTL: wire.TTL(req.GetTtl()), Priority: uint8(min(req.GetPriority(), 255))}} // over 9 is refused, never wrapped into range
	d[0].DeliverAfter, d[0].DeliverAt = wire.Delay(req.GetDeliverAfter(), req.GetDeliverAt())
	if req.GetMessageId() != "" {
		d[0].ID = msgid.Key(caller.Name(), req.GetMessageId())
	}
	var res [1]broker.PublishResult
	var errs [1]error
	s.b.PublishBatch(d[:], res[:], errs[:])
	return res[0], errs[0]
}

// PublishStream publishes every frame's messages in order and confirms each frame. When the
// server shuts down the stream ends with UNAVAILABLE.
func (s *Server) PublishStream(stream grpc.BidiStreamingServer[pb.PublishStreamRequest, pb.PublishStreamResponse]) error {
	// Recv cannot be interrupted, so the stream is served by a second goroutine — read a
	// frame, publish its messages, answer — while this one only watches for shutdown. Reading
	// and publishing on one goroutine spares a hand-off (and a thread wake-up) per frame.
	// Frames are decoded by hand (internal/wire/publish.go).
	s.traffic.publishStreams.Add(1)
	defer s.traffic.publishStreams.Add(-1)
	done := make(chan error, 1)
	s.wg.Go(func() {
		done <- s.servePublish(stream)
	})
	ctx := stream.Context()
	caller := auth.FromContext(ctx)
	select {
	case err := <-done:
		return err
	case <-caller.Revoked(): // a reload removed or changed the user
		return caller.Valid()
	case <-s.quit:
		// The server goroutine may be inside SendMsg: gRPC ends the stream once this returns,
		// and its next call fails.
		return status.Error(codes.Unavailable, "broker shutting down: publish to its replacement")
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// servePublish reads, publishes and answers a PublishStream's frames until it ends.
func (s *Server) servePublish(stream grpc.BidiStreamingServer[pb.PublishStreamRequest, pb.PublishStreamResponse]) error {
	f := &wire.PublishFrame{MaxMsgs: s.opts.MaxPublishBatch, MaxHeaders: s.opts.MaxHeaders}
	var results []wire.PublishResult
	var res []broker.PublishResult
	var errs []error
	caller := auth.FromContext(stream.Context()) // nil without authentication: no check
	for {
		if err := stream.RecvMsg(f); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if f.TooMany {
			return status.Errorf(codes.ResourceExhausted, "PublishStream frame %d carries more than %d messages, the limit per frame (limits { max_publish_batch }); none of it was published: send at most %d messages per frame",
				f.Seq, s.opts.MaxPublishBatch, s.opts.MaxPublishBatch)
		}
		n := len(f.Msgs)
		results = slices.Grow(results[:0], n)[:n]
		res, errs = slices.Grow(res[:0], n)[:n], slices.Grow(errs[:0], n)[:n]
		if caller == nil && !f.HeadersOver && !f.IDs {
			s.b.PublishBatch(f.Msgs, res, errs)
		} else {
			s.publishAllowed(caller, f.Msgs, res, errs)
		}
		failed := false
		budget := answerBudget(f.Size)
		published := 0
		for i, err := range errs {
			if err != nil {
				code := codeOf(err)
				s.traffic.refuse(code)
				msg := omittedError
				if budget > 0 {
					msg = errorText(err)
					budget -= len(msg)
				}
				results[i] = wire.PublishResult{Code: uint32(code), Err: msg}
				failed = true
			} else {
				results[i] = wire.PublishResult{SystemID: res[i].SystemID, Routed: uint32(res[i].Routed), Duplicate: res[i].Duplicate}
				if !res[i].Duplicate { // a duplicate is not an error: errors_only leaves it unanswered
					published += len(f.Msgs[i].Payload)
				}
			}
		}
		clear(res)
		clear(errs)
		s.traffic.publishedBytes.Add(uint64(published))
		if f.ErrorsOnly && !failed {
			clear(results)
			continue
		}
		frame := wire.EncodePublishResponse(f.Seq, results)
		clear(results)
		if err := stream.SendMsg(frame); err != nil {
			return err
		}
	}
}

// tooManyHeaders refuses a message of n headers past max_headers. The decoders stop at the
// first header past it (wire.PublishFrame, wire.ServerCodec), so the server, not the engine,
// refuses such a message: it holds only part of its headers.
func (s *Server) tooManyHeaders(n int) error {
	if n > s.opts.MaxHeaders {
		return broker.Limits{MaxHeaders: s.opts.MaxHeaders}.TooManyHeaders()
	}
	return nil
}

// publishAllowed publishes the messages of msgs the caller (nil: anyone) may publish and
// that have at most max_headers headers and a valid message_id, as one batch, and writes
// every message's outcome to res and errs: a refusal for the others. A message_id becomes
// the caller's dedupe key (msgid.Key).
func (s *Server) publishAllowed(caller *auth.Caller, msgs []broker.Draft, res []broker.PublishResult, errs []error) {
	refused := 0
	for i, m := range msgs {
		var err error
		if caller != nil {
			err = caller.Publish(m.Topic)
		}
		if err == nil {
			err = s.tooManyHeaders(len(m.Headers))
		}
		if err == nil && m.ID != "" {
			if err = msgid.Check(m.ID); err == nil {
				msgs[i].ID = msgid.Key(caller.Name(), m.ID)
			}
		}
		res[i], errs[i] = broker.PublishResult{}, err
		if err != nil {
			refused++
		}
	}
	if refused == 0 {
		s.b.PublishBatch(msgs, res, errs)
		return
	}
	at := make([]int, 0, len(msgs)-refused) // a frame with refusals: rare, so allocated
	var some []broker.Draft
	for i, m := range msgs {
		if errs[i] == nil {
			some, at = append(some, m), append(at, i)
		}
	}
	partRes, partErrs := make([]broker.PublishResult, len(some)), make([]error, len(some))
	s.b.PublishBatch(some, partRes, partErrs)
	for j, i := range at {
		res[i], errs[i] = partRes[j], partErrs[j]
	}
}

// Subscribe opens a subscription from the first frame, then sends batches of messages while
// a second goroutine reads acks, nacks, touches, and opens and closes of further
// subscriptions on the same stream. Closing the send side leaves every consumer group the
// stream is a member of, once the frames sent before are applied: that is the clean way to
// leave (cancelling the stream may lose acks still in the client's buffers). A stream left
// with no subscription then ends with OK; fanout subscriptions keep receiving.
func (s *Server) Subscribe(stream grpc.BidiStreamingServer[pb.SubscribeRequest, pb.SubscribeResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		if err == io.EOF {
			return status.Error(codes.InvalidArgument, "Subscribe stream closed before its first frame; send an OpenSubscription first")
		}
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return status.Error(codes.InvalidArgument, "the first frame of a Subscribe stream must carry open (an OpenSubscription); acks come after it")
	}
	st := s.b.NewStream(wire.DeliverySize)
	defer st.Close()
	subs := newSubCount(auth.FromContext(stream.Context()))
	defer subs.end()
	peerAddr := peerOf(stream.Context())
	if err := subs.open(st, subscribeOptions(open, peerAddr), false); err != nil {
		s.traffic.refuseSub(codeOf(err))
		return toStatus(err)
	}
	s.traffic.subscribeStreams.Add(1)
	defer s.traffic.subscribeStreams.Add(-1)

	unanswered := &opens{answered: make(chan struct{}, 1)}
	unanswered.n.Store(1) // the first
	recvErr := make(chan error, 1)
	s.wg.Go(func() {
		recvErr <- s.receive(stream, st, unanswered, subs, peerAddr)
	})

	ctx := stream.Context()
	caller := auth.FromContext(ctx)
	for {
		if err := caller.Valid(); err != nil { // a busy stream does not wait below
			return err
		}
		// An idle stream holds no batch: 10,000 streams would hold 60 MB of them (W6).
		bp := s.batches.Get().(*[]broker.Delivery)
		batch := st.Next((*bp)[:0], s.opts.MaxBatchMessages, s.opts.MaxBatchBytes)
		if len(batch) > 0 {
			err := s.send(stream, batch, unanswered)
			clear(batch)
			*bp = batch[:0]
			s.batches.Put(bp)
			if err != nil {
				return err
			}
			continue
		}
		s.batches.Put(bp)
		select {
		case <-st.Ready():
		case <-caller.Revoked(): // a reload removed or changed the user
			return caller.Valid()
		case <-st.Done():
			return toStatus(st.Err())
		case err := <-recvErr:
			if err != nil {
				return err
			}
			// The client closed its side after its last acks: members leave their groups
			// now, and what they still hold goes to the other members.
			for _, sub := range st.Subscriptions() {
				if sub.Mode() == broker.Balanced {
					sub.Close()
				}
			}
			subs.sync(st)
			if _, n := st.Lookup(""); n == 0 {
				return nil
			}
			recvErr = nil // fanout needs nothing from the client: keep delivering
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// send writes batch to stream: runs of messages as one frame each, events as their own frames.
func (s *Server) send(stream grpc.BidiStreamingServer[pb.SubscribeRequest, pb.SubscribeResponse], batch []broker.Delivery, unanswered *opens) error {
	for len(batch) > 0 {
		n, bytes := 0, 0
		for n < len(batch) && batch[n].Msg != nil {
			bytes += len(batch[n].Msg.Payload)
			n++
		}
		if n > 0 {
			if err := stream.SendMsg(wire.EncodeBatch(batch[:n])); err != nil {
				return err
			}
			s.traffic.deliveredBytes.Add(uint64(bytes))
			batch = batch[n:]
			continue
		}
		if d := batch[0]; d.Ended != nil {
			s.log.Debug("subscription ended by the broker", "subscription", d.Sub.ID(), "error", d.Ended)
			if err := stream.Send(&pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Ended{Ended: &pb.SubscriptionEnded{
				SubscriptionId: d.Sub.ID(), Code: int32(codeOf(d.Ended)), Error: d.Ended.Error()}}}); err != nil {
				return err
			}
			batch = batch[1:]
			continue
		}
		if err := stream.Send(s.event(batch[0].Sub)); err != nil {
			return err
		}
		unanswered.answer()
		batch = batch[1:]
	}
	return nil
}

// event is the frame answering an open: subscribed or refused.
func (s *Server) event(sub broker.Subscription) *pb.SubscribeResponse {
	set := sub.Settings()
	if err := sub.Refused(); err != nil {
		s.traffic.refuseSub(codeOf(err))
		s.log.Debug("subscription refused", "subscription", set.ID, "error", err)
		return &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Refused{Refused: &pb.Refused{
			SubscriptionId: set.ID, Code: int32(codeOf(err)), Error: errorText(err)}}}
	}
	s.log.Debug("subscription opened", "subscription", set.ID, "member", set.MemberID, "mode", sub.Mode())
	subscribed := &pb.Subscribed{SubscriptionId: set.ID, MemberId: set.MemberID}
	if sub.Mode() == broker.Balanced {
		subscribed.MaxInFlight = uint32(set.MaxInFlight)
		subscribed.AckDeadline = durationpb.New(set.AckDeadline)
		subscribed.MaxDeliveries = uint32(set.MaxDeliveries)
		subscribed.DeadLetterTopic = set.DeadLetterTopic
		subscribed.Ordering = pb.Ordering(set.Dispatch.Ordering)
		subscribed.FairBy = set.Dispatch.FairBy
		subscribed.MaxPriority = uint32(set.Dispatch.MaxPriority)
		subscribed.Priority = uint32(set.Priority)
	}
	return &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Subscribed{Subscribed: subscribed}}
}

// receive applies the client's frames until the stream ends. Unknown ids are skipped (see
// broker.Subscription.Ack); a malformed frame ends the stream.
func (s *Server) receive(stream grpc.BidiStreamingServer[pb.SubscribeRequest, pb.SubscribeResponse], st broker.Stream, unanswered *opens, subs *subCount, peerAddr string) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var skipped int
		switch f := req.GetFrame().(type) {
		case *pb.SubscribeRequest_Ack:
			skipped, err = settle(st, "ack", f.Ack.GetSubscriptionId(), func(sub broker.Subscription) int {
				return sub.Ack(f.Ack.GetSystemIds())
			})
		case *pb.SubscribeRequest_Nack:
			if d := f.Nack.GetDelay(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
				return status.Error(codes.InvalidArgument, "nack delay must be a valid, non-negative duration")
			}
			skipped, err = settle(st, "nack", f.Nack.GetSubscriptionId(), func(sub broker.Subscription) int {
				return sub.Nack(f.Nack.GetSystemIds(), f.Nack.GetDelay().AsDuration(), f.Nack.GetReason())
			})
		case *pb.SubscribeRequest_Touch:
			skipped, err = settle(st, "touch", f.Touch.GetSubscriptionId(), func(sub broker.Subscription) int {
				return sub.Touch(f.Touch.GetSystemIds())
			})
		case *pb.SubscribeRequest_Open:
			// Each open is answered through the stream's buffer; a client that sent opens
			// without reading the answers would grow it without bound (a refusal is larger
			// than the open that earned it). Past MaxUnansweredOpens the stream stops
			// reading until answers go out: HTTP/2 flow control then holds the client.
			if err := s.waitToOpen(stream.Context(), st, unanswered); err != nil {
				return err
			}
			_ = subs.open(st, subscribeOptions(f.Open, peerAddr), true) // the stream answers it: subscribed or refused
		case *pb.SubscribeRequest_Close:
			if sub, _ := st.Lookup(f.Close.GetSubscriptionId()); sub != nil && f.Close.GetSubscriptionId() != "" {
				sub.Close()
				subs.sync(st)
				s.log.Debug("subscription closed by the client", "subscription", f.Close.GetSubscriptionId())
			}
		default:
			return status.Error(codes.InvalidArgument, "empty SubscribeRequest frame; set one of open, ack, nack, touch or close")
		}
		if err != nil {
			return err
		}
		if skipped > 0 {
			s.log.Trace("skipped unknown ids", "count", skipped)
		}
	}
}

// opens counts the opens of a Subscribe stream whose subscribed or refused frame is not yet
// sent.
type opens struct {
	n        atomic.Int64
	answered chan struct{} // signalled when an answer is sent
}

func (o *opens) answer() {
	o.n.Add(-1)
	select {
	case o.answered <- struct{}{}:
	default:
	}
}

// waitToOpen counts one more open of the stream, first waiting while MaxUnansweredOpens
// are waiting for their answer.
func (s *Server) waitToOpen(ctx context.Context, st broker.Stream, o *opens) error {
	for o.n.Load() >= int64(s.opts.MaxUnansweredOpens) {
		select {
		case <-o.answered:
		case <-st.Done():
			return nil // the stream is over; the open will be refused
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	o.n.Add(1)
	return nil
}

// settle applies an ack, nack or touch frame to the subscription it is for: the one named, or
// the stream's only one. When the subscription is gone the frame's ids are skipped.
func settle(st broker.Stream, what, id string, apply func(broker.Subscription) (skipped int)) (int, error) {
	sub, n := st.Lookup(id)
	if sub == nil {
		if id == "" && n > 1 {
			return 0, status.Errorf(codes.InvalidArgument, "this stream carries %d subscriptions: set subscription_id on %s frames", n, what)
		}
		return 0, nil
	}
	return apply(sub), nil
}

// peerOf is the client's address, for the admin API's listings.
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func subscribeOptions(o *pb.OpenSubscription, peerAddr string) broker.SubscribeOptions {
	var mode broker.Mode
	switch o.GetMode() {
	case pb.DeliveryMode_DELIVERY_MODE_FANOUT:
		mode = broker.Fanout
	case pb.DeliveryMode_DELIVERY_MODE_BALANCED:
		mode = broker.Balanced
	}
	return broker.SubscribeOptions{
		ID:              o.GetSubscriptionId(),
		Patterns:        o.GetTopicPatterns(),
		Mode:            mode,
		Group:           o.GetConsumerGroup(),
		MaxInFlight:     int(o.GetMaxInFlight()),
		AckDeadline:     o.GetAckDeadline().AsDuration(),
		MaxDeliveries:   int(min(uint64(o.GetMaxDeliveries()), math.MaxInt)), // where int has 32 bits: over the cap, not wrapped negative
		DeadLetterTopic: o.GetDeadLetterTopic(),
		Dispatch: broker.Dispatch{Ordering: broker.Ordering(o.GetOrdering()), FairBy: o.GetFairBy(),
			MaxPriority: uint8(min(o.GetMaxPriority(), 255))}, // over 9 is refused, never wrapped into range
		Priority: uint8(min(o.GetPriority(), 255)),
		Peer:     peerAddr,
	}
}

// Ack implements the seed's unary Ack.
func (s *Server) Ack(ctx context.Context, req *pb.Ack) (*pb.AckResponse, error) {
	if req.GetSubscriptionId() == "" || req.GetSystemId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Ack needs subscription_id and system_id (from the delivered Message)")
	}
	if err := auth.FromContext(ctx).Join(req.GetSubscriptionId()); err != nil {
		return nil, err
	}
	if err := s.b.Ack(req.GetSubscriptionId(), req.GetSystemId()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.AckResponse{}, nil
}

// Nack implements the unary Nack.
func (s *Server) Nack(ctx context.Context, req *pb.Nack) (*pb.NackResponse, error) {
	if req.GetSubscriptionId() == "" || req.GetSystemId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Nack needs subscription_id and system_id (from the delivered Message)")
	}
	if err := auth.FromContext(ctx).Join(req.GetSubscriptionId()); err != nil {
		return nil, err
	}
	if d := req.GetDelay(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		return nil, status.Error(codes.InvalidArgument, "Nack delay must be a valid, non-negative duration")
	}
	if err := s.b.Nack(req.GetSubscriptionId(), req.GetSystemId(), req.GetDelay().AsDuration(), req.GetReason()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NackResponse{}, nil
}

// Stats reports the broker's counters, and one page of its subscriptions and groups (see
// stats.go).
func (s *Server) Stats(_ context.Context, req *pb.StatsRequest) (*pb.StatsResponse, error) {
	pg, err := newStatsPage(req)
	if err != nil {
		return nil, err
	}
	st := s.b.Stats()
	resp := &pb.StatsResponse{Published: st.Published, Delivered: st.Delivered, Acked: st.Acked,
		Redelivered: st.Redelivered, DeadLettered: st.DeadLettered, Unrouted: st.Unrouted, Dropped: st.Dropped,
		SubscriptionsTotal: uint32(len(st.Subscriptions)), GroupsTotal: uint32(len(st.Groups)),
		MemoryUsedBytes: uint64(max(st.MemoryUsed, 0)), MemoryBudgetBytes: uint64(st.MemoryBudget), Refused: st.Refused}
	if s.opts.Plugins != nil {
		for _, p := range s.opts.Plugins() {
			resp.Plugins = append(resp.Plugins, &pb.PluginStats{Name: p.Name, Calls: p.Calls, Failures: p.Failures,
				Skipped: p.Skipped, BreakerOpen: p.BreakerOpen})
		}
	}
	subs := pg.subscriptions(st.Subscriptions)
	for _, ss := range subs {
		e := &pb.SubscriptionStats{SubscriptionId: ss.ID,
			TopicPatterns: ss.Patterns, Delivered: ss.Delivered, Dropped: ss.Dropped, Buffered: uint32(ss.Buffered)}
		if !pg.take(ss.ID, e) {
			break
		}
		resp.Subscriptions = append(resp.Subscriptions, e)
	}
	pg.subsDone(len(resp.Subscriptions) == len(subs))
	for _, g := range pg.groups(st.Groups) {
		e := &pb.GroupStats{SubscriptionId: g.ID, ConsumerGroup: g.Group,
			TopicPatterns: g.Patterns, Members: uint32(g.Members), Queued: uint32(g.Queued),
			InFlight: uint32(g.InFlight), Delayed: uint32(g.Delayed), Delivered: g.Delivered, Acked: g.Acked,
			Redelivered: g.Redelivered, DeadLettered: g.DeadLettered, Dropped: g.Dropped,
			Bytes: uint64(max(g.Bytes, 0)), Rejected: g.Rejected, Declared: g.Declared}
		if !pg.take(g.ID, e) {
			break
		}
		resp.Groups = append(resp.Groups, e)
	}
	resp.NextPageToken = pg.next(len(resp.Groups) == len(pg.groups(st.Groups)))
	return resp, nil
}

// Reload re-reads the configuration (TLS files, users, plugins), as SIGHUP does.
func (s *Server) Reload(ctx context.Context, _ *pb.ReloadRequest) (*pb.ReloadResponse, error) {
	if s.opts.Reload == nil {
		return nil, status.Error(codes.Unimplemented, "this broker has no configuration file to reload; start it with --config FILE")
	}
	names, err := s.opts.Reload(ctx)
	if err != nil {
		s.log.Error("reload refused", "peer", peerOf(ctx), "error", err)
		return nil, status.Errorf(codes.FailedPrecondition, "reload refused: %v", err)
	}
	return &pb.ReloadResponse{Plugins: names}, nil
}
