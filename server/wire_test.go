package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/broker"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// A frame built from cached encodings decodes to what marshalling it whole would give.
func TestEncodeBatch(t *testing.T) {
	m1 := &broker.Message{ID: 1, SystemID: "e-1", Topic: "a.b", Payload: []byte("one"), Headers: map[string]string{"k": "v", "x": ""}, PublishedAt: 42}
	m2 := &broker.Message{ID: 2, SystemID: "e-2", Topic: "a.c", PublishedAt: 43}
	batch := []broker.Delivery{{Msg: m1, Attempt: 1}, {Msg: m2, Attempt: 3}, {Msg: m1, Attempt: 1}}
	for _, sub := range []string{"first", "second"} { // the second reuses the cached encodings
		var got pb.SubscribeResponse
		if err := proto.Unmarshal(encodeBatch(batch, sub).b, &got); err != nil {
			t.Fatal(err)
		}
		want := &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Messages{Messages: &pb.MessageBatch{Messages: []*pb.Message{
			{SystemId: "e-1", Topic: "a.b", Payload: []byte("one"), Headers: map[string]string{"k": "v", "x": ""}, PublishTimeUnixNano: 42, Attempt: 1, SubscriptionId: sub},
			{SystemId: "e-2", Topic: "a.c", PublishTimeUnixNano: 43, Attempt: 3, Redelivered: true, SubscriptionId: sub},
			{SystemId: "e-1", Topic: "a.b", Payload: []byte("one"), Headers: map[string]string{"k": "v", "x": ""}, PublishTimeUnixNano: 42, Attempt: 1, SubscriptionId: sub},
		}}}}
		if !proto.Equal(&got, want) {
			t.Fatalf("decoded %v\nwant %v", &got, want)
		}
	}
	if m1.Wire.Load() == nil || m2.Wire.Load() == nil {
		t.Fatal("encodings not cached")
	}
}

func BenchmarkEncodeBatchFanout4(b *testing.B) {
	batch := make([]broker.Delivery, 100)
	for i := range batch {
		batch[i] = broker.Delivery{Msg: &broker.Message{ID: uint64(i), SystemID: "deadbeef-123456", Topic: "bench.w1", Payload: make([]byte, 256), PublishedAt: 1}, Attempt: 1}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, sub := range []string{"s1", "s2", "s3", "s4"} {
			encodeBatch(batch, sub)
		}
	}
}
