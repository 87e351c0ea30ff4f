package ops

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The broker keeps the dashboard's history itself, so that a page opens with its charts
// drawn: every HistoryInterval (5 s) a point of the counters the charts show, the last
// HistoryLen (720: an hour) of them, in a ring. A point is small (the counters, the backlog,
// and the backlog and counters of the historyGroups busiest groups), so an hour is about
// 1.5 MB at most.

// historyGroups is how many groups a history point keeps: the busiest, by backlog plus the
// messages published to and delivered from them since the point before. The others are left
// out of that point; the dashboard draws their sparklines and rates from its own snapshots.
const historyGroups = 20

// HistoryPoint is one point of the history, in the shape of a snapshot's fields of the same
// names (the dashboard charts both alike).
type HistoryPoint struct {
	Time         int64        `json:"time"` // Unix milliseconds
	Published    uint64       `json:"published"`
	Delivered    uint64       `json:"delivered"`
	Acked        uint64       `json:"acked"`
	Redelivered  uint64       `json:"redelivered"`
	DeadLettered uint64       `json:"dead_lettered"`
	MemoryUsed   int64        `json:"memory_used"`
	Backlog      BacklogJSON  `json:"backlog"`
	Groups       []GroupPoint `json:"groups"` // the historyGroups busiest
}

// GroupPoint is a group's part of a history point: its backlog and its counters, of which
// the dashboard makes the group's rates.
type GroupPoint struct {
	ID           string `json:"id"`
	Queued       int    `json:"queued"`
	InFlight     int    `json:"in_flight"`
	Delayed      int    `json:"delayed"`
	Published    uint64 `json:"published"`
	Delivered    uint64 `json:"delivered"`
	Acked        uint64 `json:"acked"`
	Redelivered  uint64 `json:"redelivered"`
	DeadLettered uint64 `json:"dead_lettered"`
}

// BacklogJSON is what a group holds (with its id), or every group together (without).
type BacklogJSON struct {
	ID       string `json:"id,omitempty"`
	Queued   int    `json:"queued"`
	InFlight int    `json:"in_flight"`
	Delayed  int    `json:"delayed"`
}

// HistoryJSON is GET /api/history's answer: the points, oldest first.
type HistoryJSON struct {
	IntervalMS int64          `json:"interval_ms"`
	Points     []HistoryPoint `json:"points"`
}

type history struct {
	mu     sync.Mutex
	points []HistoryPoint // a ring of cap HistoryLen
	next   int            // where the next point goes, once the ring is full
}

func (h *history) add(p HistoryPoint, max int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.points) < max {
		h.points = append(h.points, p)
		return
	}
	h.points[h.next] = p
	h.next = (h.next + 1) % max
}

func (h *history) all() []HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HistoryPoint, 0, len(h.points))
	out = append(out, h.points[h.next:]...)
	return append(out, h.points[:h.next]...)
}

// point makes a history point of a snapshot, keeping the historyGroups busiest groups: by
// backlog plus the messages published to and delivered from them since prev (the snapshot
// of the point before; nil: none), so that a group that passes many messages on at once is
// kept as well as one that holds many.
func point(s, prev *Snapshot) HistoryPoint {
	p := HistoryPoint{Time: s.Time, Published: s.Published, Delivered: s.Delivered, Acked: s.Acked, Redelivered: s.Redelivered,
		DeadLettered: s.DeadLettered, MemoryUsed: s.MemoryUsed,
		Backlog: BacklogJSON{Queued: s.Backlog.Queued, InFlight: s.Backlog.InFlight, Delayed: s.Backlog.Delayed}}
	before := map[string]GroupJSON{}
	if prev != nil {
		for _, g := range prev.Groups {
			before[g.ID] = g
		}
	}
	busy := func(g GroupJSON) uint64 {
		b := before[g.ID] // a group new since prev: all it did
		moved := sub(g.Published, b.Published) + sub(g.Delivered, b.Delivered)
		return uint64(g.Queued+g.InFlight+g.Delayed) + moved
	}
	groups := slices.Clone(s.Groups)
	slices.SortFunc(groups, func(x, y GroupJSON) int { return cmp.Or(cmp.Compare(busy(y), busy(x)), cmp.Compare(x.ID, y.ID)) })
	for _, g := range groups[:min(len(groups), historyGroups)] {
		p.Groups = append(p.Groups, GroupPoint{ID: g.ID, Queued: g.Queued, InFlight: g.InFlight, Delayed: g.Delayed,
			Published: g.Published, Delivered: g.Delivered, Acked: g.Acked, Redelivered: g.Redelivered, DeadLettered: g.DeadLettered})
	}
	return p
}

// sub is a-b, or 0 for a counter that went back (a group removed and made anew).
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// sample adds a point every HistoryInterval until Shutdown; run by Serve, waited for by
// Shutdown.
func (o *Ops) sample() {
	t := time.NewTicker(o.opts.HistoryInterval)
	defer t.Stop()
	var prev *Snapshot
	for {
		s := o.snaps.take() // its own: the event streams' cached one may be Interval/2 old
		o.hist.add(point(s, prev), o.opts.HistoryLen)
		o.noteStuck(s)
		prev = s
		select {
		case <-o.quit:
			return
		case <-t.C:
		}
	}
}

// noteStuck logs each group that became stuck since the last sample, and each that no
// longer is: once per episode. Only the sampler calls it.
func (o *Ops) noteStuck(s *Snapshot) {
	stuck := make(map[string]bool)
	for _, g := range s.Groups {
		if !g.Stuck {
			continue
		}
		stuck[g.ID] = true
		if !o.stuck[g.ID] {
			o.log.Warn("consumer group stuck: it has messages queued and members with room, and has delivered nothing for a while; look for a key whose message a member holds and does not settle, or ask the members",
				"group", g.ID, "queued", g.Queued, "in_flight", g.InFlight, "members", g.Members, "for_at_least", o.opts.StuckAfter)
		}
	}
	for id := range o.stuck {
		if !stuck[id] {
			o.log.Info("consumer group no longer stuck", "group", id)
		}
	}
	o.stuck = stuck
}

// getHistory answers GET /api/history, or with ?since=MS (Unix milliseconds) the points from
// then on only: the dashboard asks for its five minutes, not the hour's 1.5 MB.
func (o *Ops) getHistory(w http.ResponseWriter, r *http.Request) {
	var since int64
	if s := r.URL.Query().Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("since %q is not a time: give Unix milliseconds, e.g. since=%d", s, time.Now().Add(-5*time.Minute).UnixMilli()))
			return
		}
		since = n
	}
	points := o.hist.all()
	from, _ := slices.BinarySearchFunc(points, since, func(p HistoryPoint, t int64) int { return cmp.Compare(p.Time, t) })
	writeJSON(w, http.StatusOK, HistoryJSON{IntervalMS: o.opts.HistoryInterval.Milliseconds(), Points: points[from:]})
}
