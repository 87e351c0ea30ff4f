package wire

import (
	"bytes"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// FuzzDecode holds the Decoder to proto.Unmarshal: a frame of messages it accepts decodes the
// same, and what proto refuses it refuses.
func FuzzDecode(f *testing.F) {
	seed(f, &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Messages{Messages: &pb.MessageBatch{Messages: []*pb.Message{
		{SystemId: "e-1", Topic: "a.b", Payload: []byte("x"), Headers: map[string]string{"k": "v", "": ""}, PublishTimeUnixNano: 42, Attempt: 1, SubscriptionId: "s"},
		{SystemId: "e-2", Topic: "a.b", Attempt: 3, Redelivered: true, SubscriptionId: "s", Key: "order-7", Priority: 7},
		{},
	}}}})
	seed(f, &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Subscribed{Subscribed: &pb.Subscribed{SubscriptionId: "s"}}})
	seed(f, &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Refused{Refused: &pb.Refused{SubscriptionId: "s", Code: 3}}})
	f.Add([]byte{0x12, 0x05, 0x0a, 0x03, 0x12, 0x01, 0xff}) // topic not UTF-8
	f.Fuzz(func(t *testing.T, b []byte) {
		var want pb.SubscribeResponse
		wantErr := proto.Unmarshal(b, &want)
		var d Decoder
		got, ok, err := d.Messages(b, nil)
		if err != nil {
			if wantErr == nil {
				t.Fatalf("Messages: %v; proto.Unmarshal accepts it", err)
			}
			return
		}
		if !ok { // the caller decodes it with proto
			return
		}
		if wantErr != nil {
			t.Fatalf("Messages accepted a frame proto.Unmarshal refuses: %v", wantErr)
		}
		wm := want.GetMessages().GetMessages()
		if want.GetMessages() == nil || len(got) != len(wm) {
			t.Fatalf("decoded %d messages, proto has %v", len(got), &want)
		}
		for i, g := range got {
			w := wm[i]
			if g.SystemID != w.GetSystemId() || g.Topic != w.GetTopic() || !bytes.Equal(g.Payload, w.GetPayload()) ||
				!maps.Equal(HeaderMap(g.Headers), w.GetHeaders()) || g.PublishTimeUnixNano != w.GetPublishTimeUnixNano() ||
				g.Attempt != w.GetAttempt() || g.Redelivered != w.GetRedelivered() || g.SubscriptionID != w.GetSubscriptionId() || g.Key != w.GetKey() || g.Priority != w.GetPriority() {
				t.Fatalf("message %d: decoded %+v, proto has %v", i, g, w)
			}
			for k, v := range w.GetHeaders() {
				if got, ok := HeaderValue(g.Headers, k); !ok || got != v {
					t.Fatalf("message %d: HeaderValue(%q) = %q, %v; want %q", i, k, got, ok, v)
				}
			}
			if _, ok := HeaderValue(g.Headers, "\x00absent"); ok != hasKey(w.GetHeaders(), "\x00absent") {
				t.Fatalf("message %d: HeaderValue of an absent key", i)
			}
		}
	})
}

// BenchmarkDecode decodes a frame of 100 deliveries of 256 B, each with one header, as a
// subscriber does.
func BenchmarkDecode(b *testing.B) {
	batch := &pb.MessageBatch{}
	for i := range 100 {
		batch.Messages = append(batch.Messages, &pb.Message{SystemId: "0123abcd-" + string(rune('a'+i%26)), Topic: "bench.w1",
			Payload: make([]byte, 256), Headers: map[string]string{"x-w4": "1"}, PublishTimeUnixNano: 1, Attempt: 1, SubscriptionId: "s1"})
	}
	frame, err := proto.Marshal(&pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Messages{Messages: batch}})
	if err != nil {
		b.Fatal(err)
	}
	var d Decoder
	var out []Delivery
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if out, _, err = d.Messages(frame, out[:0]); err != nil || len(out) != 100 {
			b.Fatal(err, len(out))
		}
	}
}
