package waitfor

import (
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
)

// StalledStream opens the event stream at path of the server at base (its
// URL) with token, on a connection with a small receive buffer that is
// never read, like a dashboard tab the OS froze or a proxy that stalls: the
// server's writes to it block once the buffers fill. The connection closes
// when t ends.
func StalledStream(t testing.TB, base, token, path string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", path, u.Host, token)
	return conn
}
