package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
)

// The engine's asynchronous stores: each message of a frame a group takes is published to
// the stream with a reply subject of its own under one subscription, and the frame waits
// for all of their acknowledgements at once. This is what nats.go's PublishMsgAsync does,
// without a future and two channels per message and encoding/json's reflection per
// acknowledgement (a fifth of the publish path's CPU in a W2 profile): a PubAck is
// {"stream":"TB","seq":N} and is read as such; only an error goes through encoding/json.

// stores is the engine's table of stores sent and not yet acknowledged.
type stores struct {
	prefix  string             // the reply subjects' prefix, "<inbox>."
	slots   chan struct{}      // one per store outstanding: at most maxPendingStores
	sub     *nats.Subscription // prefix + "*"
	mu      lockrank.Mutex[lockrank.Stores]
	next    uint64
	awaited map[uint64]storeRef
}

// storeRef is a store awaited: message i of batch b.
type storeRef struct {
	b *storeBatch
	i int
}

// storeBatch is a frame's stores: seqs and errs by message; done is closed once every store
// sent has an answer.
type storeBatch struct {
	ids  []uint64 // the reply token of each message stored (0: not sent)
	seqs []uint64
	dups []bool // JetStream had the message's Nats-Msg-Id already: seqs holds the first's
	errs []error
	left int // under stores.mu: stores sent and not answered, plus one until sealed
	done chan struct{}
}

func (e *Engine) startStores() error {
	s := &stores{prefix: nats.NewInbox() + ".", slots: make(chan struct{}, maxPendingStores), awaited: make(map[uint64]storeRef)}
	sub, err := e.nc.Subscribe(s.prefix+"*", s.onAnswer)
	if err != nil {
		return fmt.Errorf("%w: %v", broker.ErrUnavailable, err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	s.sub = sub
	e.st = s
	return nil
}

func newStoreBatch(n int) *storeBatch {
	return &storeBatch{ids: make([]uint64, n), seqs: make([]uint64, n), dups: make([]bool, n), errs: make([]error, n), left: 1, done: make(chan struct{})}
}

// send publishes message i of b to the stream, waiting until deadline for a slot.
func (s *stores) send(nc *nats.Conn, b *storeBatch, i int, m *nats.Msg, deadline time.Time) error {
	select {
	case s.slots <- struct{}{}:
	default:
		t := time.NewTimer(time.Until(deadline))
		select {
		case s.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			return errStoreStalled
		}
	}
	s.mu.Lock()
	s.next++
	id := s.next
	s.awaited[id] = storeRef{b, i}
	b.ids[i] = id
	b.left++
	s.mu.Unlock()
	m.Reply = s.prefix + strconv.FormatUint(id, 36)
	if err := nc.PublishMsg(m); err != nil {
		s.mu.Lock()
		if _, ok := s.awaited[id]; ok {
			delete(s.awaited, id)
			b.ids[i] = 0
			b.left--
			<-s.slots
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// wait waits until every store of b sent has an answer, or until deadline: then those
// without one get context.DeadlineExceeded (they may be stored).
func (s *stores) wait(b *storeBatch, deadline time.Time) {
	s.mu.Lock()
	s.doneLocked(b) // sent in full
	s.mu.Unlock()
	select {
	case <-b.done:
		return
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-b.done:
	case <-t.C:
		s.abandon(b, context.DeadlineExceeded)
	}
}

func (s *stores) doneLocked(b *storeBatch) {
	if b.left--; b.left == 0 {
		close(b.done)
	}
}

// abandon gives up on b's stores not answered yet: each gets err (they may be stored).
func (s *stores) abandon(b *storeBatch, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range b.ids {
		if id == 0 {
			continue
		}
		if _, ok := s.awaited[id]; ok {
			delete(s.awaited, id)
			b.errs[i] = err
			<-s.slots
		}
	}
}

// onAnswer takes JetStream's answer to a store.
func (s *stores) onAnswer(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[len(s.prefix):], 36, 64)
	if err != nil {
		return
	}
	seq, serr := parsePubAck(m)
	dup := serr == nil && bytes.Contains(m.Data, dupKey)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.awaited[id]
	if !ok { // abandoned
		return
	}
	delete(s.awaited, id)
	<-s.slots
	ref.b.seqs[ref.i], ref.b.dups[ref.i], ref.b.errs[ref.i] = seq, dup, serr
	s.doneLocked(ref.b)
}

var (
	errStoreStalled = fmt.Errorf("%d stores outstanding: %w", maxPendingStores, context.DeadlineExceeded)
	seqKey          = []byte(`"seq":`)
	dupKey          = []byte(`"duplicate"`) // a PubAck's "duplicate": true (omitted when false)
)

// parsePubAck reads a JetStream publish acknowledgement: the stream sequence, or why the
// message was not stored.
func parsePubAck(m *nats.Msg) (uint64, error) {
	d := m.Data
	if len(d) == 0 {
		if st := m.Header.Get("Status"); st == "503" {
			return 0, errors.New("no JetStream stream answered (JetStream not available, or no stream for the subject)")
		} else if st != "" {
			return 0, fmt.Errorf("JetStream answered status %s %s", st, m.Header.Get("Description"))
		}
		return 0, errors.New("an empty answer from JetStream")
	}
	if bytes.Contains(d, []byte(`"error"`)) {
		var r struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(d, &r); err == nil && r.Error != nil {
			return 0, fmt.Errorf("JetStream refused it: %w", r.Error)
		}
	}
	at := bytes.Index(d, seqKey)
	if at < 0 {
		return 0, fmt.Errorf("an answer from JetStream without a sequence: %.200s", d)
	}
	d = d[at+len(seqKey):]
	var seq uint64
	n := 0
	for ; n < len(d) && d[n] >= '0' && d[n] <= '9'; n++ {
		seq = seq*10 + uint64(d[n]-'0')
	}
	if n == 0 || seq == 0 {
		return 0, fmt.Errorf("an answer from JetStream without a sequence: %.200s", m.Data)
	}
	return seq, nil
}
