package broker

// StreamEnd is how a Stream ends, as both engines' streams do: once, with the first reason
// given; Done is closed then and Err says why. It has no lock of its own: its owner guards
// End, Ended and Err with the lock that also guards what it pushes to the stream, so that
// nothing is pushed after the end. Done needs no lock.
type StreamEnd struct {
	done  chan struct{}
	err   error
	ended bool
}

// NewStreamEnd returns the end of an open stream.
func NewStreamEnd() StreamEnd { return StreamEnd{done: make(chan struct{})} }

// End ends the stream with err unless it has ended, and says whether this call ended it.
func (e *StreamEnd) End(err error) bool {
	if e.ended {
		return false
	}
	e.ended, e.err = true, err
	close(e.done)
	return true
}

// Ended says whether the stream has ended.
func (e *StreamEnd) Ended() bool { return e.ended }

// Err says why the stream ended; nil while it is open.
func (e *StreamEnd) Err() error { return e.err }

// Done is closed when the stream has ended.
func (e *StreamEnd) Done() <-chan struct{} { return e.done }
