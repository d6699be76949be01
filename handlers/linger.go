package handlers

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// A request refused before it was read to its end (headers too large, a
// body over the limit) leaves the rest of it unread on the connection.
// Closing a socket with unread input makes the kernel send a reset, which
// can reach the client before it has read the refusal: it sees "connection
// reset by peer" instead of the 431 or 413 the server wrote. So such a
// connection is closed the way net/http closes one (a lingering close):
// first the server's side only, so the answer and a FIN go out, then the
// client's leftover input is read and dropped — for lingerFor at most and
// lingerMax bytes at most — and only then the socket is closed.
const (
	lingerFor = 500 * time.Millisecond
	lingerMax = 1 << 20
)

// lingerListener hands out connections that can be marked to linger.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lingerConn{Conn: c}, nil
}

// lingerConn is a connection whose Close lingers when marked.
type lingerConn struct {
	net.Conn
	linger atomic.Bool
}

func (c *lingerConn) Close() error {
	if c.linger.Load() {
		if tc, ok := c.Conn.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
			_ = c.Conn.SetReadDeadline(time.Now().Add(lingerFor))
			_, _ = io.CopyN(io.Discard, c.Conn, lingerMax)
		}
	}
	return c.Conn.Close()
}

// lingerOnClose marks conn (if it is one of ours) to linger when closed.
func lingerOnClose(conn net.Conn) {
	if c, ok := conn.(*lingerConn); ok {
		c.linger.Store(true)
	}
}
