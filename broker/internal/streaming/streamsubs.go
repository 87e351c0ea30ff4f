package streaming

import (
	"fmt"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/lockrank"
)

// Subs are a Stream's open subscriptions by id, and the peer they came from, as both
// engines keep them, under a lock of their own. It is a leaf lock but for Add's open; the
// zero value is empty.
type Subs[S interface {
	comparable
	broker.Subscription
}, R lockrank.Rank] struct {
	mu   lockrank.Mutex[R] // its rank is the engine's
	subs map[string]S
	peer string // the peer of the first subscription added
}

// Add adds s under id, coming from peer, unless the stream carries id already or max
// subscriptions. open, if not nil, runs last under the lock, so that no Add or Take comes
// between: s is added if it returns nil (an engine checks there that the stream has not
// ended, and queues the subscription's opening event).
func (r *Subs[S, R]) Add(id string, s S, peer string, max int, open func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.subs[id]; ok {
		return fmt.Errorf("%w: this stream already carries subscription %q; a stream can be one member of a group at most", broker.ErrSubscriptionExists, id)
	}
	if n := len(r.subs); n >= max {
		return fmt.Errorf("%w: this stream carries %d subscriptions, its limit (limits { max_subscriptions_per_stream }); close some, open another stream, or raise the limit", broker.ErrLimit, n)
	}
	if open != nil {
		if err := open(); err != nil {
			return err
		}
	}
	if r.subs == nil {
		r.subs = make(map[string]S, 1)
	}
	r.subs[id] = s
	if r.peer == "" {
		r.peer = peer
	}
	return nil
}

// Remove removes s if id is still s's, and returns how many subscriptions are left.
func (r *Subs[S, R]) Remove(id string, s S) (left int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs[id] == s {
		delete(r.subs, id)
	}
	return len(r.subs)
}

// Take removes every subscription and returns them, for an ended stream to detach.
func (r *Subs[S, R]) Take() map[string]S {
	r.mu.Lock()
	defer r.mu.Unlock()
	subs := r.subs
	r.subs = nil
	return subs
}

// Lookup is Stream.Lookup: the open subscription with id, or with id empty the only one (nil,
// not a nil S in an interface, if there is none); and how many are open.
func (r *Subs[S, R]) Lookup(id string) (broker.Subscription, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var none S
	n := len(r.subs)
	if id == "" && n == 1 {
		for _, s := range r.subs {
			return s, n
		}
	}
	if s := r.subs[id]; id != "" && s != none {
		return s, n
	}
	return nil, n
}

// List is Stream.Subscriptions: the open subscriptions, in no order.
func (r *Subs[S, R]) List() []broker.Subscription {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]broker.Subscription, 0, len(r.subs))
	for _, s := range r.subs {
		out = append(out, s)
	}
	return out
}

// Peer returns the peer of the stream's first subscription.
func (r *Subs[S, R]) Peer() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peer
}
