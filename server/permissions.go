package server

import (
	"sync"

	"google.golang.org/grpc/status"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/server/auth"
)

// subCount opens a Subscribe stream's subscriptions after the caller's permissions, and
// counts them against the user's max_subscriptions: it holds as many as the stream carries,
// brought back in line (sync) after subscriptions close and given back when the stream ends.
// Without a caller it only opens.
type subCount struct {
	c    *auth.Caller
	mu   sync.Mutex
	held int
	done bool
}

func newSubCount(c *auth.Caller) *subCount { return &subCount{c: c} }

// open checks o against the caller's permissions and opens it on st; a refused open is
// answered on the stream when answer is set (later opens), else only returned (the first).
func (sc *subCount) open(st broker.Stream, o broker.SubscribeOptions, answer bool) error {
	if sc.c == nil {
		_, err := st.Subscribe(o)
		return err
	}
	err := sc.c.Subscribe(&o)
	if err == nil {
		err = sc.take()
	}
	if err != nil {
		if answer {
			st.Refuse(o, err)
		}
		return err
	}
	if _, err := st.Subscribe(o); err != nil {
		sc.sync(st)
		return err
	}
	return nil
}

func (sc *subCount) take() error {
	if !sc.c.CountsSubscriptions() {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done {
		return broker.ErrSubscriptionClosed
	}
	if err := sc.c.TakeSubscription(); err != nil {
		return err
	}
	sc.held++
	return nil
}

// sync gives back what the stream no longer carries.
func (sc *subCount) sync(st broker.Stream) {
	if !sc.c.CountsSubscriptions() {
		return
	}
	_, n := st.Lookup("")
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.done && n < sc.held {
		sc.c.ReleaseSubscriptions(sc.held - n)
		sc.held = n
	}
}

// end gives back everything the stream held.
func (sc *subCount) end() {
	if !sc.c.CountsSubscriptions() {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.c.ReleaseSubscriptions(sc.held)
	sc.held, sc.done = 0, true
}

// errorText is the text of an error for a client: a status's message without its
// "rpc error: code = ..." prefix.
func errorText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}
