package server

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// connLimiter is the server's listener: it keeps at most max connections open and closes
// the others at once, after telling them why in an HTTP/2 GOAWAY (gRPC clients report its
// text in their UNAVAILABLE error). Refusals are counted and logged, at most once a second.
type connLimiter struct {
	net.Listener
	s        *Server
	max      int64
	open     atomic.Int64
	refused  atomic.Uint64
	lastWarn atomic.Int64    // UnixNano of the last warning
	refusing chan struct{}   // bounds the goroutines saying goodbye to refused clients
	wg       *sync.WaitGroup // the server's
}

// maxRefusing is how many refused connections may be saying goodbye at once; past it they
// are closed without a word.
const maxRefusing = 64

func (s *Server) limitConns(lis net.Listener) net.Listener {
	l := &connLimiter{Listener: lis, s: s, max: int64(s.opts.MaxConnections), refusing: make(chan struct{}, maxRefusing), wg: &s.wg}
	s.conns.Store(l)
	return l
}

// Accept returns the next connection under the limit.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			setUserTimeout(c, l.s.opts.KeepaliveTimeout)
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refuse(c)
	}
}

func (l *connLimiter) refuse(c net.Conn) {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	if last := l.lastWarn.Load(); now-last >= int64(time.Second) && l.lastWarn.CompareAndSwap(last, now) {
		l.s.log.Warn("connection refused: too many connections (limits { max_connections })",
			"remote", c.RemoteAddr().String(), "limit", l.max, "refused_total", n)
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	l.wg.Go(func() {
		defer func() { <-l.refusing }()
		goodbye(c, l.max)
	})
}

// goodbye answers a refused client's first call with a gRPC status saying why, then closes
// the connection: it sends the server's HTTP/2 preface, waits (at most a second) for the
// client's first request, answers it RESOURCE_EXHAUSTED in a trailers-only response, and
// sends a GOAWAY. gRPC clients report a GOAWAY's text only in some races, and a connection
// closed at once, with the client's preface unread, is reset before the client can read
// anything.
func goodbye(c net.Conn, limit int64) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	msg := "tinybroker: too many connections: the broker serves at most " + strconv.FormatInt(limit, 10) +
		" at once (limits { max_connections }); retry later, share connections, or raise the limit"
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	var last uint32
	for range 16 { // the client's settings and window updates come before its first request
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
			continue
		case *http2.HeadersFrame:
			last = f.StreamID
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, h := range [][2]string{{":status", "200"}, {"content-type", "application/grpc"},
				{"grpc-status", strconv.Itoa(int(codes.ResourceExhausted))}, {"grpc-message", msg}} {
				_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
			}
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: last, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}) != nil {
				return
			}
		default:
			continue
		}
		break
	}
	if fr.WriteGoAway(last, http2.ErrCodeNo, []byte(msg)) != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, c) // until the client closes its side, or the deadline
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// Connections reports the client connections open now and those refused since Serve.
func (s *Server) Connections() (open int, refused uint64) {
	l := s.conns.Load()
	if l == nil {
		return 0, 0
	}
	return int(l.open.Load()), l.refused.Load()
}
