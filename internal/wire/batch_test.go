package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/internal/grpcbuf"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// A frame built from cached encodings decodes to what marshalling it whole would give.
func TestEncodeBatch(t *testing.T) {
	m1 := &broker.Message{ID: 1, SystemID: "e-1", Topic: "a.b", Payload: []byte("one"), Headers: broker.MakeHeaders(map[string]string{"k": "v", "x": ""}), PublishedAt: 42, Targets: 2}
	m2 := &broker.Message{ID: 2, SystemID: "e-2", Topic: "a.c", Key: "k-ü", Priority: 4, PublishedAt: 43, Targets: 1} // written straight into frames
	b := memory.New(memory.Options{})
	defer b.Shutdown(t.Context())
	for _, sub := range []string{"first", "second"} { // the second reuses the cached encodings
		s, err := b.Subscribe(broker.SubscribeOptions{ID: sub, Patterns: []string{"x"}, Mode: broker.Fanout})
		if err != nil {
			t.Fatal(err)
		}
		batch := []broker.Delivery{{Msg: m1, Sub: s, Attempt: 1}, {Msg: m2, Sub: s, Attempt: 3}, {Msg: m1, Sub: s, Attempt: 1}}
		var got pb.SubscribeResponse
		if err := proto.Unmarshal(EncodeBatch(batch).b, &got); err != nil {
			t.Fatal(err)
		}
		want := &pb.SubscribeResponse{Frame: &pb.SubscribeResponse_Messages{Messages: &pb.MessageBatch{Messages: []*pb.Message{
			{SystemId: "e-1", Topic: "a.b", Payload: []byte("one"), Headers: map[string]string{"k": "v", "x": ""}, PublishTimeUnixNano: 42, Attempt: 1, SubscriptionId: sub},
			{SystemId: "e-2", Topic: "a.c", Key: "k-ü", Priority: 4, PublishTimeUnixNano: 43, Attempt: 3, Redelivered: true, SubscriptionId: sub},
			{SystemId: "e-1", Topic: "a.b", Payload: []byte("one"), Headers: map[string]string{"k": "v", "x": ""}, PublishTimeUnixNano: 42, Attempt: 1, SubscriptionId: sub},
		}}}}
		if !proto.Equal(&got, want) {
			t.Fatalf("decoded %v\nwant %v", &got, want)
		}
	}
	if m1.Wire.Load() == nil || m2.Wire.Load() != nil {
		t.Fatal("want the encoding of the message with 2 targets cached, of the one with 1 not")
	}
}

func BenchmarkEncodeBatchFanout4(b *testing.B) {
	br := memory.New(memory.Options{})
	defer br.Shutdown(b.Context())
	msgs := make([]*broker.Message, 100)
	for i := range msgs {
		msgs[i] = &broker.Message{ID: uint64(i), SystemID: "deadbeef-123456", Topic: "bench.w1", Payload: make([]byte, 256), PublishedAt: 1, Targets: 4}
	}
	var batches [][]broker.Delivery
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		s, err := br.Subscribe(broker.SubscribeOptions{ID: id, Patterns: []string{"x"}, Mode: broker.Fanout})
		if err != nil {
			b.Fatal(err)
		}
		batch := make([]broker.Delivery, len(msgs))
		for i, m := range msgs {
			batch[i] = broker.Delivery{Msg: m, Sub: s, Attempt: 1}
		}
		batches = append(batches, batch)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, batch := range batches {
			f := EncodeBatch(batch)
			grpcbuf.Pool.Put(f.pooled) // as gRPC does once it has written the frame
		}
	}
}

// A group's batch: each message delivered once, written straight into the frame, with a
// header (W4's W2: the transform adds one).
func BenchmarkEncodeBatchGroupHeader(b *testing.B) {
	br := memory.New(memory.Options{})
	defer br.Shutdown(b.Context())
	s, err := br.Subscribe(broker.SubscribeOptions{ID: "s1", Patterns: []string{"x"}, Mode: broker.Fanout})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]broker.Delivery, 100)
	for i := range batch {
		m := &broker.Message{ID: uint64(i), SystemID: "deadbeef-123456", Topic: "bench.w2", Payload: make([]byte, 256),
			Headers: broker.MakeHeaders(map[string]string{"x-w4": "1"}), PublishedAt: 1, Targets: 1}
		batch[i] = broker.Delivery{Msg: m, Sub: s, Attempt: 1}
	}
	b.ReportAllocs()
	for b.Loop() {
		f := EncodeBatch(batch)
		grpcbuf.Pool.Put(f.pooled)
	}
}
