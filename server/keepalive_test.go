package server_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
	"github.com/tinybroker/tinybroker/server"
)

// freezer is a TCP proxy that can stop forwarding without closing anything: to the broker, a
// client behind it that freezes looks like a host that vanished from the network.
type freezer struct {
	lis    net.Listener
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezer(t *testing.T, target string) *freezer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{lis: lis}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			f.wg.Add(2)
			go f.pipe(c, s)
			go f.pipe(s, c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		f.mu.Lock()
		frozen := f.frozen
		f.mu.Unlock()
		if frozen {
			_, _ = io.Copy(io.Discard, src) // swallow everything from now on
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// A member whose host stops answering (no FIN, no RST) is detected by the server's keepalive
// pings; it leaves its group and its unacked message goes to the other member.
func TestKeepaliveFailureRedelivers(t *testing.T) {
	tb := startWith(t, brokertest.Options{}, server.Options{KeepaliveTime: time.Second, KeepaliveTimeout: time.Second})
	proxy := newFreezer(t, tb.addr)
	open := balanced("ka", "ka", 1, "ka")
	far, err := openOn(t, pb.NewBrokerClient(servertest.Dial(t, proxy.lis.Addr().String())), open)
	if err != nil {
		t.Fatal(err)
	}
	tb.publish(t, "ka", "job")
	m := far.next()
	near := tb.open(t, open)
	proxy.freeze()
	select {
	case got := <-near.msgs:
		if got.GetSystemId() != m.GetSystemId() || got.GetAttempt() != 2 {
			t.Fatalf("got %v, want %s attempt 2", got, m.GetSystemId())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the frozen member's message was not redelivered: keepalive did not detect it")
	}
}
