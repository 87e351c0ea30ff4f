package brokertest

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/jetstream"
)

// The JetStream engines of a test package share one embedded NATS server (starting one per
// test would cost most of the suite's time); each gets a subject prefix and a stream of its
// own, deleted when it shuts down, so tests do not see each other.
var (
	jsMu     sync.Mutex
	jsServer *natsserver.Server
	jsDir    string
	jsSeq    atomic.Uint64
)

func sharedNATS(tb testing.TB) *natsserver.Server {
	jsMu.Lock()
	defer jsMu.Unlock()
	if jsServer != nil {
		return jsServer
	}
	dir, err := os.MkdirTemp("", "tinybroker-jetstream-test-")
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := jetstream.StartEmbedded(jetstream.EmbeddedOptions{DataDir: dir}, broker.Limits{}, nil)
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatal(err)
	}
	jsServer, jsDir = srv, dir
	return srv
}

func releaseJetStream() {
	jsMu.Lock()
	defer jsMu.Unlock()
	if jsServer == nil {
		return
	}
	jsServer.Shutdown()
	jsServer.WaitForShutdown()
	os.RemoveAll(jsDir)
	jsServer, jsDir = nil, ""
}

func newJetStream(tb testing.TB, o Options) broker.Engine {
	n := strconv.FormatUint(jsSeq.Add(1), 10)
	e, err := jetstream.New(jetstream.Options{
		Limits:                 o.Limits,
		Server:                 sharedNATS(tb),
		Prefix:                 "t" + n,
		Stream:                 "T" + n,
		DeleteStreamOnShutdown: true,
		FanoutBufferMessages:   o.FanoutBufferMessages,
		FanoutBufferBytes:      o.FanoutBufferBytes,
		DropSlowConsumers:      o.DropSlowConsumers,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return e
}
