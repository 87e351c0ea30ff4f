package ops_test

import (
	"context"
	"github.com/hashicorp/go-hclog"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	dto "github.com/prometheus/client_model/go"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/ops"
	"github.com/tinybroker/tinybroker/plugins"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stack is a real broker: an engine of brokertest's table served over gRPC on a loopback
// port (servertest), the ops listener on another, and a gRPC client.
type stack struct {
	b     broker.Engine
	srv   *server.Server
	ops   *ops.Ops
	chain *plugins.Chain
	url   string // the ops listener, http://127.0.0.1:PORT
	addr  string // the gRPC server's
	c     pb.BrokerClient
	logs  *brokertest.Log // the ops listener's
}

type stackOptions struct {
	on        brokertest.Engine // brokertest.Engines[0]
	engine    brokertest.Options
	plugins   []plugins.Spec
	maxGroups int
	interval  time.Duration // of the event stream (100ms)
	history   time.Duration // HistoryInterval (the default, 5s)
	histLen   int           // HistoryLen (the default, 720)
	auth      *auth.Authenticator
	httpAuth  func(*http.Request) error // the listener's Authenticate
	commit    string
	stuck     time.Duration // StuckAfter (the default, 1m)
}

func start(t *testing.T, so stackOptions) *stack {
	t.Helper()
	s := &stack{}
	if len(so.plugins) > 0 {
		host, err := plugins.NewHost(plugins.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.chain, err = host.Load(context.Background(), so.plugins); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // after the engine's shutdown (cleanups run last first)
			_ = s.chain.Close(context.Background())
			_ = host.Close(context.Background())
		})
		so.engine.Hooks = s.chain
	}
	tb := servertest.Start(t, servertest.Options{Engine: so.on, Options: so.engine, Server: server.Options{Auth: so.auth}})
	s.b, s.srv = tb.Engine, tb.Server
	hlis, err := ops.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	if so.interval == 0 {
		so.interval = 100 * time.Millisecond
	}
	opts := ops.Options{Engine: s.b, Server: s.srv, Interval: so.interval, MaxGroupSeries: so.maxGroups, Authenticate: so.httpAuth, Version: "v1.2.3", Commit: so.commit,
		HistoryInterval: so.history, HistoryLen: so.histLen, StuckAfter: so.stuck}
	s.logs = new(brokertest.Log)
	opts.Logger = hclog.New(&hclog.LoggerOptions{Output: s.logs, Level: hclog.Info})
	if s.chain != nil {
		opts.Plugins = s.chain.Metrics
	}
	s.ops = ops.New(opts)
	s.url = "http://" + hlis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.ops.Serve(hlis) }()
	t.Cleanup(func() { // before the server's and engine's
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.ops.Shutdown(ctx); err != nil {
			t.Errorf("ops shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("ops serve: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	s.addr = tb.Addr
	s.c = pb.NewBrokerClient(servertest.Dial(t, tb.Addr))
	return s
}

// scrape reads /metrics.
func (s *stack) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// value returns the value of the series of name whose labels include labels ("k=v" each),
// and whether there is one. For a histogram it is the sample count.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// histogram returns the histogram of name whose labels include labels, or nil.
func histogram(mfs map[string]*dto.MetricFamily, name string, labels ...string) *dto.Histogram {
	mf := mfs[name]
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetName() == k && lp.GetValue() == v }) {
				continue next
			}
		}
		return m.GetHistogram()
	}
	return nil
}

// eachEngine runs f as a subtest on each engine of brokertest's table, releasing what an
// engine shares between tests (an embedded NATS server) when the test ends.
func eachEngine(t *testing.T, f func(t *testing.T, e brokertest.Engine)) {
	for _, e := range brokertest.Engines {
		if e.Release != nil {
			t.Cleanup(e.Release)
		}
		t.Run(e.Name, func(t *testing.T) { f(t, e) })
	}
}

// waitMetric polls /metrics until the series of name with labels satisfies ok.
func (s *stack) waitMetric(t *testing.T, name string, ok func(float64) bool, labels ...string) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, found := value(s.scrape(t), name, labels...)
		if found && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v (found %v): the condition never held", name, labels, v, found)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool {
	return func(v float64) bool { return v >= want }
}

func (s *stack) publish(t *testing.T, topic, payload string) {
	t.Helper()
	if _, err := s.c.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Payload: []byte(payload)}); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

// member joins group id on patterns; it receives on msgs until the test ends.
type member struct {
	stream grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	msgs   chan *pb.Message
}

// openStream opens a Subscribe stream on ctx with open as its first frame, and returns the
// stream and the server's answer (subscribed, refused, or the error that ended the stream).
func (s *stack) openStream(t *testing.T, ctx context.Context, open *pb.OpenSubscription) (grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse], *pb.SubscribeResponse, error) {
	t.Helper()
	stream, err := s.c.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	return stream, r, err
}

func (s *stack) join(t *testing.T, id string, open *pb.OpenSubscription) *member {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	open.SubscriptionId, open.ConsumerGroup, open.Mode = id, id, pb.DeliveryMode_DELIVERY_MODE_BALANCED
	if open.AckDeadline == nil {
		open.AckDeadline = durationpb.New(time.Minute)
	}
	stream, r, err := s.openStream(t, ctx, open)
	if err != nil || r.GetSubscribed() == nil {
		t.Fatalf("open %s: %v %v", id, r, err)
	}
	m := &member{stream: stream, msgs: make(chan *pb.Message, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			for _, msg := range r.GetMessages().GetMessages() {
				m.msgs <- msg
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

func (m *member) next(t *testing.T) *pb.Message {
	t.Helper()
	return brokertest.Receive(t, m.msgs, "a message")
}

func (m *member) nack(t *testing.T, msg *pb.Message) {
	t.Helper()
	if err := m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Nack{Nack: &pb.NackBatch{SystemIds: []string{msg.GetSystemId()}}}}); err != nil {
		t.Fatal(err)
	}
}

func (m *member) ack(t *testing.T, msg *pb.Message) {
	t.Helper()
	if err := m.stream.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: []string{msg.GetSystemId()}}}}); err != nil {
		t.Fatal(err)
	}
}

func wasm(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "plugins", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
