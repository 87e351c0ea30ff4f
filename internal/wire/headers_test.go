package wire

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/broker"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// manyHeaders returns a PublishRequest with n headers of 64 bytes each: 1,000 fit the
// default max_header_bytes, 21,000 make a 1.4 MB request, as in issue 23.
func manyHeaders(n int) *pb.PublishRequest {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("header-%06d", i)] = strings.Repeat("v", 51)
	}
	return &pb.PublishRequest{Topic: "bench.headers", Payload: []byte("x"), Headers: h}
}

func marshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkPublishHeaders is what the server does with a message of many headers until it
// routes or refuses it: decode it (a PublishStream frame of one message, or a unary Publish
// through the server's codec), then the broker's check (broker.Limits.CheckHeaders) at the
// default max_headers (1,024).
func BenchmarkPublishHeaders(b *testing.B) {
	limits := broker.Limits{}.WithDefaults()
	for _, n := range []int{1_000, 21_000} {
		frame := marshal(b, &pb.PublishStreamRequest{Sequence: 1, Messages: []*pb.PublishRequest{manyHeaders(n)}})
		b.Run(fmt.Sprintf("stream/%d", n), func(b *testing.B) {
			f := PublishFrame{MaxHeaders: limits.MaxHeaders}
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := f.decode(frame); err != nil {
					b.Fatal(err)
				}
				_, err := limits.CheckHeaders(f.Msgs[0].Headers)
				if (err == nil) != (n <= limits.MaxHeaders) {
					b.Fatal(err)
				}
			}
		})
		req := marshal(b, manyHeaders(n))
		b.Run(fmt.Sprintf("unary/%d", n), func(b *testing.B) {
			c := ServerCodec(limits.MaxHeaders)
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			for b.Loop() {
				var r pb.PublishRequest
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(req)}, &r); err != nil {
					b.Fatal(err)
				}
				_, err := limits.CheckHeaders(broker.MakeHeaders(r.GetHeaders()))
				if (err == nil) != (n <= limits.MaxHeaders) {
					b.Fatal(err)
				}
			}
		})
	}
}

// capTestRequest is a message of n headers whose last one is not UTF-8: a decoder that
// reads it refuses the message as malformed, so a decode that succeeds did not read it.
func capTestRequest(n int) []byte {
	var b []byte
	b = protowire.AppendTag(b, fieldPublishTopic, protowire.BytesType)
	b = protowire.AppendString(b, "t")
	for i := range n {
		k, v := fmt.Sprintf("h%05d", i), "v"
		if i == n-1 {
			v = "\xff"
		}
		entry := protowire.AppendTag(nil, fieldMapKey, protowire.BytesType)
		entry = protowire.AppendString(entry, k)
		entry = protowire.AppendTag(entry, fieldMapValue, protowire.BytesType)
		entry = protowire.AppendString(entry, v)
		b = protowire.AppendTag(b, fieldPublishHeaders, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	b = protowire.AppendTag(b, fieldPublishPayload, protowire.BytesType) // after the headers
	return protowire.AppendBytes(b, []byte("payload"))
}

// A message with more headers than max_headers has only the first max_headers+1 distinct
// names decoded, in a PublishStream frame (marked HeadersOver, its neighbours intact) and in
// a unary Publish: the last header, not UTF-8, is never read (decoding every header refuses
// the message as malformed). Names given twice count once, as in a protobuf map.
func TestHeadersDecodedUpToTheLimit(t *testing.T) {
	const max = 1024
	over := capTestRequest(21_000)
	ok := marshal(t, manyHeaders(max))
	var frame []byte
	for _, m := range [][]byte{ok, over, ok} {
		frame = protowire.AppendTag(frame, fieldStreamRequestMessages, protowire.BytesType)
		frame = protowire.AppendBytes(frame, m)
	}
	if err := (&PublishFrame{}).decode(frame); err == nil {
		t.Fatal("without MaxHeaders, the frame's bad last header went unnoticed: the test proves nothing")
	}
	f := PublishFrame{MaxHeaders: max}
	if err := f.decode(frame); err != nil {
		t.Fatal(err)
	}
	if !f.HeadersOver || len(f.Msgs) != 3 || len(f.Msgs[0].Headers) != max || len(f.Msgs[2].Headers) != max ||
		len(f.Msgs[1].Headers) != max+1 || string(f.Msgs[1].Payload) != "payload" || f.Msgs[1].Topic != "t" {
		t.Fatalf("over %v, %d messages, headers %d %d %d", f.HeadersOver, len(f.Msgs), len(f.Msgs[0].Headers), len(f.Msgs[1].Headers), len(f.Msgs[2].Headers))
	}
	if err := f.decode(protowire.AppendBytes(protowire.AppendTag(nil, fieldStreamRequestMessages, protowire.BytesType), ok)); err != nil || f.HeadersOver { // the next frame starts afresh
		t.Fatalf("next frame: %v, over %v", err, f.HeadersOver)
	}

	var req pb.PublishRequest
	if err := ServerCodec(0).Unmarshal(mem.BufferSlice{mem.SliceBuffer(over)}, &req); err == nil {
		t.Fatal("without max_headers, the request's bad last header went unnoticed")
	}
	req.Reset()
	if err := ServerCodec(max).Unmarshal(mem.BufferSlice{mem.SliceBuffer(over)}, &req); err != nil {
		t.Fatal(err)
	}
	if len(req.GetHeaders()) != max+1 || req.GetTopic() != "t" || string(req.GetPayload()) != "payload" {
		t.Fatalf("unary: %d headers, topic %q, payload %q", len(req.GetHeaders()), req.GetTopic(), req.GetPayload())
	}

	// max+1 entries, two of one name: max names, every header decoded, the last value kept.
	dup := manyHeaders(max)
	b := marshal(t, dup)
	b = protowire.AppendTag(b, fieldPublishHeaders, protowire.BytesType)
	entry := protowire.AppendTag(nil, fieldMapKey, protowire.BytesType)
	entry = protowire.AppendString(entry, "header-000007")
	entry = protowire.AppendTag(entry, fieldMapValue, protowire.BytesType)
	entry = protowire.AppendString(entry, "last")
	b = protowire.AppendBytes(b, entry)
	c := PublishFrame{MaxHeaders: max}
	if err := c.decode(protowire.AppendBytes(protowire.AppendTag(nil, fieldStreamRequestMessages, protowire.BytesType), b)); err != nil || c.HeadersOver || len(c.Msgs[0].Headers) != max {
		t.Fatalf("frame with a name twice: %v, over %v, %d headers", err, c.HeadersOver, len(c.Msgs[0].Headers))
	}
	if v, _ := c.Msgs[0].Headers.Get("header-000007"); v != "last" {
		t.Fatalf("a name given twice kept %q", v)
	}
	req.Reset()
	if err := ServerCodec(max).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &req); err != nil || len(req.GetHeaders()) != max || req.GetHeaders()["header-000007"] != "last" {
		t.Fatalf("unary with a name twice: %v, %d headers", err, len(req.GetHeaders()))
	}
}
