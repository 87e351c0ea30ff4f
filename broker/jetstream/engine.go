// Package jetstream is tinybroker's engine on NATS JetStream: the broker.Engine interface
// mapped onto a NATS server, embedded in the process (a single durable node with nothing
// else to run, or one node of a cluster of tinybroker nodes) or external. Fanout
// subscriptions are core NATS subscriptions (at most once); consumer groups are durable
// JetStream pull consumers with explicit acks on one interest-retention stream. See
// RATIONALE.md, "The JetStream engine", for the mapping and where it differs from the
// memory engine.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
	"github.com/tinybroker/tinybroker/broker/internal/streaming"
)

// Options configure an Engine. Zero values take the defaults shown.
type Options struct {
	broker.Limits

	// URL, if set, is an existing NATS server or cluster to use (nats://host:4222, several
	// separated by commas), with NATSOptions (credentials, TLS) as nats.go takes them.
	// Otherwise the engine starts a NATS server in the process (Embedded).
	URL         string
	NATSOptions []nats.Option
	Embedded    EmbeddedOptions

	// Server, if set, is an embedded NATS server already running in this process that the
	// engine uses and does not stop (tests share one between engines, each with a Prefix and
	// Stream of its own: without a listener, an engine's fanout copies do not go through the
	// server, so engines sharing a prefix there would not see each other's).
	Server *natsserver.Server

	// Replicas of the stream and consumers: 1, or 3 in a cluster of three or more.
	Replicas int
	// Prefix starts every NATS subject the engine uses ("tb"): topic T is published as
	// <prefix>.f.T for fanout subscribers and <prefix>.g.T for consumer groups. Engines with
	// different prefixes and streams share a NATS server without seeing each other.
	Prefix string
	// Stream is the JetStream stream holding what consumer groups have not acked ("TB").
	Stream string
	// MemoryStorage keeps the stream, the dead letters and the consumers' state in memory
	// instead of files (storage = "memory"): nothing is kept across a restart of every node,
	// but with Replicas 3 the loss of a node is survived without a disk. An existing stream
	// keeps the storage it was made with, and the consumers follow it.
	MemoryStorage bool
	// MaxBytes bounds the stream (max_bytes): past it a publish to a group's topic is refused
	// (ResourceExhausted), never an older message dropped; fanout, which JetStream does not
	// store, goes on. 0: JetStream's own limits only (the server's max_file_store or
	// max_memory_store, by default most of the disk or of the memory).
	MaxBytes int64
	// DeleteStreamOnShutdown removes the stream and its consumers, and the plugins' stores,
	// when the engine stops (tests, on a shared server).
	DeleteStreamOnShutdown bool

	// RequestTimeout bounds each call to JetStream: a publish's store, a consumer's
	// creation (5s).
	RequestTimeout time.Duration

	FanoutBufferMessages int  // deliveries buffered per stream for fanout subscriptions (262,144)
	FanoutBufferBytes    int  // payload bytes buffered per stream for fanout subscriptions (64 MiB)
	DropSlowConsumers    bool // drop what a full buffer cannot take instead of ending the stream

	Logger hclog.Logger
}

func (o *Options) setDefaults() {
	o.Limits = o.Limits.WithDefaults()
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Prefix == "" {
		o.Prefix = "tb"
	}
	if o.Stream == "" {
		o.Stream = "TB"
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	o.Limits = o.Limits.WithGroupDefaults(128<<20, 64<<20)
	if o.DedupeMaxBytes <= 0 {
		o.DedupeMaxBytes = 64 << 20
	}
	if o.FanoutBufferMessages <= 0 {
		o.FanoutBufferMessages = 262_144
	}
	if o.FanoutBufferBytes <= 0 {
		o.FanoutBufferBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
}

// metaIDKey is the stream metadata key holding the system_id key of the cluster.
const metaIDKey = "tinybroker-id-key"

var _ broker.Engine = (*Engine)(nil)

// Engine is the JetStream engine. Its methods are safe for concurrent use.
//
// Locks: their order is broker/internal/lockrank's ranks (RATIONALE.md, "Lock order"),
// checked under the lockrank tag. No lock is held while calling JetStream's
// API or a hook, except Engine.mu while a consumer group is created or changed (so that
// two members cannot create it twice).
type Engine struct {
	opts  Options
	log   hclog.Logger
	srv   *natsserver.Server // the embedded server, if the engine started it
	nc    *nats.Conn
	js    jetstream.JetStream
	ids   idCodec
	st    *stores // the stores sent to the stream and not yet acknowledged (store.go)
	solo  bool    // one embedded node: every delivery of the stream is held in this process
	marks *marks  // delivery marks that survive a crash, on an embedded file store (marks.go)
	// local: the embedded server has no listener (clients, cluster, gateways), so only this
	// process's connections reach it: fanout copies go straight to the local subscriptions
	// instead of through NATS and back (see fanout).
	local bool
	// interest says whether any NATS subscription, on this server or (by its routes) on
	// another node, wants a subject; nil with an external server, where the engine cannot ask.
	interest func(subject string) bool
	// interestCount is how many NATS subscriptions want a subject, this server's and (one
	// per node) the other nodes'; nil with an external server.
	interestCount func(subject string) int
	self          string         // this engine's id in announcements
	announcing    []announceWait // under mu: announcements whose answers are awaited
	// storeLimit is the bytes JetStream may store for the engine's account (0: unknown).
	storeLimit int64
	subjF      string
	subjG      string
	subjX      string // <prefix>.x.<consumer>: a consumer group changed (announce)
	subjD      string // <prefix>.d.<consumer>.<system_id>: a dead letter kept (dlq.go)
	subjS      string // <prefix>.s.<consumer>: settle a delivery another node holds (forward)
	dlq        jetstream.Stream
	delays     *delays // the delayed stream (delay.go)
	closing    atomic.Bool

	hooks                                     publishing.HookSlot
	gate                                      publishing.Gate // the steps of a publish every engine shares
	dedupe                                    *publishing.Dedupe
	published, unrouted, hookDropped, refused atomic.Uint64
	streamSeq                                 atomic.Uint64
	fanoutDelivered                           atomic.Uint64
	gen                                       atomic.Uint64 // bumped when subscriptions or groups change: the match cache's tag
	cache                                     sync.Map      // topic → *matchResult
	cacheSize                                 atomic.Int64
	fanCh                                     chan *nats.Msg
	stop                                      chan struct{}
	wg                                        sync.WaitGroup
	shutdownOnce                              sync.Once
	mu                                        lockrank.RWMutex[lockrank.JetStreamEngine]
	fanouts                                   map[string]*Subscription
	patSubs                                   map[string]*patSub // fanout pattern → its NATS subscription
	groups                                    map[string]*group
	groupNames                                map[string]string
	gone                                      map[goneKey]time.Time // consumers deleted, when forgotten (rememberGoneLocked)
	streams                                   map[uint64]*Stream
	autoID                                    uint64
}

// patSub is one NATS subscription for a fanout pattern, shared by the local subscriptions
// that have it.
type patSub struct {
	pattern string
	sub     *nats.Subscription
	subs    []*Subscription // copied on write under Engine.mu
}

// New starts the engine: the embedded NATS server (unless URL or Server is set), the
// connection, and the stream. It fails with the reason if the data directory is not
// writable, the NATS server cannot be reached, or JetStream is not enabled there.
func New(opts Options) (*Engine, error) {
	opts.setDefaults()

	e := &Engine{opts: opts, log: opts.Logger, subjF: opts.Prefix + ".f.", subjG: opts.Prefix + ".g.", subjX: opts.Prefix + ".x.", subjD: opts.Prefix + ".d.", subjS: opts.Prefix + ".s.", self: nats.NewInbox(),
		fanCh: make(chan *nats.Msg, 1<<16), stop: make(chan struct{}),
		fanouts: make(map[string]*Subscription), patSubs: make(map[string]*patSub),
		groups: make(map[string]*group), groupNames: make(map[string]string), streams: make(map[uint64]*Stream)}
	e.dedupe = publishing.NewDedupe(opts.DedupeWindow, opts.DedupeMaxBytes, nil, e.dedupeEvicted)
	e.gate = publishing.Gate{Limits: &e.opts.Limits, Hooks: &e.hooks, Closing: &e.closing, Dedupe: e.dedupe}
	if err := e.connect(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.ensureStream(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.ensureDLQ(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.ensureDelays(); err != nil {
		e.close()
		return nil, err
	}
	// The groups every node made: those that exist now, and those announced from now on;
	// and those JetStream deleted for their inactivity (GroupExpireAfter).
	if _, err := e.nc.Subscribe(e.subjX+"*", e.onAnnounce); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	// Every stream's: the groups with a stream of their own are on theirs.
	if _, err := e.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.DELETED.*.*", e.onConsumerDeleted); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if _, err := e.nc.Subscribe(e.subjS+"*", e.onSettle); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if err := e.nc.Flush(); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	if _, err := e.refreshGroups(); err != nil {
		e.close()
		return nil, err
	}
	e.wg.Go(e.dispatchFanout)
	e.wg.Go(e.fireDue)
	return e, nil
}

// connect starts the embedded server if needed and connects to NATS.
func (e *Engine) connect() error {
	o := &e.opts
	nopts := append([]nats.Option{nats.Name("tinybroker"), nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1), // a publish while disconnected fails at once: the client hears UNAVAILABLE
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				e.log.Warn("disconnected from NATS; publishes and acks fail until it is back", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { e.log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			e.log.Warn("NATS error", "error", err)
		}),
	}, o.NATSOptions...)
	srv := o.Server
	switch {
	case o.URL != "":
		nopts = append(nopts, nats.Timeout(o.RequestTimeout))
		nc, err := nats.Connect(o.URL, nopts...)
		if err != nil {
			return fmt.Errorf("%w: cannot reach the NATS server at %s: %v (is it running, and the url, credentials and TLS settings right?)", broker.ErrUnavailable, o.URL, err)
		}
		e.nc = nc
	default:
		if srv == nil {
			var err error
			if srv, err = startEmbedded(o.Embedded, o.Limits, e.log); err != nil {
				return err
			}
			e.srv = srv
			e.solo = len(o.Embedded.Routes) == 0
			if !o.MemoryStorage {
				if e.marks, err = openMarks(o.Embedded.DataDir); err != nil {
					return fmt.Errorf("delivery marks in %s: %w", o.Embedded.DataDir, err)
				}
			}
		}
		nc, err := nats.Connect("", append(nopts, nats.InProcessServer(srv))...)
		if err != nil {
			return fmt.Errorf("connect to the embedded NATS server: %w", err)
		}
		e.nc = nc
		// The engine's connection has no user: it is in the global account, whose
		// subscriptions include the other nodes' (routes register their interest there).
		e.interest = srv.GlobalAccount().SubscriptionInterest
		e.interestCount = srv.GlobalAccount().Interest
		if o.Server != nil {
			e.solo = len(srv.ClusterName()) == 0 || !srv.JetStreamIsClustered()
		}
		e.local = e.solo && srv.Addr() == nil && srv.ClusterAddr() == nil && srv.GatewayAddr() == nil
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		return err
	}
	e.js = js
	if err := e.startStores(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(o.RequestTimeout, 30*time.Second))
	defer cancel()
	for {
		// A cluster electing its meta leader drops requests: ask again every 2s.
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		ai, err := js.AccountInfo(actx)
		acancel()
		if err == nil {
			// What JetStream may store is the budget Stats reports beside what the groups hold.
			e.storeLimit = ai.Limits.MaxStore
			if o.MemoryStorage {
				e.storeLimit = ai.Limits.MaxMemory
			}
			if cfg := srvConfig(srv); e.storeLimit <= 0 && cfg != nil {
				e.storeLimit = cfg.MaxStore
				if o.MemoryStorage {
					e.storeLimit = cfg.MaxMemory
				}
			}
			return nil
		}
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("%w: JetStream is not enabled on the NATS server (run nats-server with -js)", broker.ErrUnavailable)
		}
		if ctx.Err() != nil { // a cluster still electing its meta leader
			return fmt.Errorf("%w: JetStream did not answer within %v: %v", broker.ErrUnavailable, max(o.RequestTimeout, 30*time.Second), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ensureStream creates the stream, or reads the existing one's id key.
func (e *Engine) ensureStream() error {
	cfg := jetstream.StreamConfig{Name: e.opts.Stream, Subjects: []string{e.subjG + ">"}, Retention: jetstream.InterestPolicy,
		Storage: jetstream.FileStorage, Replicas: e.opts.Replicas, Discard: jetstream.DiscardOld,
		Metadata: map[string]string{metaIDKey: newIDSecret()}, Description: "tinybroker: messages of consumer groups not yet acked",
		Duplicates: e.opts.DedupeWindow} // message ids (Nats-Msg-Id) are remembered as long as the engine's own table does
	if e.opts.MemoryStorage {
		cfg.Storage = jetstream.MemoryStorage
	}
	if e.opts.MaxBytes > 0 {
		// Refuse what does not fit: DiscardOld would drop a group's oldest unacked message.
		cfg.MaxBytes, cfg.Discard = e.opts.MaxBytes, jetstream.DiscardNew
	}
	s, err := e.openStream(cfg)
	if err != nil {
		return err
	}
	if c := s.CachedInfo().Config; max(c.MaxBytes, 0) != cfg.MaxBytes || c.Duplicates != cfg.Duplicates {
		// The stream exists with another bound (JetStream's -1 is none) or dedupe window:
		// take the configured ones.
		c.MaxBytes, c.Discard, c.Duplicates = cfg.MaxBytes, cfg.Discard, cfg.Duplicates
		if c.MaxBytes == 0 {
			c.MaxBytes = -1
		}
		uctx, ucancel := e.ctx()
		s, err = e.js.UpdateStream(uctx, c)
		ucancel()
		if err != nil {
			return fmt.Errorf("%w: JetStream stream %s: setting max_bytes to %d and the duplicate window to %v: %v", broker.ErrUnavailable, cfg.Name, cfg.MaxBytes, cfg.Duplicates, err)
		}
	}
	if mem := s.CachedInfo().Config.Storage == jetstream.MemoryStorage; mem != e.opts.MemoryStorage {
		// JetStream cannot change a stream's storage; a consumer group's state is kept as
		// its messages are.
		e.log.Warn("the JetStream stream exists with another storage; it keeps it (delete the stream, or choose another stream name, to change it)",
			"stream", cfg.Name, "storage", storageName(mem), "configured", storageName(e.opts.MemoryStorage))
		e.opts.MemoryStorage = mem
	}
	key := s.CachedInfo().Config.Metadata[metaIDKey]
	if key == "" {
		return fmt.Errorf("JetStream stream %s exists but was not made by tinybroker (no %s in its metadata); choose another stream name", cfg.Name, metaIDKey)
	}
	e.ids, err = newIDCodec(key)
	return err
}

func storageName(memory bool) string {
	if memory {
		return "memory"
	}
	return "file"
}

// openStream opens the stream cfg names, creating it as cfg says if there is none.
func (e *Engine) openStream(cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	ctx := context.Background()
	// Several nodes starting together may race to create it; a cluster still settling may
	// not answer: look again until RequestTimeout has passed three times.
	var s jetstream.Stream
	var err error
	for deadline := time.Now().Add(3 * e.opts.RequestTimeout); ; {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		s, err = e.js.Stream(actx, cfg.Name)
		acancel()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			cctx, ccancel := e.ctx()
			s, err = e.js.CreateStream(cctx, cfg)
			ccancel()
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: JetStream stream %s: %v", broker.ErrUnavailable, cfg.Name, err)
	}
	return s, nil
}

// ctx is a context bounded by RequestTimeout.
func (e *Engine) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.opts.RequestTimeout)
}

// close releases the connection and the embedded server.
func (e *Engine) close() {
	e.stopDelays()
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
}

// Server returns the embedded NATS server the engine started, or nil.
func (e *Engine) Server() *natsserver.Server { return e.srv }

// SetHooks installs h (nil removes the hooks).
func (e *Engine) SetHooks(h broker.Hooks) {
	e.hooks.Set(h)
	publishing.Start(h, e.emitTicked) // on every node that installs it: each node's chain ticks
}

// emitTicked publishes what hooks emitted on their own time (publishing.Start), unless the
// engine is shutting down: a chain still ticking then has nowhere to publish.
func (e *Engine) emitTicked(ds []broker.Draft) {
	if !e.closing.Load() {
		e.emit(ds)
	}
}

func (e *Engine) currentHooks() broker.Hooks { return e.hooks.Load() }

// unavailable says whether the connection to NATS is down, as an error for the client.
func (e *Engine) unavailable() error {
	if e.nc.IsConnected() {
		return nil
	}
	return fmt.Errorf("%w: the broker has lost its NATS server (%s); retry shortly", broker.ErrUnavailable, e.nc.Status())
}

// Shutdown refuses new work, stops handing out messages, waits until ctx is done for
// in-flight acks, then gives back what members still hold (JetStream redelivers it to the
// next member, here or on another node), ends every stream and disconnects.
func (e *Engine) Shutdown(ctx context.Context) error {
	var err error
	e.shutdownOnce.Do(func() {
		e.closing.Store(true)
		e.stopDelays()
		e.mu.RLock()
		groups := make([]*group, 0, len(e.groups))
		for _, g := range e.groups {
			groups = append(groups, g)
		}
		e.mu.RUnlock()
		for _, g := range groups {
			g.setDraining()
		}
		err = e.drain(ctx, groups)
		for _, st := range e.allStreams() {
			st.end(fmt.Errorf("%w: the broker is stopping; reconnect to its replacement", broker.ErrShuttingDown))
			st.detachAll()
		}
		close(e.stop)
		e.wg.Wait()
		if e.opts.DeleteStreamOnShutdown {
			c, cancel := e.ctx()
			_ = e.js.DeleteStream(c, e.opts.Stream)
			_ = e.js.DeleteStream(c, e.opts.Stream+"_DLQ")
			_ = e.js.DeleteStream(c, e.opts.Stream+"_DELAYED")
			if own, err := e.groupStreams(c); err == nil {
				for _, name := range own {
					_ = e.js.DeleteStream(c, name)
				}
			}
			if own, err := e.streamsNamed(c, "KV_"+e.opts.Stream+pluginStoreInfix); err == nil { // the plugins' stores
				for _, name := range own {
					_ = e.js.DeleteStream(c, name)
				}
			}
			cancel()
		}
		if e.nc.IsConnected() {
			_ = e.nc.FlushTimeout(time.Second) // the acks and naks of the streams' ends
		}
		e.close()
		if e.marks != nil {
			e.marks.clear()
		}
	})
	return err
}

func (e *Engine) allStreams() []*Stream {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*Stream, 0, len(e.streams))
	for _, st := range e.streams {
		out = append(out, st)
	}
	return out
}

// drain waits until no member holds a message, or ctx is done.
func (e *Engine) drain(ctx context.Context, groups []*group) error {
	return streaming.Drain(ctx, e.log, "shutdown grace period over with messages unacked; JetStream redelivers them", func() (busy int) {
		for _, g := range groups {
			busy += g.inFlight()
		}
		return busy
	})
}

// JetStream returns the engine's JetStream context, for what the program keeps in NATS
// beside the messages (the deployed plugins, cmd/tinybroker).
func (e *Engine) JetStream() jetstream.JetStream { return e.js }
