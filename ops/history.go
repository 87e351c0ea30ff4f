package ops

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The broker keeps the dashboard's history itself, so that a page opens with its charts
// drawn: every HistoryInterval (5 s) a point of the counters the charts show, the last
// HistoryLen (720: an hour) of them, in a ring. A point is small (the counters, the backlog,
// and the historyGroups groups with the largest backlogs), so an hour is about 1 MB at most.

// historyGroups is how many groups, largest backlog first, a history point keeps.
const historyGroups = 20

// HistoryPoint is one point of the history, in the shape of a snapshot's fields of the same
// names (the dashboard charts both alike).
type HistoryPoint struct {
	Time         int64         `json:"time"` // Unix milliseconds
	Published    uint64        `json:"published"`
	Delivered    uint64        `json:"delivered"`
	Acked        uint64        `json:"acked"`
	Redelivered  uint64        `json:"redelivered"`
	DeadLettered uint64        `json:"dead_lettered"`
	MemoryUsed   int64         `json:"memory_used"`
	Backlog      BacklogJSON   `json:"backlog"`
	Groups       []BacklogJSON `json:"groups"`
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

// point makes a history point of a snapshot.
func point(s *Snapshot) HistoryPoint {
	p := HistoryPoint{Time: s.Time, Published: s.Published, Delivered: s.Delivered, Acked: s.Acked, Redelivered: s.Redelivered,
		DeadLettered: s.DeadLettered, MemoryUsed: s.MemoryUsed,
		Backlog: BacklogJSON{Queued: s.Backlog.Queued, InFlight: s.Backlog.InFlight, Delayed: s.Backlog.Delayed}}
	groups := slices.Clone(s.Groups)
	backlog := func(g GroupJSON) int { return g.Queued + g.InFlight + g.Delayed }
	slices.SortFunc(groups, func(x, y GroupJSON) int { return cmp.Or(cmp.Compare(backlog(y), backlog(x)), cmp.Compare(x.ID, y.ID)) })
	for _, g := range groups[:min(len(groups), historyGroups)] {
		p.Groups = append(p.Groups, BacklogJSON{ID: g.ID, Queued: g.Queued, InFlight: g.InFlight, Delayed: g.Delayed})
	}
	return p
}

// sample adds a point every HistoryInterval until Shutdown; run by Serve, waited for by
// Shutdown.
func (o *Ops) sample() {
	t := time.NewTicker(o.opts.HistoryInterval)
	defer t.Stop()
	for {
		o.hist.add(point(o.snaps.take()), o.opts.HistoryLen) // its own: the event streams' cached one may be Interval/2 old
		select {
		case <-o.quit:
			return
		case <-t.C:
		}
	}
}

func (o *Ops) getHistory(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, HistoryJSON{IntervalMS: o.opts.HistoryInterval.Milliseconds(), Points: o.hist.all()})
}
