package plugins

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
)

// Logs to a topic (Spec.LogTopic): every line a plugin logs (v1_log, and what it writes to
// stderr) is also published to its log_topic, with the headers plugin, hash and level (and
// candidate, for a candidate version's). The lines go through the engine's emit, as what
// on_tick emits, so no plugin's on_publish sees them, and none loops on its own lines.
//
// They are published by one goroutine per chain, not inside the host call: the guest may be
// called while the engine holds a lock that routing takes (on_ack, on_redeliver), and a
// plugin's call should not wait for a publish. A plugin's lines are bounded by a token
// bucket of log_topic_rate lines a second (as many at once); past it, and when the queue to
// the goroutine is full, a line is dropped and counted (PluginStats.LogDropped). Lines logged
// before the chain is started (Chain.Start: tb_v1_init's at load) or after it is closed are
// not published: there is no engine to publish them yet, or any more.

// DefaultLogTopicRate is a plugin's log_topic_rate by default: lines a second.
const DefaultLogTopicRate = 100

// logQueueLen is how many lines wait for the chain's goroutine to publish them.
const logQueueLen = 256

// logTopics is a chain's lines bound for its plugins' log topics.
type logTopics struct {
	open  atomic.Bool // from Start until Close
	lines chan broker.Draft
}

// forward publishes the queued lines through the engine's emit until t stops, as many as are
// queued at once.
func (q *logTopics) forward(t *ticking) {
	for {
		var ds []broker.Draft
		select {
		case <-t.done:
			return
		case d := <-q.lines:
			ds = append(ds, d)
		}
	more:
		for len(ds) < logQueueLen {
			select {
			case d := <-q.lines:
				ds = append(ds, d)
			default:
				break more
			}
		}
		if emit := t.emit.Load(); emit != nil {
			(*emit)(ds)
		}
	}
}

// tokenBucket allows rate events a second, and as many at once.
type tokenBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// take reports whether one more event is allowed at now, and counts it if so.
func (b *tokenBucket) take(rate int, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens = float64(rate)
	} else {
		b.tokens = min(float64(rate), b.tokens+now.Sub(b.last).Seconds()*float64(rate))
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// logToTopic queues line, logged at level, for the plugin's log topic, if it has one and its
// chain is started; over its rate, or with the queue full, it drops the line and counts it.
func (p *plugin) logToTopic(level hclog.Level, line string) {
	q := p.logs
	if q == nil || !q.open.Load() {
		return
	}
	if !p.logBucket.take(p.spec.LogTopicRate, time.Now()) {
		p.logDropped.Add(1)
		return
	}
	hs := make(broker.Headers, 0, 4)
	if p.role != 0 {
		hs = append(hs, broker.Header{Key: "candidate", Value: p.role.String()})
	}
	hs = append(hs, broker.Header{Key: "hash", Value: p.spec.Hash}, broker.Header{Key: "level", Value: level.String()},
		broker.Header{Key: "plugin", Value: p.spec.Name}) // sorted by key, as Headers must be
	select {
	case q.lines <- broker.Draft{Topic: p.spec.LogTopic, Payload: []byte(line), Headers: hs}:
	default:
		p.logDropped.Add(1)
	}
}
