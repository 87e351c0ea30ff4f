package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is a raw HTTP/2 client connection, for clients that do not play by the rules
// gRPC's own client follows (MAX_CONCURRENT_STREAMS, say).
type h2conn struct {
	c    net.Conn
	fr   *http2.Framer
	addr string

	wmu  sync.Mutex // guards writes: fr's writer, enc and hbuf
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

// dialH2 connects, sends the client preface and settings that let the server send freely
// (a 1 MiB window per stream, 1 GiB for the connection).
func dialH2(addr string) (*h2conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := &h2conn{c: c, fr: http2.NewFramer(c, c), addr: addr}
	h.enc = hpack.NewEncoder(&h.hbuf)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		c.Close()
		return nil, err
	}
	return h, nil
}

// call opens stream id as a gRPC call of method and sends msg as its first message.
func (h *h2conn) call(id uint32, method string, msg []byte) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", h.addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	data := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(data[1:], uint32(len(msg)))
	copy(data[5:], msg)
	return h.fr.WriteData(id, false, data)
}

// readLoop reads frames until the connection ends, answering settings and pings, and
// calls on for every other frame.
func (h *h2conn) readLoop(on func(http2.Frame)) error {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.wmu.Lock()
				err = h.fr.WriteSettingsAck()
				h.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.wmu.Lock()
				err = h.fr.WritePing(true, f.Data)
				h.wmu.Unlock()
			}
		}
		if err != nil {
			return err
		}
		on(f)
	}
}

func (h *h2conn) close() { h.c.Close() }
