package adaptor

import (
	"context"
	"encoding/binary"
	"net"
	"sync"

	"github.com/containerd/ttrpc"
)

// drain lets Stop wait until every call the server took has its answer on
// the wire before ttrpc's Shutdown runs. ttrpc v1.2.10 (server.go,
// serverConn.run) re-evaluates a connection's idle state only when the
// connection's loop wakes for a response or an error. A call that arrives
// while the connection is idle leaves it marked idle, and Shutdown's
// closeIdleConns closes it under the call, dropping the answer ("ttrpc:
// closed" at the shim) even after the call itself has finished.
type drain struct {
	mu       sync.Mutex
	running  int // unary calls in their handler
	answered int // unary calls whose handler returned
	written  int // response frames fully written to a connection
	changed  chan struct{}
}

func newDrain() *drain { return &drain{changed: make(chan struct{})} }

func (d *drain) update(f func()) {
	d.mu.Lock()
	f()
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

// intercept counts a unary call in and out of its handler.
func (d *drain) intercept(ctx context.Context, u ttrpc.Unmarshaler, _ *ttrpc.UnaryServerInfo, m ttrpc.Method) (interface{}, error) {
	d.update(func() { d.running++ })
	defer d.update(func() { d.running--; d.answered++ })
	return m(ctx, u)
}

// settled waits until no call is in its handler and every answered call's
// response has been written (an error answer ttrpc writes for a call that
// never reached a handler only adds to written).
func (d *drain) settled(ctx context.Context) error {
	for {
		d.mu.Lock()
		done := d.running == 0 && d.written >= d.answered
		ch := d.changed
		d.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// listener hands out connections that count the response frames written.
func (d *drain) listener(l net.Listener) net.Listener { return drainListener{Listener: l, d: d} }

type drainListener struct {
	net.Listener
	d *drain
}

func (l drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &drainConn{Conn: c, d: l.d}, nil
}

// ttrpc's frame (channel.go at v1.2.10): a 10-byte header (payload length,
// stream id, message type, flags), then the payload; type 2 is a response.
const (
	frameHeaderLen      = 10
	frameTypeResponse   = 0x2
	frameTypeByteOffset = 8
)

// drainConn follows the frames in what the server writes. Only the
// connection's own loop writes to it, so it needs no lock of its own.
type drainConn struct {
	net.Conn
	d      *drain
	hdr    [frameHeaderLen]byte
	have   int    // header bytes seen of the current frame
	remain uint32 // payload bytes still to come
}

func (c *drainConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.scan(p[:n])
	return n, err
}

func (c *drainConn) scan(p []byte) {
	for len(p) > 0 {
		if c.have < frameHeaderLen {
			k := copy(c.hdr[c.have:], p)
			c.have += k
			p = p[k:]
			if c.have < frameHeaderLen {
				return
			}
			c.remain = binary.BigEndian.Uint32(c.hdr[:4])
		}
		k := min(int(c.remain), len(p))
		c.remain -= uint32(k)
		p = p[k:]
		if c.remain == 0 {
			if c.hdr[frameTypeByteOffset] == frameTypeResponse {
				c.d.update(func() { c.d.written++ })
			}
			c.have = 0
		}
	}
}
