package server_test

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/internal/brokertest"
	"github.com/tinybroker/tinybroker/internal/brokertest/headercases"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
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
