package server_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/headercases"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server"
)

// One header grammar on every engine (issue 23, finding 5): each header of the one table is
// published alone (with an empty payload: a JetStream answer has none) and all the valid
// ones together, by Publish and by PublishStream, to a consumer group (stored, on JetStream
// as NATS headers) and a fanout subscription. A valid header arrives unchanged on both, once
// per message; an invalid one is refused with INVALID_ARGUMENT naming its rule, on both
// engines alike. The JetStream engine used to refuse names such as "a[b" with UNAVAILABLE
// "...; retry", to deduplicate messages carrying "Nats-Msg-Id", and so on. A canary on
// another connection is served throughout.
func TestHeaderGrammarEveryEngine(t *testing.T) {
	tb := start(t, brokertest.Options{})
	canary := newCanary(t, tb)
	group := tb.open(t, balanced("hg", "hg", 10_000, "jobs.>"))
	fan := tb.open(t, fanout("hf", "jobs.>"))

	want := map[string]map[string]string{} // topic: headers
	all := map[string]string{}
	stream := tb.publishStream(t)
	for i, c := range headercases.Cases {
		if !utf8.ValidString(c.Key) || !utf8.ValidString(c.Value) {
			continue // a gRPC client cannot send it (TestHeaderGrammar in broker/ checks it)
		}
		topic := "jobs." + strconv.Itoa(i)
		h := map[string]string{c.Key: c.Value}
		_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Headers: h})
		if err := stream.Send(&pb.PublishStreamRequest{Sequence: uint64(i), Messages: []*pb.PublishRequest{{Topic: topic + ".s", Headers: h}}}); err != nil {
			t.Fatal(err)
		}
		resp, serr := stream.Recv()
		if serr != nil {
			t.Fatal(serr)
		}
		r := resp.GetResults()[0]
		if !c.Valid() {
			wantCode(t, err, codes.InvalidArgument, c.Refused)
			if r.GetCode() != int32(codes.InvalidArgument) || !strings.Contains(r.GetError(), c.Refused) {
				t.Fatalf("header %q by PublishStream: %v; want INVALID_ARGUMENT saying %q", c.Key, r, c.Refused)
			}
			continue
		}
		if err != nil || r.GetCode() != 0 {
			t.Errorf("header %q: %q refused: Publish: %v; PublishStream: %v", c.Key, c.Value, err, r)
			continue
		}
		want[topic], want[topic+".s"], all[c.Key] = h, h, c.Value
	}
	if _, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "jobs.all", Payload: []byte("all"), Headers: all}); err != nil {
		t.Fatalf("every valid header together: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	want["jobs.all"] = all
	canary.check()

	for name, s := range map[string]*sub{"consumer group": group, "fanout": fan} {
		got := map[string]bool{}
		for range want {
			m := s.next()
			w, ok := want[m.GetTopic()]
			if !ok || got[m.GetTopic()] {
				t.Fatalf("%s: unexpected message on %s (headers %q)", name, m.GetTopic(), m.GetHeaders())
			}
			got[m.GetTopic()] = true
			if !maps.Equal(m.GetHeaders(), w) {
				t.Errorf("%s, %s: headers %q, want %q", name, m.GetTopic(), m.GetHeaders(), w)
			}
			if name == "consumer group" {
				group.ack(m.GetSystemId())
			}
		}
	}
	canary.check()
}

// headersOf returns n headers, 6-byte names and 50-byte values: 21,000 of them make a
// 1.3 MB message, under the default receive limit.
func headersOf(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("h%05d", i)] = strings.Repeat("v", 50)
	}
	return h
}

// A message of 21,000 headers (issue 23: a flood of them, decoded whole before their
// refusal, slowed everyone) is refused with INVALID_ARGUMENT naming max_headers, by Publish
// and in a PublishStream frame beside accepted messages; a message at the limit is
// delivered whole. The decoders stop at the first header past the limit
// (TestHeadersDecodedUpToTheLimit in internal/wire shows they read no further).
func TestTooManyHeadersRefusedEveryEngine(t *testing.T) {
	tb := start(t, brokertest.Options{})
	canary := newCanary(t, tb)
	s := tb.open(t, balanced("th", "th", 100, "th.>"))
	big, full := headersOf(21_000), headersOf(broker.Limits{}.WithDefaults().MaxHeaders)
	if n := proto.Size(&pb.PublishRequest{Topic: "th.big", Headers: big}); n < 1_000_000 || n > server.ReceiveLimit(broker.Limits{}.WithDefaults().MaxMessageBytes, broker.Limits{}.WithDefaults().MaxHeaderBytes) {
		t.Fatalf("a request of %d bytes", n)
	}
	_, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "th.big", Headers: big})
	wantCode(t, err, codes.InvalidArgument, "more than 1024 headers, the limit (max_headers)")
	// The same, sent as bytes with a last header that is not UTF-8: the server refuses it for
	// its headers' number without reading that far (reading it: INTERNAL, malformed).
	var raw []byte
	err = tb.conn.Invoke(context.Background(), pb.Broker_Publish_FullMethodName, badLastHeader(21_000), &raw, grpc.ForceCodecV2(rawCodec{}))
	wantCode(t, err, codes.InvalidArgument, "max_headers")
	canary.check()

	stream := tb.publishStream(t)
	if err := stream.Send(&pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{
		{Topic: "th.a", Payload: []byte("a")}, {Topic: "th.big", Headers: big}, {Topic: "th.full", Payload: []byte("full"), Headers: full},
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.GetResults()
	if len(rs) != 3 || rs[0].GetCode() != 0 || rs[2].GetCode() != 0 || rs[1].GetCode() != int32(codes.InvalidArgument) || !strings.Contains(rs[1].GetError(), "max_headers") {
		t.Fatalf("frame results: %v", rs)
	}
	if _, err := tb.c.Publish(context.Background(), &pb.PublishRequest{Topic: "th.full", Payload: []byte("unary"), Headers: full}); err != nil {
		t.Fatalf("a message at max_headers: %v", err)
	}
	for _, want := range []string{"a", "full", "unary"} {
		m := s.next()
		if string(m.GetPayload()) != want || (want != "a" && !maps.Equal(m.GetHeaders(), full)) {
			t.Fatalf("got %q with %d headers, want %q", m.GetPayload(), len(m.GetHeaders()), want)
		}
		s.ack(m.GetSystemId())
	}
	canary.check()
}

// badLastHeader is an encoded PublishRequest of n headers whose last value is not UTF-8.
func badLastHeader(n int) *[]byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType) // topic
	b = protowire.AppendString(b, "th.big")
	for i := range n {
		v := strings.Repeat("v", 50)
		if i == n-1 {
			v = "\xff"
		}
		e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), fmt.Sprintf("h%05d", i))
		e = protowire.AppendString(protowire.AppendTag(e, 2, protowire.BytesType), v)
		b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), e)
	}
	return &b
}

// rawCodec sends and receives a call's messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
