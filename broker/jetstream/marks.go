package jetstream

// Delivery marks that survive a crash: JetStream's file store writes a consumer's delivered
// state a moment after it delivers, so a node killed in that moment forgets that it
// delivered some messages, and after its restart they would come back as first deliveries
// (attempt 1) though a member may have had them (issue 25, finding 3). Before a member of
// this node gets a message past what the group's mark file says, the mark moves ahead of it;
// after a crash, a first delivery at or below the mark the last run left is marked as a
// redelivery. False positives (at most markAhead messages that were never delivered, and
// what another node's member had below this node's mark) are allowed, false negatives are
// not, as RabbitMQ marks every message that may have been delivered. A clean shutdown
// removes the marks: JetStream's state is then exact.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// markAhead is how far beyond the message it delivers a group's mark moves: one small file
// write per markAhead stream sequences, at most markAhead false marks after a crash.
const markAhead = 1024

// marks keeps the mark files of the groups of an engine on an embedded file store.
type marks struct {
	dir  string
	prev map[string]uint64 // consumer name → the mark the last run left (read once, at start)
}

// openMarks reads the marks the last run left under dataDir; nil when there is no file store.
func openMarks(dataDir string) (*marks, error) {
	dir := filepath.Join(dataDir, "tinybroker-marks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := &marks{dir: dir, prev: make(map[string]uint64)}
	for _, ent := range ents {
		name := ent.Name()
		if strings.HasSuffix(name, ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			m.prev[name] = v
		}
	}
	return m, nil
}

// write records that this node's members may get messages up to seq of consumer: a new
// file renamed over the old, so that a kill leaves one or the other whole.
func (m *marks) write(consumer string, seq uint64) error {
	path := filepath.Join(m.dir, consumer)
	if err := os.WriteFile(path+".tmp", strconv.AppendUint(nil, seq, 10), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// clear removes every mark: after a clean shutdown JetStream's delivered state is exact.
func (m *marks) clear() { _ = os.RemoveAll(m.dir) }

// markLocked applies the marks to the delivery of seq, which JetStream counts as delivered
// times: it returns the attempt to report (2 for a first delivery the last run may have
// made), and moves g's mark ahead of seq first if needed. g.mu must be held.
func (g *group) markLocked(seq uint64, delivered uint32) uint32 {
	mk := g.e.marks
	if mk == nil {
		return delivered
	}
	if !g.markRead {
		g.markRead = true
		g.markPrev = mk.prev[g.consumer]
		g.markNext = g.markPrev
	}
	if seq > g.markNext {
		if err := mk.write(g.consumer, seq+markAhead); err != nil {
			g.e.log.Warn("cannot write the delivery mark; after a crash, redeliveries may look like first deliveries", "group", g.id, "error", err)
		} else {
			g.markNext = seq + markAhead
		}
	}
	if delivered == 1 && seq <= g.markPrev {
		return 2
	}
	return delivered
}
