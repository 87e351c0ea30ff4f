package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// rawCodec sends and receives frames already encoded: the attacks build their frames once
// (a 16 MiB frame of millions of messages, a 15 MiB payload shared by 32 calls) instead of
// marshalling them per call. Its name is "proto", so the server sees an ordinary gRPC call.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = append((*b)[:0], data...)
		return nil
	}
	return proto.Unmarshal(data, v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

const (
	methodPublish       = "/tinybroker.v1.Broker/Publish"
	methodPublishStream = "/tinybroker.v1.Broker/PublishStream"
)

// maxClientRecv is what the harness's clients accept in one answer: more than any answer of
// a bounded broker, so that an oversize answer is seen (and measured) rather than refused.
const maxClientRecv = 64 << 20

// dial connects to addr with the harness's client limits.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxClientRecv), grpc.MaxCallSendMsgSize(1<<30)))
}

// dialDefault connects with gRPC's default limits (4 MiB answers), as grpcurl does.
func dialDefault(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// sub is one Subscribe stream.
type sub struct {
	s      grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel context.CancelFunc
}

func openStream(ctx context.Context, c pb.BrokerClient) (*sub, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := c.Subscribe(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &sub{s: s, cancel: cancel}, nil
}

func fanoutOpen(id string, patterns ...string) *pb.SubscribeRequest {
	return &pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{
		SubscriptionId: id, TopicPatterns: patterns, Mode: pb.DeliveryMode_DELIVERY_MODE_FANOUT}}}
}

func balancedOpen(group string, maxInFlight uint32, patterns ...string) *pb.SubscribeRequest {
	return &pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: &pb.OpenSubscription{
		SubscriptionId: group, ConsumerGroup: group, TopicPatterns: patterns, Mode: pb.DeliveryMode_DELIVERY_MODE_BALANCED,
		MaxInFlight: maxInFlight}}}
}

// open sends an open frame and waits for its answer: nil if subscribed, the refusal's
// status otherwise.
func (s *sub) open(req *pb.SubscribeRequest) error {
	if err := s.s.Send(req); err != nil {
		return err
	}
	r, err := s.s.Recv()
	if err != nil {
		return err
	}
	if ref := r.GetRefused(); ref != nil {
		return status.Error(codes.Code(ref.GetCode()), ref.GetError())
	}
	if r.GetSubscribed() == nil {
		return fmt.Errorf("unexpected first frame %v", r)
	}
	return nil
}

// subscribe opens a stream on c and sends req on it: the stream once subscribed, or the
// refusal's status (see open), the stream then closed.
func subscribe(ctx context.Context, c pb.BrokerClient, req *pb.SubscribeRequest) (*sub, error) {
	s, err := openStream(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := s.open(req); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// leave half-closes the stream and waits for its end: every balanced member on it leaves its
// group, which stays, without members.
func (s *sub) leave() error {
	defer s.cancel()
	if err := s.s.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := s.s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (s *sub) ack(id, subID string) error {
	return s.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: []string{id}, SubscriptionId: subID}}})
}

// abandonGroups creates consumer groups without members: one stream opens a balanced member
// of each, then leaves.
func abandonGroups(ctx context.Context, c pb.BrokerClient, names []string, patterns func(name string) []string) error {
	s, err := openStream(ctx, c)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := s.open(balancedOpen(n, 1, patterns(n)...)); err != nil {
			s.cancel()
			return fmt.Errorf("opening group %q: %w", n, err)
		}
	}
	return s.leave()
}

// rawPublish publishes an encoded PublishRequest.
func rawPublish(ctx context.Context, conn *grpc.ClientConn, req []byte) error {
	var resp []byte
	return conn.Invoke(ctx, methodPublish, req, &resp, grpc.ForceCodec(rawCodec{}))
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// headerHeavy returns the heaviest headers the limits allow: max_headers headers whose
// names and values fill max_header_bytes.
func headerHeavy(maxBytes int) map[string]string {
	h := make(map[string]string, maxHeaders)
	value := strings.Repeat("v", maxBytes/maxHeaders-6)
	for i := range maxHeaders {
		h[fmt.Sprintf("h%05d", i)] = value
	}
	return h
}

// tinyHeaders returns maxBytes/3 headers of 3-character names and empty values: within
// max_header_bytes, far past max_headers (each once cost the broker 28 times its 3 bytes).
func tinyHeaders(maxBytes int) map[string]string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	h := make(map[string]string, maxBytes/3)
	for i := 0; len(h) < maxBytes/3; i++ {
		k := []byte{alphabet[i%62], alphabet[i/62%62], alphabet[i/62/62%62]}
		h[string(k)] = ""
	}
	return h
}

var largerThanMax = regexp.MustCompile(`larger than max \((\d+) vs\. (\d+)\)`)

// tooLarge parses gRPC's "received message larger than max (N vs. M)".
func tooLarge(err error) (n, limit int64, ok bool) {
	m := largerThanMax.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return 0, 0, false
	}
	n, _ = strconv.ParseInt(m[1], 10, 64)
	limit, _ = strconv.ParseInt(m[2], 10, 64)
	return n, limit, true
}

// randomID returns 22 random base64url characters, the shape of a system_id.
func randomID(r *rand.Rand) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	b := make([]byte, 22)
	for i := range b {
		b[i] = alphabet[r.IntN(64)]
	}
	return string(b)
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
