package wire

import (
	"bytes"
	"maps"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tinybroker/tinybroker/broker"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// FuzzPublishFrame holds the hand-written PublishStreamRequest decoder to proto.Unmarshal: the
// same inputs are accepted, and decode to the same messages. The response encoder's output
// decodes to what it was given.
func FuzzPublishFrame(f *testing.F) {
	seed(f, &pb.PublishStreamRequest{Sequence: 7, Messages: []*pb.PublishRequest{
		{Topic: "a.b", Payload: []byte("x"), Headers: map[string]string{"k": "v", "": ""}},
		{Topic: "a.b"}, {Payload: []byte{0, 1, 2}}, {Topic: "ü.c", Headers: map[string]string{"ä": "ö"}},
	}})
	seed(f, &pb.PublishStreamRequest{})
	seed(f, &pb.PublishStreamRequest{Sequence: 1, ErrorsOnly: true, Messages: []*pb.PublishRequest{{Topic: "a"}}})
	seed(f, &pb.PublishStreamRequest{Sequence: 2, Messages: []*pb.PublishRequest{{Topic: "a", MessageId: "id-1"}, {Topic: "b", MessageId: "ü"}, {Topic: "c"}}})
	seed(f, &pb.PublishStreamRequest{Sequence: 3, Messages: []*pb.PublishRequest{{Topic: "a", Key: "k1"}, {Topic: "a", Key: "ü", MessageId: "x"}}})
	seed(f, &pb.PublishStreamRequest{Messages: []*pb.PublishRequest{{Topic: "a", Priority: 9}, {Topic: "b", Priority: 300}, {Topic: "c", Priority: 1 << 31}}})
	f.Add([]byte{0x12, 0x03, 0x2a, 0x01, 0xff}) // key not UTF-8
	seed(f, &pb.PublishStreamRequest{Sequence: 4, Messages: []*pb.PublishRequest{{Topic: "a", Ttl: durationpb.New(90 * time.Second)},
		{Topic: "a", Ttl: &durationpb.Duration{Seconds: -1}}, {Topic: "a", Ttl: &durationpb.Duration{Nanos: 2e9}}, {Topic: "a", Ttl: &durationpb.Duration{}}}})
	f.Add([]byte{0x12, 0x0a, 0x32, 0x02, 0x08, 0x05, 0x32, 0x04, 0x10, 0x01, 0x18, 0x07}) // a ttl given twice: merged
	seed(f, &pb.PublishStreamRequest{Sequence: 5, Messages: []*pb.PublishRequest{{Topic: "a", DeliverAfter: durationpb.New(5 * time.Second)},
		{Topic: "a", DeliverAt: timestamppb.New(time.Unix(1_900_000_000, 5))}, {Topic: "a", DeliverAfter: &durationpb.Duration{Seconds: -1}},
		{Topic: "a", DeliverAt: &timestamppb.Timestamp{Seconds: -5}}, {Topic: "a", DeliverAt: &timestamppb.Timestamp{Nanos: -1}},
		{Topic: "a", DeliverAt: &timestamppb.Timestamp{Seconds: 253402300799}}, {Topic: "a", DeliverAfter: &durationpb.Duration{}, DeliverAt: &timestamppb.Timestamp{}}}})
	f.Add([]byte{0x12, 0x0a, 0x3a, 0x02, 0x08, 0x05, 0x3a, 0x04, 0x10, 0x01, 0x18, 0x07}) // a deliver_after given twice: merged
	f.Add([]byte{0x12, 0x0a, 0x42, 0x02, 0x08, 0x05, 0x42, 0x04, 0x10, 0x01, 0x18, 0x07}) // a deliver_at given twice: merged
	f.Add([]byte{0x12, 0x04, 0x42, 0x02, 0x10, 0x80})                                     // deliver_at's nanos truncated
	f.Add([]byte{0x12, 0x03, 0x22, 0x01, 0xff})                                           // message_id not UTF-8
	f.Add([]byte{0x12, 0x03, 0x0a, 0x01, 0xff})                                           // topic not UTF-8
	f.Add([]byte{0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x80})                               // header key not UTF-8
	f.Add([]byte{0x08, 0x80})                                                             // truncated varint
	f.Add([]byte{0x12, 0x02, 0x08, 0x01, 0x18, 0x05})                                     // unknown fields
	f.Add(marshal(f, &pb.PublishStreamRequest{Messages: []*pb.PublishRequest{{Headers: map[string]string{"a": "", "b": "", "c": ""}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want pb.PublishStreamRequest
		wantErr := proto.Unmarshal(b, &want)
		var got PublishFrame
		gotErr := got.decode(b)
		checkCapped(t, b, &want, wantErr)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("proto.Unmarshal: %v; decode: %v", wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		if got.Seq != want.GetSequence() || got.ErrorsOnly != want.GetErrorsOnly() || len(got.Msgs) != len(want.GetMessages()) {
			t.Fatalf("decoded seq %d with %d messages, want %d with %d", got.Seq, len(got.Msgs), want.GetSequence(), len(want.GetMessages()))
		}
		results := make([]PublishResult, len(got.Msgs))
		for i, m := range got.Msgs {
			w := want.GetMessages()[i]
			if m.Topic != w.GetTopic() || !bytes.Equal(m.Payload, w.GetPayload()) || !maps.Equal(m.Headers.Map(), w.GetHeaders()) || m.ID != w.GetMessageId() || m.Key != w.GetKey() || m.TTL != TTL(w.GetTtl()) || uint32(m.Priority) != min(w.GetPriority(), 255) {
				t.Fatalf("message %d: decoded %q %q %v id %q key %q, want %q %q %v id %q key %q", i, m.Topic, m.Payload, m.Headers, m.ID, m.Key, w.GetTopic(), w.GetPayload(), w.GetHeaders(), w.GetMessageId(), w.GetKey())
			}
			if after, at := Delay(w.GetDeliverAfter(), w.GetDeliverAt()); m.DeliverAfter != after || m.DeliverAt != at {
				t.Fatalf("message %d: decoded deliver_after %v, deliver_at %d; want %v, %d (from %v, %v)", i, m.DeliverAfter, m.DeliverAt, after, at, w.GetDeliverAfter(), w.GetDeliverAt())
			}
			if m.ID != "" && !got.IDs {
				t.Fatalf("message %d has message_id %q, the frame's IDs is not set", i, m.ID)
			}
			results[i] = PublishResult{SystemID: m.Topic, Routed: uint32(len(m.Payload)), Code: uint32(i % 3), Err: m.Topic, Duplicate: i%2 == 1}
		}
		var resp pb.PublishStreamResponse
		if err := proto.Unmarshal(EncodePublishResponse(got.Seq, results).b, &resp); err != nil {
			t.Fatalf("encoded response does not decode: %v", err)
		}
		if resp.GetSequence() != got.Seq || len(resp.GetResults()) != len(results) {
			t.Fatalf("response seq %d with %d results, want %d with %d", resp.GetSequence(), len(resp.GetResults()), got.Seq, len(results))
		}
		for i, r := range resp.GetResults() {
			w := results[i]
			if r.GetSystemId() != w.SystemID || r.GetRouted() != w.Routed || r.GetCode() != int32(w.Code) || r.GetError() != w.Err || r.GetDuplicate() != w.Duplicate {
				t.Fatalf("result %d decodes to %v, want %+v", i, r, w)
			}
		}
	})
}

// BenchmarkDecodePublishFrame decodes a W1-sized PublishStream frame: 128 messages of 256 B.
func BenchmarkDecodePublishFrame(b *testing.B) {
	req := &pb.PublishStreamRequest{Sequence: 1}
	for range 128 {
		req.Messages = append(req.Messages, &pb.PublishRequest{Topic: "bench.w1", Payload: make([]byte, 256)})
	}
	frame, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	var f PublishFrame
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := f.decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// A frame with more than MaxMsgs messages is marked and not decoded further; one at the limit
// decodes whole.
func TestPublishFrameTooMany(t *testing.T) {
	frame := func(n int) []byte {
		m := &pb.PublishStreamRequest{Sequence: 3}
		for range n {
			m.Messages = append(m.Messages, &pb.PublishRequest{Topic: "a"})
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	f := PublishFrame{MaxMsgs: 4}
	if err := f.decode(frame(4)); err != nil || f.TooMany || len(f.Msgs) != 4 || f.Seq != 3 {
		t.Fatalf("4 messages, limit 4: err %v, tooMany %v, %d messages", err, f.TooMany, len(f.Msgs))
	}
	if err := f.decode(frame(5)); err != nil || !f.TooMany || len(f.Msgs) != 0 {
		t.Fatalf("5 messages, limit 4: err %v, tooMany %v, %d messages", err, f.TooMany, len(f.Msgs))
	}
	if err := f.decode(frame(1)); err != nil || f.TooMany || len(f.Msgs) != 1 {
		t.Fatalf("the next frame: err %v, tooMany %v, %d messages", err, f.TooMany, len(f.Msgs))
	}
}

// checkCapped decodes frame b with MaxHeaders 2 and holds it to proto.Unmarshal's want: a
// message of at most 2 headers decodes the same, one of more is marked with 3 of its headers
// (distinct names) decoded; a frame proto refuses may be accepted only if it is marked (the
// headers past the third are skipped unread).
func checkCapped(t *testing.T, b []byte, want *pb.PublishStreamRequest, wantErr error) {
	t.Helper()
	const max = 2
	capped := PublishFrame{MaxHeaders: max}
	err := capped.decode(b)
	if wantErr != nil {
		if err == nil && !capped.HeadersOver {
			t.Fatalf("capped decode accepted what proto.Unmarshal refuses (%v), unmarked", wantErr)
		}
		return
	}
	if err != nil || len(capped.Msgs) != len(want.GetMessages()) {
		t.Fatalf("capped decode: %v, %d messages; want %d", err, len(capped.Msgs), len(want.GetMessages()))
	}
	over := false
	for i, m := range capped.Msgs {
		w := want.GetMessages()[i].GetHeaders()
		if len(w) <= max {
			if !maps.Equal(m.Headers.Map(), w) {
				t.Fatalf("message %d: capped decode %v, want %v", i, m.Headers, w)
			}
			continue
		}
		over = true
		if len(m.Headers) != max+1 || !sortedHeaders(m.Headers) {
			t.Fatalf("message %d of %d headers: capped decode kept %v", i, len(w), m.Headers)
		}
		for _, h := range m.Headers {
			if _, ok := w[h.Key]; !ok {
				t.Fatalf("message %d: capped decode made up header %q", i, h.Key)
			}
		}
	}
	if over != capped.HeadersOver {
		t.Fatalf("HeadersOver %v, want %v", capped.HeadersOver, over)
	}
}

func sortedHeaders(h broker.Headers) bool {
	for i := 1; i < len(h); i++ {
		if h[i-1].Key >= h[i].Key {
			return false
		}
	}
	return true
}

// Delay reads deliver_after and deliver_at as the gate takes them: each sentinel it refuses
// or clamps.
func TestDelay(t *testing.T) {
	for _, c := range []struct {
		name      string
		after     *durationpb.Duration
		at        *timestamppb.Timestamp
		wantAfter time.Duration
		wantAt    int64
	}{
		{"none", nil, nil, 0, 0},
		{"after", durationpb.New(5 * time.Second), nil, 5 * time.Second, 0},
		{"after zero", &durationpb.Duration{}, nil, 0, 0},
		{"after negative", durationpb.New(-time.Second), nil, -1, 0},
		{"after invalid", &durationpb.Duration{Seconds: 1, Nanos: -1}, nil, -1, 0},
		{"at", nil, timestamppb.New(time.Unix(1_900_000_000, 7)), 0, 1_900_000_000_000_000_007},
		{"at before 1970", nil, &timestamppb.Timestamp{Seconds: -100}, 0, 1},
		{"at epoch", nil, &timestamppb.Timestamp{}, 0, 1},
		{"at past 2262", nil, &timestamppb.Timestamp{Seconds: 253402300799}, 0, math.MaxInt64},
		{"at invalid", nil, &timestamppb.Timestamp{Nanos: -1}, 0, -1},
		{"both", &durationpb.Duration{}, &timestamppb.Timestamp{Seconds: 5}, 0, -2},
	} {
		after, at := Delay(c.after, c.at)
		if after != c.wantAfter || at != c.wantAt {
			t.Errorf("%s: Delay = %v, %d; want %v, %d", c.name, after, at, c.wantAfter, c.wantAt)
		}
	}
}
