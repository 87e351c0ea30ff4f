package jetstream

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/headercases"
)

// FuzzHeaderCodec: every set of headers the broker accepts (broker.CheckHeaders, the one
// grammar) is stored by JetStream as this engine encodes it and comes back from the stream
// unchanged, through nats.go's header encoding and parsing and JetStream's own handling of
// headers (which acts on Nats-* ones: deduplication, rollups, expectations), and likewise
// through the fanout envelope. A header that failed this made the engine refuse a valid
// message with UNAVAILABLE "retry" (issue 23), or store it wrongly. Seeds: the one table of
// headercases, each with the next one.
func FuzzHeaderCodec(f *testing.F) {
	for i, c := range headercases.Cases {
		n := headercases.Cases[(i+1)%len(headercases.Cases)]
		f.Add(c.Key, c.Value, n.Key, n.Value)
	}
	srv, err := StartEmbedded(EmbeddedOptions{DataDir: f.TempDir()}, broker.Limits{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		f.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FZ", Subjects: []string{"fz"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		f.Fatal(err)
	}
	limits := broker.Limits{}.WithDefaults()
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := broker.MakeHeaders(map[string]string{k1: v1, k2: v2})
		hb, err := limits.CheckHeaders(h)
		if err != nil {
			return // refused at publish: never reaches an engine
		}
		nh := encodeHeaders(h, 42)
		for k := range nh {
			if strings.HasPrefix(strings.ToLower(k), "nats-") || strings.EqualFold(k, "Status") || strings.EqualFold(k, "Description") {
				t.Fatalf("headers %q sent as NATS header %q, which JetStream or the engine would act on", h, k)
			}
		}
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "fz", Header: nh})
		if err != nil {
			t.Fatalf("headers %q: JetStream did not store them: %v", h, err)
		}
		if ack.Duplicate {
			t.Fatalf("headers %q: JetStream took the message for a duplicate", h)
		}
		rm, err := stream.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		got, at, gotHB := decodeHeaders(rm.Header)
		if !maps.Equal(got.Map(), h.Map()) || !got.Equal(h) || at != 42 || gotHB != hb {
			t.Fatalf("headers %q came back from JetStream as %q (published at %d, %d bytes; want %d)", h, got, at, gotHB, hb)
		}
		m, err := parseEnvelope("t", appendEnvelope(nil, 1, 42, "id", "", 0, h, nil))
		if err != nil || !m.Headers.Equal(h) || m.HeaderBytes != hb {
			t.Fatalf("headers %q came back from a fanout envelope as %q (%v)", h, m.Headers, err)
		}
	})
}
