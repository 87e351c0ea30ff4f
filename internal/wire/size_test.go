package wire

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/memory"
	"github.com/tinybroker/tinybroker/internal/grpcbuf"
)

// DeliverySize bounds what EncodeBatch writes for a delivery, its subscription_id field aside,
// by no more than its comment says.
func TestDeliverySize(t *testing.T) {
	br := memory.New(memory.Options{})
	defer br.Shutdown(t.Context())
	var subs []broker.Delivery                     // Sub set, for each length of id
	for _, n := range []int{1, 9, 120, 127, 128} { // the broker's ids are at most 128 bytes
		id := strings.Repeat("s", n)
		s, err := br.Subscribe(broker.SubscribeOptions{ID: id, Patterns: []string{"x"}, Mode: broker.Fanout})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, broker.Delivery{Sub: s})
	}
	headers := func(kv ...string) map[string]string {
		h := make(map[string]string)
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	many := make(map[string]string)
	for i := range 300 {
		many[strconv.Itoa(i)] = "v"
	}
	msgs := []*broker.Message{
		{},
		{SystemID: "0123456789abcdef0123456789abcdef", Topic: "bench.w1", Payload: make([]byte, 256), PublishedAt: time.Now().UnixNano()},
		{SystemID: "e-1", Topic: "a", Payload: []byte("x"), PublishedAt: 1},
		{Topic: "a.b", Headers: broker.MakeHeaders(headers("k", "v"))},
		{Topic: "a.b", Headers: broker.MakeHeaders(headers("", ""))},
		{Topic: "a.b", Headers: broker.MakeHeaders(headers("x-trace", strings.Repeat("t", 100), "k", "v"))},
		{Topic: "a.b", Headers: broker.MakeHeaders(headers(strings.Repeat("k", 127), ""))},
		{Topic: "a.b", Headers: broker.MakeHeaders(headers(strings.Repeat("k", 128), strings.Repeat("v", 128)))},
		{Topic: "a.b", Headers: broker.MakeHeaders(headers(strings.Repeat("k", 200), strings.Repeat("v", 70000), "a", "b"))},
		{Topic: "a.b", Headers: broker.MakeHeaders(many)},
		{SystemID: "e-2", Topic: strings.Repeat("t", 127), Payload: make([]byte, 127)},
		{SystemID: "e-2", Topic: strings.Repeat("t", 128), Payload: make([]byte, 128)},
		{SystemID: "e-3", Topic: "a", Payload: make([]byte, 16384-20), PublishedAt: -1},
		{SystemID: "e-4", Topic: "a", Payload: make([]byte, 1<<20), PublishedAt: time.Now().UnixNano()},
		{SystemID: "e-5", Topic: "a", Key: "order-1", PublishedAt: 1},
		{SystemID: "e-6", Topic: "a", Key: strings.Repeat("k", 256), Payload: []byte("x"), PublishedAt: 1},
	}
	for i, m := range msgs {
		for _, x := range m.Headers {
			m.HeaderBytes += len(x.Key) + len(x.Value)
		}
		for _, attempt := range []uint32{1, 2, 127, 128, math.MaxUint32} {
			for _, d := range subs {
				d.Msg, d.Attempt = m, attempt
				f := EncodeBatch([]broker.Delivery{d})
				id := d.Sub.ID()
				_, _, tag := protowire.ConsumeTag(f.b) // SubscribeResponse.messages
				_, length := protowire.ConsumeVarint(f.b[tag:])
				encoded := len(f.b) - tag - length - (protowire.SizeTag(fieldMessageSubscriptionID) + protowire.SizeBytes(len(id)))
				grpcbuf.Pool.Put(f.pooled)
				got := DeliverySize(m)
				if got < encoded {
					t.Errorf("message %d, attempt %d, id of %d bytes: DeliverySize %d, encoded %d (without the id)", i, attempt, len(id), got, encoded)
				}
				bound := 8 + (m.HeaderBytes+6*len(m.Headers))/32 // as DeliverySize's comment says
				for _, empty := range []bool{m.SystemID == "", m.Topic == "", len(m.Payload) == 0, m.PublishedAt == 0, m.Key == ""} {
					if empty {
						bound += 2
					}
				}
				if got > encoded+bound {
					t.Errorf("message %d, attempt %d, id of %d bytes: DeliverySize %d, encoded %d: %d bytes more at most", i, attempt, len(id), got, encoded, bound)
				}
			}
		}
	}
}
