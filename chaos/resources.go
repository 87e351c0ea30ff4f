package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Finding 5: what one client can make the broker hold per stream, subscription and
// connection, and the cost of detaching and of Stats.

const methodSubscribe = "/tinybroker.v1.Broker/Subscribe"

// openMany opens n fanout subscriptions on one stream, pipelined, and counts the answers.
func openMany(e *env, s *sub, n int, id func(int) string, pattern func(int) string) (subscribed int, err error) {
	sendErr := make(chan error, 1)
	go func() {
		for i := range n {
			if err := s.s.Send(fanoutOpen(id(i), pattern(i))); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	for answered := 0; answered < n; answered++ {
		r, err := s.s.Recv()
		if err != nil {
			e.r.refused(err)
			return subscribed, fmt.Errorf("stream ended after %d answers: %v", answered, truncate(err.Error(), 200))
		}
		switch {
		case r.GetSubscribed() != nil:
			subscribed++
		case r.GetRefused() != nil:
			e.r.refusedCode(codes.Code(r.GetRefused().GetCode()), r.GetRefused().GetError())
		default:
			answered--
		}
	}
	return subscribed, <-sendErr
}

func manySubscriptions(e *env) error {
	n := e.o.n(200_000, 2000)
	s, err := openStream(e.ctx, e.client())
	if err != nil {
		return err
	}
	defer s.cancel()
	start := time.Now()
	ok, err := openMany(e, s, n, func(i int) string { return fmt.Sprintf("s%d", i) }, func(i int) string { return fmt.Sprintf("subs.%d", i) })
	e.r.figure("%d of %d subscriptions accepted on one stream in %.1fs; server RSS then %s", ok, n, time.Since(start).Seconds(), mib(e.srv.rss()))
	if err != nil {
		return err
	}
	if ok == n {
		return fmt.Errorf("all %d subscriptions accepted on one stream: no limit", n)
	}
	if e.r.count(codes.ResourceExhausted) == 0 {
		return fmt.Errorf("the refusals were not RESOURCE_EXHAUSTED")
	}
	return nil
}

func manyPatterns(e *env) error {
	n := e.o.n(1_500_000, 10_000)
	patterns := make([]string, n)
	for i := range patterns {
		patterns[i] = fmt.Sprintf("p.%d", i)
	}
	size := proto.Size(fanoutOpen("patterns-0-0", patterns...))
	c := e.client()
	start := time.Now()
	var fails []error
	rounds := 0
	for rounds == 0 || time.Since(start) < e.o.minAttack && len(fails) == 0 && e.srv.alive() {
		rounds++
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := openStream(e.ctx, c)
				if err != nil {
					errs[i] = err
					return
				}
				defer s.cancel()
				// Each its own id: the server may not have detached the last round's yet.
				errs[i] = s.open(fanoutOpen(fmt.Sprintf("patterns-%d-%d", rounds, i), patterns...))
				if errs[i] == nil {
					errs[i] = fmt.Errorf("%d patterns in one subscription accepted", n)
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			e.r.refused(err)
			if c := status.Code(err); c != codes.ResourceExhausted && c != codes.InvalidArgument {
				fails = append(fails, fmt.Errorf("%v, want RESOURCE_EXHAUSTED or INVALID_ARGUMENT", err))
			}
		}
	}
	e.r.figure("%d rounds of 2 subscriptions of %d patterns (a %d-byte frame) in %.1fs", rounds, n, size, time.Since(start).Seconds())
	return errors.Join(fails...)
}

func manyStreams(e *env) error {
	n := e.o.n(20_000, 500)
	h, err := dialH2(e.addr)
	if err != nil {
		return err
	}
	defer h.close()
	var (
		mu                sync.Mutex
		accepted, refused int
		answered          = map[uint32]bool{}
		maxStreams        uint32
		done              = make(chan struct{})
		closeOnce         sync.Once
		goaway            string
	)
	finish := func() { closeOnce.Do(func() { close(done) }) }
	go func() {
		err := h.readLoop(func(f http2.Frame) {
			mu.Lock()
			defer mu.Unlock()
			id := f.Header().StreamID
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
					maxStreams = v
				}
			case *http2.DataFrame:
				if !answered[id] {
					answered[id] = true
					accepted++
				}
			case *http2.RSTStreamFrame:
				if !answered[id] {
					answered[id] = true
					refused++
					e.r.refusedCode(codes.Unavailable, "RST_STREAM "+f.ErrCode.String())
				}
			case *http2.MetaHeadersFrame:
				if gs := headerField(f, "grpc-status"); gs != "" && !answered[id] { // a trailers-only answer
					answered[id] = true
					refused++
					e.r.refusedCode(codes.Code(atoiOr(gs)), headerField(f, "grpc-message"))
				}
			case *http2.GoAwayFrame:
				goaway = fmt.Sprintf("GOAWAY %v %q", f.ErrCode, f.DebugData())
			}
			if accepted+refused >= n {
				finish()
			}
		})
		mu.Lock()
		if goaway == "" && !errors.Is(err, io.EOF) {
			goaway = fmt.Sprint(err)
		}
		mu.Unlock()
		finish()
	}()
	start := time.Now()
	for i := range n {
		msg := mustMarshal(fanoutOpen(fmt.Sprintf("st%d", i), fmt.Sprintf("streams.%d", i)))
		if err := h.call(uint32(2*i+1), methodSubscribe, msg); err != nil {
			break
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	e.r.figure("%d streams opened on one connection in %.1fs: %d served, %d refused, %d unanswered; server's MAX_CONCURRENT_STREAMS %d; server RSS %s %s",
		n, time.Since(start).Seconds(), accepted, refused, n-accepted-refused, maxStreams, mib(e.srv.rss()), goaway)
	if accepted >= n {
		return fmt.Errorf("all %d streams served on one connection: no limit", n)
	}
	if refused == 0 && goaway == "" {
		return fmt.Errorf("streams past the limit were neither refused nor the connection ended")
	}
	return nil
}

func atoiOr(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return int(codes.Unknown)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func headerField(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// hold is how long the idle connections are held: past the handshake deadline (10s).
const hold = 15 * time.Second

func manyConns(e *env) error {
	n := e.o.n(10_000, 200)
	var (
		wg                       sync.WaitGroup
		closedFast, closedByHold atomic.Int64
		dialErrs                 atomic.Int64
	)
	start := time.Now()
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			dialErrs.Add(1)
			continue
		}
		conns = append(conns, c)
		if i%2 == 1 {
			_, _ = c.Write([]byte(http2.ClientPreface)) // and nothing more
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			opened := time.Now()
			_, _ = io.Copy(io.Discard, c) // until the server closes it (or we do)
			if time.Since(start) < hold {
				if time.Since(opened) < 2*time.Second {
					closedFast.Add(1)
				} else {
					closedByHold.Add(1)
				}
			}
		}()
	}
	dialed := time.Since(start)
	rssHeld := e.srv.rss()
	time.Sleep(time.Until(start.Add(hold)))
	open := len(conns) - int(closedFast.Load()+closedByHold.Load())
	rssEnd := e.srv.rss()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	e.r.figure("%d connections (half idle, half preface-only) dialed in %.1fs, %d failed to dial; server RSS %s after dialing, %s at %v",
		n, dialed.Seconds(), dialErrs.Load(), mib(rssHeld), mib(rssEnd), hold)
	e.r.figure("closed by the server within 2s of opening: %d; later, before %v: %d; still open at %v: %d",
		closedFast.Load(), hold, closedByHold.Load(), hold, open)
	if open > 0 {
		return fmt.Errorf("%d of %d connections that never completed the handshake still open after %v", open, len(conns), hold)
	}
	return nil
}

func detachMany(e *env) error {
	n := e.o.n(100_000, 2000)
	c := e.client()
	var streams []*sub
	start := time.Now()
	for half := range 2 {
		s, err := openStream(e.ctx, c)
		if err != nil {
			return err
		}
		defer s.cancel()
		streams = append(streams, s)
		ok, err := openMany(e, s, n/2, func(i int) string { return fmt.Sprintf("d%d-%d", half, i) }, func(int) string { return "d.x" })
		if err != nil {
			return err
		}
		if ok != n/2 {
			return fmt.Errorf("%d of %d subscriptions accepted", ok, n/2)
		}
	}
	e.r.figure("%d subscriptions on \"d.x\" opened on 2 streams in %.1fs, server RSS %s", n, time.Since(start).Seconds(), mib(e.srv.rss()))
	var fails []error
	// Stats as an ordinary gRPC client reads it (4 MiB answers at most).
	def, err := dialDefault(e.addr)
	if err != nil {
		return err
	}
	defer def.Close()
	st, err := pb.NewBrokerClient(def).Stats(e.ctx, &pb.StatsRequest{})
	if err != nil {
		e.r.refused(err)
		if n, limit, ok := tooLarge(err); ok {
			e.r.figure("Stats: %d bytes, over the %d a default gRPC client reads", n, limit)
		}
		fails = append(fails, fmt.Errorf("the Stats call of a default gRPC client: %v", truncate(err.Error(), 160)))
	} else {
		e.r.figure("Stats: %d bytes, %d subscriptions listed", proto.Size(st), len(st.GetSubscriptions()))
	}
	// Detach them all: the time until Stats no longer lists them, and the server's CPU.
	cpu0, t0 := cpuTime(e.srv.pid), time.Now()
	for _, s := range streams {
		s.cancel()
	}
	big := c
	for {
		st, err := big.Stats(e.ctx, &pb.StatsRequest{})
		if err == nil && len(st.GetSubscriptions()) <= 1 { // the canary's
			break
		}
		if e.ctx.Err() != nil {
			return errors.Join(append(fails, fmt.Errorf("subscriptions still listed after %.1fs", time.Since(t0).Seconds()))...)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wall, cpu := time.Since(t0), cpuTime(e.srv.pid)-cpu0
	e.r.figure("detached %d subscriptions on one pattern in %.2fs (server CPU %.2fs)", n, wall.Seconds(), cpu.Seconds())
	if wall > 5*time.Second {
		fails = append(fails, fmt.Errorf("detaching %d subscriptions took %.1fs (server CPU %.1fs): not linear", n, wall.Seconds(), cpu.Seconds()))
	}
	return errors.Join(fails...)
}
