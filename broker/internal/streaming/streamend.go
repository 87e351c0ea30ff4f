// Package streaming holds the parts of a broker.Stream both engines build theirs from: how
// a stream ends (End), the subscriptions it carries (Subs), and the wait of a Shutdown
// (Drain).
package streaming

// End is how a Stream ends, as both engines' streams do: once, with the first reason
// given; Done is closed then and Err says why. It has no lock of its own: its owner guards
// End, Ended and Err with the lock that also guards what it pushes to the stream, so that
// nothing is pushed after the end. Done needs no lock.
type End struct {
	done  chan struct{}
	err   error
	ended bool
}

// NewEnd returns the end of an open stream.
func NewEnd() End { return End{done: make(chan struct{})} }

// End ends the stream with err unless it has ended, and says whether this call ended it.
func (e *End) End(err error) bool {
	if e.ended {
		return false
	}
	e.ended, e.err = true, err
	close(e.done)
	return true
}

// Ended says whether the stream has ended.
func (e *End) Ended() bool { return e.ended }

// Err says why the stream ended; nil while it is open.
func (e *End) Err() error { return e.err }

// Done is closed when the stream has ended.
func (e *End) Done() <-chan struct{} { return e.done }
