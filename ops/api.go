package ops

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/plugins"
)

//go:embed web
var webFS embed.FS

// The JSON API the dashboard uses (and anyone else may):
//
//	GET    /api/snapshot                          everything the dashboard shows, at once
//	GET    /api/events                            the same as server-sent events, every Interval
//	GET    /api/server                            version, uptime, readiness, connections (as /varz)
//	GET    /api/history?since=MS                  the dashboard's history (history.go), from since
//	GET    /api/streams?offset=N&limit=M          the open streams and their subscriptions (as /connz)
//	GET    /api/groups/{id}                       one group
//	POST   /api/groups/{id}/purge                 drop what it holds for its members
//	POST   /api/groups/{id}/pause                 stop its deliveries (it keeps taking publishes)
//	POST   /api/groups/{id}/resume                deliver again what it kept
//	DELETE /api/groups/{id}                       remove a group without members
//	GET    /api/groups/{id}/dead-letters?limit=N  its dead letters
//	POST   /api/groups/{id}/dead-letters/replay   {"ids": [...]} (none: all) back to their topics
//
// Errors are {"error": "..."} with a status that says which kind.
func (o *Ops) routes(mux *http.ServeMux) {
	web, _ := fs.Sub(webFS, "web")
	files := http.FileServerFS(web)
	mux.Handle("GET /", o.hostCheck(files))
	mux.Handle("GET /api/snapshot", o.hostCheck(http.HandlerFunc(o.getSnapshot)))
	mux.Handle("GET /api/events", o.hostCheck(http.HandlerFunc(o.events)))
	mux.Handle("GET /api/server", o.hostCheck(http.HandlerFunc(o.getServer)))
	mux.Handle("GET /api/history", o.hostCheck(http.HandlerFunc(o.getHistory)))
	mux.Handle("GET /api/streams", o.hostCheck(http.HandlerFunc(o.getStreams)))
	mux.Handle("GET /api/groups/{id}", o.hostCheck(http.HandlerFunc(o.getGroup)))
	mux.Handle("POST /api/groups/{id}/purge", o.hostCheck(http.HandlerFunc(o.purgeGroup)))
	mux.Handle("POST /api/groups/{id}/pause", o.hostCheck(http.HandlerFunc(o.pauseGroup)))
	mux.Handle("POST /api/groups/{id}/resume", o.hostCheck(http.HandlerFunc(o.resumeGroup)))
	mux.Handle("DELETE /api/groups/{id}", o.hostCheck(http.HandlerFunc(o.deleteGroup)))
	mux.Handle("GET /api/groups/{id}/dead-letters", o.hostCheck(http.HandlerFunc(o.deadLetters)))
	mux.Handle("POST /api/groups/{id}/dead-letters/replay", o.hostCheck(http.HandlerFunc(o.replay)))
}

// hostCheck refuses requests for a host name other than localhost unless remote access is
// allowed or requests are authenticated: a web page whose name an attacker re-binds to
// 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the dashboard.
func (o *Ops) hostCheck(h http.Handler) http.Handler {
	if o.opts.AllowRemote || o.opts.Authenticate != nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if host != "localhost" && net.ParseIP(host) == nil {
			writeError(w, http.StatusForbidden, errors.New("host "+strconv.Quote(r.Host)+" refused: the ops listener answers requests for an IP address or localhost only (http { allow_remote = true } lifts this)"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// adminError writes err with the status that fits it.
func adminError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, broker.ErrUnknownSubscription), errors.Is(err, broker.ErrUnknownMessage):
		status = http.StatusNotFound
	case errors.Is(err, broker.ErrShuttingDown):
		status = http.StatusServiceUnavailable
	}
	writeError(w, status, err)
}

func (o *Ops) getSnapshot(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, o.snaps.get())
}

func (o *Ops) getGroup(w http.ResponseWriter, r *http.Request) {
	g, err := o.opts.Admin.Group(r.PathValue("id"))
	if err != nil {
		adminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, groupJSON(g, time.Now().UnixNano(), o.opts.StuckAfter))
}

func (o *Ops) purgeGroup(w http.ResponseWriter, r *http.Request) {
	n, err := o.opts.Admin.PurgeGroup(r.PathValue("id"))
	o.acted(w, r, "purged", n, err)
}

func (o *Ops) pauseGroup(w http.ResponseWriter, r *http.Request) {
	o.acted(w, r, "paused", 1, o.opts.Admin.PauseGroup(r.PathValue("id"), true))
}

func (o *Ops) resumeGroup(w http.ResponseWriter, r *http.Request) {
	o.acted(w, r, "resumed", 1, o.opts.Admin.PauseGroup(r.PathValue("id"), false))
}

func (o *Ops) deleteGroup(w http.ResponseWriter, r *http.Request) {
	o.acted(w, r, "deleted", 1, o.opts.Admin.DeleteGroup(r.PathValue("id")))
}

// acted answers an action on group {id} that did n things (or failed with err), logs it,
// and has the next snapshot taken afresh.
func (o *Ops) acted(w http.ResponseWriter, r *http.Request, what string, n int, err error) {
	if err != nil {
		adminError(w, err)
		return
	}
	o.log.Info("group "+what+" over HTTP", "group", r.PathValue("id"), "count", n, "remote", r.RemoteAddr)
	o.snaps.invalidate()
	writeJSON(w, http.StatusOK, map[string]int{what: n})
}

func (o *Ops) deadLetters(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10_000 {
			writeError(w, http.StatusBadRequest, errors.New("limit must be a number from 1 to 10000"))
			return
		}
		limit = n
	}
	dls, err := o.opts.Admin.DeadLetters(r.PathValue("id"), limit)
	if err != nil {
		adminError(w, err)
		return
	}
	if dls == nil {
		dls = []DeadLetter{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": dls})
}

func (o *Ops) replay(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []string `json:"ids"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, errors.New(`the body must be JSON: {"ids": ["..."]}, or {} to replay them all`))
		return
	}
	n, err := o.opts.Admin.Replay(r.PathValue("id"), req.IDs)
	o.acted(w, r, "replayed", n, err)
}

// events streams a snapshot every Interval as server-sent events, until the client goes or
// the listener shuts down.
func (o *Ops) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	if !o.stream() {
		writeError(w, http.StatusServiceUnavailable, broker.ErrShuttingDown)
		return
	}
	defer o.streams.Done()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	t := time.NewTicker(o.opts.Interval)
	defer t.Stop()
	enc := json.NewEncoder(w)
	for {
		if _, err := w.Write([]byte("event: snapshot\ndata: ")); err != nil {
			return
		}
		if err := enc.Encode(o.snaps.get()); err != nil { // ends with the newline of data's line
			return
		}
		if _, err := w.Write([]byte("\n")); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-o.quit:
			return
		}
	}
}

// stream counts one more event stream (events ends it with o.streams.Done), unless Shutdown
// has started.
func (o *Ops) stream() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing {
		return false
	}
	o.streams.Add(1)
	return true
}

// Snapshot is what the dashboard shows, from one reading of every counter.
type Snapshot struct {
	Time          int64            `json:"time"` // Unix ms
	Published     uint64           `json:"published"`
	Delivered     uint64           `json:"delivered"`
	Acked         uint64           `json:"acked"`
	Redelivered   uint64           `json:"redelivered"`
	DeadLettered  uint64           `json:"dead_lettered"`
	Unrouted      uint64           `json:"unrouted"`
	Dropped       uint64           `json:"dropped"`
	MemoryUsed    int64            `json:"memory_used"`
	MemoryBudget  int64            `json:"memory_budget"`
	Server        *ServerJSON      `json:"server,omitempty"`
	Fanout        []FanoutJSON     `json:"fanout"` // the first maxListed by id
	FanoutTotal   int              `json:"fanout_total"`
	Buffered      int              `json:"buffered"` // in all fanout subscriptions' buffers
	Members       int              `json:"members"`
	Groups        []GroupJSON      `json:"groups"` // the first maxListed by id
	GroupsTotal   int              `json:"groups_total"`
	Backlog       GroupJSON        `json:"backlog"` // every group's counts summed
	Plugins       []PluginJSON     `json:"plugins"`
	PluginsLoaded bool             `json:"plugins_loaded"`
	Refused       map[string]int64 `json:"refused"` // publishes refused, by gRPC code
}

// serverJSON reads the gRPC server's counters.
func serverJSON(srv Server) *ServerJSON {
	t := srv.Traffic()
	open, refused := srv.Connections()
	return &ServerJSON{Connections: open, ConnectionsRefused: refused, PublishStreams: t.PublishStreams,
		SubscribeStreams: t.SubscribeStreams, PublishedBytes: t.PublishedBytes, DeliveredBytes: t.DeliveredBytes}
}

// ServerJSON is the gRPC server's part of a Snapshot.
type ServerJSON struct {
	Connections        int    `json:"connections"`
	ConnectionsRefused uint64 `json:"connections_refused"`
	PublishStreams     int    `json:"publish_streams"`
	SubscribeStreams   int    `json:"subscribe_streams"`
	PublishedBytes     uint64 `json:"published_bytes"`
	DeliveredBytes     uint64 `json:"delivered_bytes"`
}

// FanoutJSON is one fanout subscription.
type FanoutJSON struct {
	ID        string   `json:"id"`
	Patterns  []string `json:"patterns"`
	Delivered uint64   `json:"delivered"`
	Dropped   uint64   `json:"dropped"`
	Buffered  int      `json:"buffered"`
}

// GroupJSON is one consumer group.
type GroupJSON struct {
	ID       string   `json:"id"`
	Group    string   `json:"group"`
	Patterns []string `json:"patterns"`
	Declared bool     `json:"declared"`
	Paused   bool     `json:"paused"`
	// Stuck: messages queued, members with room, nothing delivered for Options.StuckAfter.
	Stuck       bool  `json:"stuck"`
	Members     int   `json:"members"`
	Queued      int   `json:"queued"`
	InFlight    int   `json:"in_flight"`
	Delayed     int   `json:"delayed"`
	Bytes       int64 `json:"bytes"`
	OldestAgeMS int64 `json:"oldest_age_ms"`
	// The oldest message its members hold unacked, ms since its publish (0: none).
	OldestUnackedMS int64  `json:"oldest_unacked_age_ms"`
	Published       uint64 `json:"published"` // messages it took
	Delivered       uint64 `json:"delivered"`
	Acked           uint64 `json:"acked"`
	Redelivered     uint64 `json:"redelivered"`
	Nacked          uint64 `json:"nacked"`
	TimedOut        uint64 `json:"timed_out"`
	LeftBehind      uint64 `json:"left_behind"`
	DeadLettered    uint64 `json:"dead_lettered"` // ever, since the broker started
	DeadLetters     int    `json:"dead_letters"`  // kept now in its dead-letter store
	Dropped         uint64 `json:"dropped"`
	Rejected        uint64 `json:"rejected"`
}

// PluginJSON is one plugin.
type PluginJSON struct {
	Name        string     `json:"name"`
	Calls       uint64     `json:"calls"`
	Failures    uint64     `json:"failures"`
	Skipped     uint64     `json:"skipped"`
	BreakerOpen bool       `json:"breaker_open"`
	Instances   int        `json:"instances"`
	Hooks       []HookJSON `json:"hooks"`
}

// HookJSON is one hook of a plugin; latencies are estimated from the histogram's buckets.
type HookJSON struct {
	Hook     string            `json:"hook"`
	Calls    uint64            `json:"calls"`
	Failures map[string]uint64 `json:"failures"`
	P50MS    float64           `json:"p50_ms"`
	P99MS    float64           `json:"p99_ms"`
}

// maxListed bounds the groups and fanout subscriptions a snapshot lists (their totals count
// them all), so that a broker with 100,000 subscriptions does not send megabytes a second.
const maxListed = 500

func groupJSON(g broker.GroupStats, now int64, stuckAfter time.Duration) GroupJSON {
	return GroupJSON{ID: g.ID, Group: g.Group, Patterns: g.Patterns, Declared: g.Declared, Paused: g.Paused, Stuck: g.Stuck(now, stuckAfter),
		OldestUnackedMS: int64(ageSeconds(g.OldestUnacked, now) * 1000), Members: g.Members,
		Queued: g.Queued, InFlight: g.InFlight, Delayed: g.Delayed, Bytes: g.Bytes,
		OldestAgeMS: int64(ageSeconds(g.OldestQueued, now) * 1000), Published: g.Published, Delivered: g.Delivered, Acked: g.Acked,
		Redelivered: g.Redelivered, Nacked: g.Nacked, TimedOut: g.TimedOut, LeftBehind: g.LeftBehind,
		DeadLettered: g.DeadLettered, DeadLetters: g.DeadLetters, Dropped: g.Dropped, Rejected: g.Rejected}
}

// snapshotter takes snapshots, at most one per maxAge however many dashboards watch.
type snapshotter struct {
	src    *sources
	maxAge time.Duration
	mu     sync.Mutex
	last   *Snapshot
	at     time.Time
}

func (s *snapshotter) invalidate() {
	s.mu.Lock()
	s.last = nil
	s.mu.Unlock()
}

func (s *snapshotter) get() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && time.Since(s.at) < s.maxAge {
		return s.last
	}
	s.last, s.at = s.take(), time.Now()
	return s.last
}

func (s *snapshotter) take() *Snapshot {
	now := time.Now()
	st := s.src.engine.Stats()
	snap := &Snapshot{Time: now.UnixMilli(), Published: st.Published, Delivered: st.Delivered, Acked: st.Acked,
		Redelivered: st.Redelivered, DeadLettered: st.DeadLettered, Unrouted: st.Unrouted, Dropped: st.Dropped,
		MemoryUsed: st.MemoryUsed, MemoryBudget: st.MemoryBudget, FanoutTotal: len(st.Subscriptions),
		GroupsTotal: len(st.Groups), Fanout: []FanoutJSON{}, Groups: []GroupJSON{}, Plugins: []PluginJSON{},
		Refused: map[string]int64{}}
	for i, f := range st.Subscriptions {
		snap.Buffered += f.Buffered
		if i < maxListed {
			snap.Fanout = append(snap.Fanout, FanoutJSON{ID: f.ID, Patterns: f.Patterns, Delivered: f.Delivered,
				Dropped: f.Dropped, Buffered: f.Buffered})
		}
	}
	var all broker.GroupStats
	var oldest int64
	for i, g := range st.Groups {
		snap.Members += g.Members
		all = addGroup(all, g)
		if g.OldestQueued != 0 && (oldest == 0 || g.OldestQueued < oldest) {
			oldest = g.OldestQueued
		}
		if i < maxListed {
			snap.Groups = append(snap.Groups, groupJSON(g, now.UnixNano(), s.src.stuckAfter))
		}
	}
	all.OldestQueued = oldest
	snap.Backlog = groupJSON(all, now.UnixNano(), s.src.stuckAfter)
	if srv := s.src.server; srv != nil {
		t := srv.Traffic()
		snap.Server = serverJSON(srv)
		for c, n := range t.Refused {
			if n > 0 {
				snap.Refused[codes.Code(c).String()] = int64(n)
			}
		}
	}
	if s.src.plugins != nil {
		snap.PluginsLoaded = true
		for _, p := range s.src.plugins() {
			pj := PluginJSON{Name: p.Name, Calls: p.Calls, Failures: p.Failures, Skipped: p.Skipped,
				BreakerOpen: p.BreakerOpen, Instances: p.Instances, Hooks: []HookJSON{}}
			for _, h := range p.Hooks {
				hj := HookJSON{Hook: h.Hook, Calls: h.Calls, Failures: map[string]uint64{},
					P50MS: quantile(h, 0.5) * 1000, P99MS: quantile(h, 0.99) * 1000}
				for k, n := range h.Failures {
					hj.Failures[plugins.FailureKinds[k]] = n
				}
				pj.Hooks = append(pj.Hooks, hj)
			}
			snap.Plugins = append(snap.Plugins, pj)
		}
	}
	return snap
}

// quantile estimates the q-quantile of a hook's latency in seconds, interpolating linearly
// within the bucket it falls in, as Prometheus's histogram_quantile does.
func quantile(h plugins.HookMetrics, q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for i, n := range h.Buckets {
		upper := plugins.LatencyBounds[i]
		if float64(n) >= rank {
			inBucket := float64(n - below)
			if inBucket == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/inBucket
		}
		lower, below = upper, n
	}
	return plugins.LatencyBounds[len(plugins.LatencyBounds)-1] // past the largest bound
}

// ServerInfo is GET /api/server: the broker as a whole, as NATS's /varz is.
type ServerInfo struct {
	Version   string      `json:"version"`
	Go        string      `json:"go"`
	Started   int64       `json:"started"` // Unix ms
	UptimeSec float64     `json:"uptime_seconds"`
	Ready     bool        `json:"ready"`
	NotReady  string      `json:"not_ready,omitempty"` // why not (broker.Admin.Ready)
	Server    *ServerJSON `json:"server,omitempty"`
	Streams   int         `json:"streams"` // open streams carrying subscriptions
}

func (o *Ops) getServer(w http.ResponseWriter, _ *http.Request) {
	info := ServerInfo{Version: o.opts.Version, Go: runtime.Version(), Started: o.started.UnixMilli(),
		UptimeSec: time.Since(o.started).Seconds(), Ready: true, Streams: len(o.opts.Engine.Streams())}
	if err := o.opts.Engine.Ready(); err != nil {
		info.Ready, info.NotReady = false, err.Error()
	}
	if srv := o.opts.Server; srv != nil {
		info.Server = serverJSON(srv)
	}
	writeJSON(w, http.StatusOK, info)
}

// StreamsPage is GET /api/streams?offset=N&limit=M: the open streams (a client's connection
// of subscriptions, as `tinybroker streams ls` lists them), as NATS's /connz is, by id.
type StreamsPage struct {
	Total   int          `json:"total"`
	Offset  int          `json:"offset"`
	Streams []StreamJSON `json:"streams"`
}

// StreamJSON is one stream.
type StreamJSON struct {
	ID            string                   `json:"id"`
	Peer          string                   `json:"peer"`
	Buffered      int                      `json:"buffered"`
	Subscriptions []StreamSubscriptionJSON `json:"subscriptions"`
}

// StreamSubscriptionJSON is one subscription of a stream.
type StreamSubscriptionJSON struct {
	ID       string   `json:"id"`
	MemberID string   `json:"member_id,omitempty"`
	Mode     string   `json:"mode"`
	Group    string   `json:"group,omitempty"`
	Patterns []string `json:"patterns"`
}

// maxStreamsPage bounds a page of GET /api/streams (limit's default is 100).
const maxStreamsPage = 1000

func (o *Ops) getStreams(w http.ResponseWriter, r *http.Request) {
	offset, limit := 0, 100
	for name, v := range map[string]*int{"offset": &offset, "limit": &limit} {
		if s := r.URL.Query().Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, fmt.Errorf("%s %q is not a count; give a number from 0", name, s))
				return
			}
			*v = n
		}
	}
	switch {
	case limit == 0:
		limit = 100
	case limit > maxStreamsPage:
		limit = maxStreamsPage
	}
	all := o.opts.Engine.Streams()
	page := StreamsPage{Total: len(all), Offset: offset, Streams: []StreamJSON{}}
	for _, st := range all[min(offset, len(all)):min(offset+limit, len(all))] {
		sj := StreamJSON{ID: st.ID, Peer: st.Peer, Buffered: st.Buffered, Subscriptions: make([]StreamSubscriptionJSON, 0, len(st.Subscriptions))}
		for _, s := range st.Subscriptions {
			ss := StreamSubscriptionJSON{ID: s.ID, Mode: s.Mode.String(), Group: s.Group, Patterns: s.Patterns}
			if s.Mode == broker.Balanced {
				ss.MemberID = s.MemberID
			}
			sj.Subscriptions = append(sj.Subscriptions, ss)
		}
		page.Streams = append(page.Streams, sj)
	}
	writeJSON(w, http.StatusOK, page)
}
