package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Findings 1-3: memory bounded in bytes, isolation of a full group, amplification.

// publishUntilRefused publishes req to conn until it is refused, then `more` times again;
// it returns how many were accepted before the first refusal and records every refusal.
func publishUntilRefused(e *env, conn *grpc.ClientConn, req []byte, limit, more int) (accepted int, err error) {
	refusals := 0
	for i := 0; i < limit && refusals <= more; i++ {
		ctx, cancel := withTimeout(e.ctx, 30*time.Second)
		err := rawPublish(ctx, conn, req)
		cancel()
		switch {
		case err == nil && refusals == 0:
			accepted++
		case err == nil:
			return accepted, fmt.Errorf("a publish was accepted after a refusal")
		case status.Code(err) == codes.ResourceExhausted:
			e.r.refused(err)
			refusals++
		default:
			e.r.refused(err)
			return accepted, fmt.Errorf("publish: %v", err)
		}
	}
	if refusals == 0 {
		return accepted, fmt.Errorf("%d publishes accepted, none refused", accepted)
	}
	return accepted, nil
}

// fillGroups publishes req-per-group to memberless groups from 4 publishers until each
// group refuses; it checks that what was accepted fits the groups' share of the budget.
func fillGroups(e *env, publishers int, groups []string, req func(g string) []byte, msgCost int64, more int) error {
	var (
		wg       sync.WaitGroup
		total    atomic.Int64
		mu       sync.Mutex
		errs     []error
		perGroup = make([]int, len(groups))
	)
	conns := make([]*grpc.ClientConn, publishers)
	for i := range conns {
		conns[i] = e.conn()
	}
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(groups); i += len(conns) {
				n, err := publishUntilRefused(e, conns[w], req(groups[i]), 100_000, more)
				total.Add(int64(n))
				mu.Lock()
				perGroup[i] = n
				if err != nil {
					errs = append(errs, fmt.Errorf("group %s: %w", groups[i], err))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	held := total.Load() * msgCost
	e.r.figure("accepted %d messages (per group %v), about %s as charged; then refused: groups' share is %s (3/4 of the budget), per group %s",
		total.Load(), perGroup, mib(held), mib(e.o.budget*3/4), mib(e.o.budget/8))
	if held > e.o.budget*3/4+msgCost*int64(len(groups)) {
		errs = append(errs, fmt.Errorf("groups hold about %s, over their share %s", mib(held), mib(e.o.budget*3/4)))
	}
	e.r.mu.Lock()
	m := e.r.samples[codes.ResourceExhausted]
	e.r.mu.Unlock()
	if !strings.Contains(m, `consumer group "`) || !(strings.Contains(m, "max_queued_bytes") || strings.Contains(m, "memory { max_bytes }")) {
		errs = append(errs, fmt.Errorf("the refusal does not name the group and its limit: %q", m))
	}
	return errors.Join(errs...)
}

func groupNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return names
}

func memberlessLarge(e *env) error {
	groups := groupNames("bulk", 8)
	if err := abandonGroups(e.ctx, e.client(), groups, func(n string) []string { return []string{n + ".>"} }); err != nil {
		return err
	}
	payload := make([]byte, 1<<20)
	return fillGroups(e, 4, groups, func(g string) []byte {
		return mustMarshal(&pb.PublishRequest{Topic: g + ".x", Payload: payload})
	}, 1<<20+512, e.o.n(50, 5))
}

func headersGroup(e *env) error {
	groups := groupNames("hdr", 8)
	if err := abandonGroups(e.ctx, e.client(), groups, func(n string) []string { return []string{n + ".>"} }); err != nil {
		return err
	}
	tiny := mustMarshal(&pb.PublishRequest{Topic: groups[0] + ".x", Headers: tinyHeaders(maxHeaderBytes)})
	if err := rawPublish(e.ctx, e.conn(), tiny); status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("a message of %d tiny headers: %v, want INVALID_ARGUMENT (max_headers)", maxHeaderBytes/3, err)
	}
	e.r.refused(rawPublish(e.ctx, e.conn(), tiny))
	h := headerHeavy(maxHeaderBytes)
	cost := int64(maxHeaderBytes + 112*len(h) + 512)
	e.r.figure("one message: %d headers, %d bytes as max_header_bytes counts them, %s as the budget charges them", len(h), maxHeaderBytes, mib(cost))
	reqs := map[string][]byte{}
	for _, g := range groups {
		reqs[g] = mustMarshal(&pb.PublishRequest{Topic: g + ".x", Headers: h})
	}
	return fillGroups(e, 1, groups, func(g string) []byte { return reqs[g] }, cost, e.o.n(20, 3))
}

func headersFanout(e *env) error {
	const subs = 8
	h := headerHeavy(maxHeaderBytes)
	per := e.o.n(450, 45) // 450 × ~180 KB charged: past the 64 MiB buffer
	type slow struct {
		s    *sub
		conn *grpc.ClientConn
	}
	var slows []slow
	for i := range subs {
		conn := e.conn()
		s, err := subscribe(e.ctx, pb.NewBrokerClient(conn), fanoutOpen(fmt.Sprintf("slow%d", i), fmt.Sprintf("slow%d.>", i)))
		if err != nil {
			return err
		}
		slows = append(slows, slow{s, conn}) // never read from again until the end
	}
	var wg sync.WaitGroup
	var published atomic.Int64
	var perr atomic.Value
	start := time.Now()
	for i := range subs {
		conn := e.conn()
		req := mustMarshal(&pb.PublishRequest{Topic: fmt.Sprintf("slow%d.x", i), Headers: h})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				ctx, cancel := withTimeout(e.ctx, 30*time.Second)
				err := rawPublish(ctx, conn, req)
				cancel()
				if err != nil {
					e.r.refused(err)
					perr.CompareAndSwap(nil, err)
					continue
				}
				published.Add(1)
			}
		}()
	}
	wg.Wait()
	e.r.figure("%d of %d publishes accepted in %.1fs (publishers paced by fanout.publisher_wait)", published.Load(), subs*per, time.Since(start).Seconds())
	// Each slow subscriber must have been cut off: draining its stream ends in an error.
	cut, how := 0, map[string]int{}
	for _, s := range slows {
		ctx, cancel := withTimeout(e.ctx, 10*time.Second)
		done := make(chan error, 1)
		go func() {
			for {
				if _, err := s.s.s.Recv(); err != nil {
					done <- err
					return
				}
			}
		}()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		cancel()
		s.s.cancel()
		if st, ok := status.FromError(err); ok && st.Code() == codes.ResourceExhausted {
			cut++
			e.r.refused(err)
			how[firstWords(st.Message(), 6)]++
		}
	}
	e.r.figure("%d of %d slow subscribers cut off with RESOURCE_EXHAUSTED: %v", cut, subs, how)
	if cut != subs {
		return fmt.Errorf("%d of %d slow subscribers were cut off", cut, subs)
	}
	return nil
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

func thousandGroups(e *env) error {
	n := e.o.n(1000, 10)
	groups := make([]string, n)
	for i := range groups {
		groups[i] = fmt.Sprintf("many%04d", i)
	}
	if err := abandonGroups(e.ctx, e.client(), groups, func(string) []string { return []string{"many.t"} }); err != nil {
		return err
	}
	accepted, err := publishFrames(e, e.client(), "many.t", 16, e.o.n(31_000, 1000), 1000, nil)
	if err != nil {
		return err
	}
	perMsg := int64(300 + 128*n)
	e.r.figure("%d groups: %d of %d publishes accepted (about %s as charged, %d B each), the rest refused",
		n, accepted, e.o.n(31_000, 1000), mib(int64(accepted)*perMsg), perMsg)
	if int64(accepted)*perMsg > e.o.budget*3/4+perMsg {
		return fmt.Errorf("groups hold about %s, over their share", mib(int64(accepted)*perMsg))
	}
	if e.r.count(codes.ResourceExhausted) == 0 {
		return fmt.Errorf("nothing refused")
	}
	return nil
}

// publishFrames publishes total messages of size bytes to topic (topicOf(i) if not nil) in
// PublishStream frames of batch, records refusals by code and returns how many were
// accepted.
func publishFrames(e *env, c pb.BrokerClient, topic string, size, total, batch int, topicOf func(int) string) (int, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ps, err := c.PublishStream(ctx)
	if err != nil {
		return 0, err
	}
	payload := make([]byte, size)
	accepted := 0
	for seq, i := uint64(1), 0; i < total; seq++ {
		req := &pb.PublishStreamRequest{Sequence: seq}
		for ; i < total && len(req.Messages) < batch; i++ {
			t := topic
			if topicOf != nil {
				t = topicOf(i)
			}
			req.Messages = append(req.Messages, &pb.PublishRequest{Topic: t, Payload: payload})
		}
		if err := ps.Send(req); err != nil {
			return accepted, err
		}
		resp, err := ps.Recv()
		if err != nil {
			return accepted, err
		}
		for _, r := range resp.GetResults() {
			if r.GetCode() == 0 {
				accepted++
			} else {
				e.r.refusedCode(codes.Code(r.GetCode()), r.GetError())
			}
		}
	}
	_ = ps.CloseSend()
	return accepted, nil
}

func abandonedAll(e *env) error {
	c := e.client()
	if err := abandonGroups(e.ctx, c, []string{"abandoned"}, func(string) []string { return []string{">"} }); err != nil {
		return err
	}
	total := e.o.n(100_000, 5_000)
	accepted, err := publishFrames(e, c, "", 8, total, 1000, func(i int) string { return fmt.Sprintf("x.y%d", i%100) })
	if err != nil {
		return err
	}
	e.r.figure("%d of %d 8-byte publishes accepted by the abandoned group, then refused for it alone", accepted, total)
	if e.r.count(codes.ResourceExhausted) == 0 {
		return fmt.Errorf("the abandoned group never filled")
	}
	// A live group beside the full one: every job published to it is accepted and delivered.
	w, err := subscribe(e.ctx, e.client(), balancedOpen("work", 64, "work.*"))
	if err != nil {
		return err
	}
	defer w.cancel()
	jobs := e.o.n(1000, 100)
	got := make(chan error, 1)
	go func() {
		n := 0
		for n < jobs {
			r, err := w.s.Recv()
			if err != nil {
				got <- err
				return
			}
			var ids []string
			for _, m := range r.GetMessages().GetMessages() {
				ids = append(ids, m.GetSystemId())
				n++
			}
			if len(ids) > 0 {
				_ = w.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids}}})
			}
		}
		got <- nil
	}()
	pub := e.client()
	refused := 0
	for i := range jobs {
		_, err := pub.Publish(e.ctx, &pb.PublishRequest{Topic: "work.a", Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			refused++
			e.r.refused(err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("worker: %v", err)
		}
	case <-time.After(20 * time.Second):
		return fmt.Errorf("the live group's worker did not get its %d jobs in 20s", jobs)
	}
	e.r.figure("live group beside it: %d jobs published, %d refused, all %d delivered and acked", jobs, refused, jobs-refused)
	if refused > 0 {
		return fmt.Errorf("%d publishes to a live group refused because of the full one", refused)
	}
	return nil
}

// streamFrame is a PublishStream frame of size bytes: sequence 1 and empty messages.
func streamFrame(size int) []byte {
	b := make([]byte, size)
	b[0], b[1] = 0x08, 0x01 // sequence = 1
	for i := 2; i+1 < size; i += 2 {
		b[i], b[i+1] = 0x12, 0x00 // messages: an empty PublishRequest
	}
	if size%2 == 1 {
		b = b[:size-1]
	}
	return b
}

func hugeStreamFrames(e *env) error {
	size := e.o.n(16<<20-64, 1<<20)
	frame := streamFrame(size)
	msgs := (len(frame) - 2) / 2
	conns := make([]*grpc.ClientConn, 4)
	for i := range conns {
		conns[i] = e.conn()
	}
	var fails []error
	start := time.Now()
	rounds := 0
	for rounds == 0 || time.Since(start) < e.o.minAttack && len(fails) == 0 && e.srv.alive() {
		rounds++
		var wg sync.WaitGroup
		errs := make([]error, len(conns))
		for i, conn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = sendStreamFrame(e, conn, frame)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			n, limit, ok := tooLarge(err)
			switch {
			case ok && n == int64(len(frame)):
				e.r.refused(err)
				if rounds == 1 {
					e.r.figure("stream %d: refused before decoding, the frame is over the receive limit of %d bytes", i, limit)
				}
			case ok:
				fails = append(fails, fmt.Errorf("stream %d: the answer is %d bytes (%.0f× the frame)", i, n, float64(n)/float64(len(frame))))
			case status.Code(err) == codes.ResourceExhausted:
				e.r.refused(err)
			default:
				e.r.refused(err)
				fails = append(fails, fmt.Errorf("stream %d: %v", i, truncate(fmt.Sprint(err), 200)))
			}
		}
	}
	e.r.figure("%d rounds of 4 concurrent frames of %d bytes (%d empty messages each) in %.1fs", rounds, len(frame), msgs, time.Since(start).Seconds())
	return errors.Join(fails...)
}

// sendStreamFrame sends one encoded frame on a new PublishStream and returns how it ended.
func sendStreamFrame(e *env, conn *grpc.ClientConn, frame []byte) error {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ps, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, methodPublishStream, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	if err := ps.SendMsg(frame); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var resp []byte
	if err := ps.RecvMsg(&resp); err != nil {
		return err
	}
	return fmt.Errorf("answered with %d bytes (%.1f× the frame)", len(resp), float64(len(resp))/float64(len(frame)))
}

func hugeUnary(e *env) error {
	size := e.o.n(15<<20, 2<<20)
	req := mustMarshal(&pb.PublishRequest{Topic: "big.x", Payload: make([]byte, size)})
	conns := make([]*grpc.ClientConn, 8)
	for i := range conns {
		conns[i] = e.conn()
	}
	var fails []error
	var mu sync.Mutex
	start0 := time.Now()
	rounds := 0
	for round := 0; round < 2 || time.Since(start0) < e.o.minAttack && len(fails) == 0 && e.srv.alive(); round++ {
		rounds++
		var wg sync.WaitGroup
		start := time.Now()
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := rawPublish(e.ctx, conns[i%len(conns)], req)
				e.r.refused(err)
				if status.Code(err) != codes.ResourceExhausted {
					mu.Lock()
					fails = append(fails, fmt.Errorf("a %d-byte publish: %v, want RESOURCE_EXHAUSTED before it is read whole", len(req), truncate(fmt.Sprint(err), 160)))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if round < 2 {
			e.r.figure("round %d: 32 publishes of %d bytes answered in %.2fs, server RSS then %s", round+1, len(req), time.Since(start).Seconds(), mib(e.srv.rss()))
		}
	}
	e.r.figure("%d rounds of 32 in %.1fs", rounds, time.Since(start0).Seconds())
	if len(fails) > 0 {
		return fmt.Errorf("%d of %d publishes: %w", len(fails), 32*rounds, fails[0])
	}
	return nil
}
