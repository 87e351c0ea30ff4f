package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
)

// startingEngine stands for an engine that could not start yet because its cluster cannot
// be reached (a node of a JetStream cluster restarted while another is down: the meta
// leader cannot be elected). It keeps trying to start it with back-off; until then every
// call is refused with broker.ErrUnavailable (gRPC UNAVAILABLE, which clients retry), Ready
// says why (gRPC health NOT_SERVING, /readyz 503), and the plugins' hooks and the declared
// groups wait. Once started, it passes every call to the engine (issue 25, finding 2:
// before, such a node exited about 9 s after it started).
type startingEngine struct {
	log     hclog.Logger
	engine  atomic.Pointer[broker.Engine] // nil until started
	why     atomic.Pointer[error]         // the last attempt's error
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup

	mu       sync.Mutex   // hooks and shutdown, against the start
	hooks    broker.Hooks // installed before the engine started
	hooksSet bool
	shutdown bool
}

// startingBackoff is the first pause between attempts, doubling up to startingBackoffMax.
var startingBackoff, startingBackoffMax = time.Second, 30 * time.Second

// newStartingEngine keeps calling start until it returns an engine, then applies the hooks
// installed meanwhile and calls ready on it (the declared groups). first is why the first
// attempt failed.
func newStartingEngine(first error, start func() (broker.Engine, error), ready func(broker.Engine) error, log hclog.Logger) *startingEngine {
	s := &startingEngine{log: log, stop: make(chan struct{})}
	s.why.Store(&first)
	s.wg.Go(func() {
		pause := startingBackoff
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, startingBackoffMax)
			e, err := start()
			if err != nil {
				s.why.Store(&err)
				log.Warn("engine not started yet; retrying", "error", err, "next_attempt_in", pause)
				continue
			}
			s.mu.Lock()
			if s.shutdown {
				s.mu.Unlock()
				_ = e.Shutdown(context.Background())
				return
			}
			if s.hooksSet {
				e.SetHooks(s.hooks)
			}
			if err := ready(e); err != nil {
				log.Error("engine started, but the declared groups were refused", "error", err)
			}
			s.engine.Store(&e)
			s.mu.Unlock()
			log.Info("engine started: serving")
			return
		}
	})
	return s
}

func (s *startingEngine) get() broker.Engine {
	if p := s.engine.Load(); p != nil {
		return *p
	}
	return nil
}

// unavailable is the error of every call made before the engine started.
func (s *startingEngine) unavailable() error {
	return fmt.Errorf("%w: the engine has not started yet (%v); retry", broker.ErrUnavailable, unwrapUnavailable(*s.why.Load()))
}

// unwrapUnavailable drops the "engine unavailable: " the last error starts with.
func unwrapUnavailable(err error) error {
	if u := errors.Unwrap(err); u != nil && errors.Is(err, broker.ErrUnavailable) && !errors.Is(u, broker.ErrUnavailable) {
		return u
	}
	return err
}

func (s *startingEngine) Publish(topic string, payload []byte, headers map[string]string) (broker.PublishResult, error) {
	if e := s.get(); e != nil {
		return e.Publish(topic, payload, headers)
	}
	return broker.PublishResult{}, s.unavailable()
}

func (s *startingEngine) PublishBatch(frame []broker.Draft, res []broker.PublishResult, errs []error) {
	if e := s.get(); e != nil {
		e.PublishBatch(frame, res, errs)
		return
	}
	err := s.unavailable()
	for i := range errs {
		errs[i] = err
	}
}

func (s *startingEngine) NewStream(size func(*broker.Message) int) broker.Stream {
	if e := s.get(); e != nil {
		return e.NewStream(size)
	}
	return newEndedStream(s.unavailable())
}

func (s *startingEngine) Ack(subscriptionID, systemID string) error {
	if e := s.get(); e != nil {
		return e.Ack(subscriptionID, systemID)
	}
	return s.unavailable()
}

func (s *startingEngine) Nack(subscriptionID, systemID string, delay time.Duration, reason string) error {
	if e := s.get(); e != nil {
		return e.Nack(subscriptionID, systemID, delay, reason)
	}
	return s.unavailable()
}

func (s *startingEngine) Declare(gc broker.GroupConfig) error {
	if e := s.get(); e != nil {
		return e.Declare(gc)
	}
	return s.unavailable()
}

func (s *startingEngine) Group(id string) (broker.GroupInfo, error) {
	if e := s.get(); e != nil {
		return e.Group(id)
	}
	return broker.GroupInfo{}, s.unavailable()
}

func (s *startingEngine) PurgeGroup(id string) (int, error) {
	if e := s.get(); e != nil {
		return e.PurgeGroup(id)
	}
	return 0, s.unavailable()
}

func (s *startingEngine) PauseGroup(id string, paused bool) error {
	if e := s.get(); e != nil {
		return e.PauseGroup(id, paused)
	}
	return s.unavailable()
}

func (s *startingEngine) DeleteGroup(id string) error {
	if e := s.get(); e != nil {
		return e.DeleteGroup(id)
	}
	return s.unavailable()
}

func (s *startingEngine) Streams() []broker.StreamInfo {
	if e := s.get(); e != nil {
		return e.Streams()
	}
	return nil
}

func (s *startingEngine) DeadLetters(id, token string, limit int) ([]broker.DeadLetter, string, error) {
	if e := s.get(); e != nil {
		return e.DeadLetters(id, token, limit)
	}
	return nil, "", s.unavailable()
}

func (s *startingEngine) ReplayDeadLetters(id string, ids []string) ([]broker.Replayed, error) {
	if e := s.get(); e != nil {
		return e.ReplayDeadLetters(id, ids)
	}
	return nil, s.unavailable()
}

func (s *startingEngine) PurgeDeadLetters(id string, ids []string) (int, error) {
	if e := s.get(); e != nil {
		return e.PurgeDeadLetters(id, ids)
	}
	return 0, s.unavailable()
}

func (s *startingEngine) Stats() broker.Stats {
	if e := s.get(); e != nil {
		return e.Stats()
	}
	return broker.Stats{}
}

func (s *startingEngine) Ready() error {
	if e := s.get(); e != nil {
		return e.Ready()
	}
	return s.unavailable()
}

func (s *startingEngine) SetHooks(h broker.Hooks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.get(); e != nil {
		e.SetHooks(h)
		return
	}
	s.hooks, s.hooksSet = h, true
}

// Shutdown stops the attempts (one under way ends first, within ctx), then shuts the engine
// down if it started.
func (s *startingEngine) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	s.stopped.Do(func() { close(s.stop) })
	done := make(chan struct{})
	var waiter sync.WaitGroup
	waiter.Go(func() { s.wg.Wait(); close(done) })
	select {
	case <-done:
	case <-ctx.Done(): // an attempt still under way shuts its engine down when it returns
	}
	if e := s.get(); e != nil {
		return e.Shutdown(ctx)
	}
	return nil
}

// endedStream is the stream of a Subscribe call made before the engine started: it has
// ended, and its subscriptions are refused, with err.
type endedStream struct {
	err  error
	done chan struct{}
}

func newEndedStream(err error) *endedStream {
	s := &endedStream{err: err, done: make(chan struct{})}
	close(s.done)
	return s
}

func (s *endedStream) Subscribe(broker.SubscribeOptions) (broker.Subscription, error) {
	return nil, s.err
}
func (s *endedStream) Refuse(broker.SubscribeOptions, error)                  {}
func (s *endedStream) Lookup(string) (broker.Subscription, int)               { return nil, 0 }
func (s *endedStream) Subscriptions() []broker.Subscription                   { return nil }
func (s *endedStream) Next(dst []broker.Delivery, _, _ int) []broker.Delivery { return dst }
func (s *endedStream) Ready() <-chan struct{}                                 { return s.done }
func (s *endedStream) Done() <-chan struct{}                                  { return s.done }
func (s *endedStream) Err() error                                             { return s.err }
func (s *endedStream) Close()                                                 {}
