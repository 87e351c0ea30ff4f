package server

import (
	"bytes"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// FuzzPublishFrame holds the hand-written PublishStreamRequest decoder to proto.Unmarshal: the
// same inputs are accepted, and decode to the same messages. The response encoder's output
// decodes to what it was given.
func FuzzPublishFrame(f *testing.F) {
	seed := func(m *pb.PublishStreamRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&pb.PublishStreamRequest{Sequence: 7, Messages: []*pb.PublishRequest{
		{Topic: "a.b", Payload: []byte("x"), Headers: map[string]string{"k": "v", "": ""}},
		{Topic: "a.b"}, {Payload: []byte{0, 1, 2}}, {Topic: "ü.c", Headers: map[string]string{"ä": "ö"}},
	}})
	seed(&pb.PublishStreamRequest{})
	seed(&pb.PublishStreamRequest{Sequence: 1, ErrorsOnly: true, Messages: []*pb.PublishRequest{{Topic: "a"}}})
	f.Add([]byte{0x12, 0x03, 0x0a, 0x01, 0xff})             // topic not UTF-8
	f.Add([]byte{0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x80}) // header key not UTF-8
	f.Add([]byte{0x08, 0x80})                               // truncated varint
	f.Add([]byte{0x12, 0x02, 0x08, 0x01, 0x18, 0x05})       // unknown fields
	f.Fuzz(func(t *testing.T, b []byte) {
		var want pb.PublishStreamRequest
		wantErr := proto.Unmarshal(b, &want)
		var got publishFrame
		gotErr := got.decode(b)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("proto.Unmarshal: %v; decode: %v", wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		if got.seq != want.GetSequence() || got.errorsOnly != want.GetErrorsOnly() || len(got.msgs) != len(want.GetMessages()) {
			t.Fatalf("decoded seq %d with %d messages, want %d with %d", got.seq, len(got.msgs), want.GetSequence(), len(want.GetMessages()))
		}
		results := make([]publishResult, len(got.msgs))
		for i, m := range got.msgs {
			w := want.GetMessages()[i]
			if m.topic != w.GetTopic() || !bytes.Equal(m.payload, w.GetPayload()) || !maps.Equal(m.headers, w.GetHeaders()) {
				t.Fatalf("message %d: decoded %q %q %v, want %q %q %v", i, m.topic, m.payload, m.headers, w.GetTopic(), w.GetPayload(), w.GetHeaders())
			}
			results[i] = publishResult{systemID: m.topic, routed: uint32(len(m.payload)), code: uint32(i % 3), err: m.topic}
		}
		var resp pb.PublishStreamResponse
		if err := proto.Unmarshal(encodePublishResponse(got.seq, results).b, &resp); err != nil {
			t.Fatalf("encoded response does not decode: %v", err)
		}
		if resp.GetSequence() != got.seq || len(resp.GetResults()) != len(results) {
			t.Fatalf("response seq %d with %d results, want %d with %d", resp.GetSequence(), len(resp.GetResults()), got.seq, len(results))
		}
		for i, r := range resp.GetResults() {
			w := results[i]
			if r.GetSystemId() != w.systemID || r.GetRouted() != w.routed || r.GetCode() != int32(w.code) || r.GetError() != w.err {
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
	var f publishFrame
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := f.decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// A frame with more than maxMsgs messages is marked and not decoded further; one at the limit
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
	f := publishFrame{maxMsgs: 4}
	if err := f.decode(frame(4)); err != nil || f.tooMany || len(f.msgs) != 4 || f.seq != 3 {
		t.Fatalf("4 messages, limit 4: err %v, tooMany %v, %d messages", err, f.tooMany, len(f.msgs))
	}
	if err := f.decode(frame(5)); err != nil || !f.tooMany || len(f.msgs) != 0 {
		t.Fatalf("5 messages, limit 4: err %v, tooMany %v, %d messages", err, f.tooMany, len(f.msgs))
	}
	if err := f.decode(frame(1)); err != nil || f.tooMany || len(f.msgs) != 1 {
		t.Fatalf("the next frame: err %v, tooMany %v, %d messages", err, f.tooMany, len(f.msgs))
	}
}
