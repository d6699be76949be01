package waitfor

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pipe makes path a named pipe that a fake program writes a line to
// (`echo ready > path`) when it gets somewhere, and returns the wait for
// that line. The test holds the pipe open for reading and writing, so the
// program's write never blocks and the wait blocks until it is written (up
// to timeout, a hang guard). The wait returns the line without its newline.
func Pipe(t testing.TB, path string, timeout time.Duration) (wait func() string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var buf []byte
	return func() string {
		t.Helper()
		if err := f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 256)
		for {
			if line, rest, ok := strings.Cut(string(buf), "\n"); ok {
				buf = []byte(rest)
				return line
			}
			n, err := f.Read(b)
			if err != nil {
				t.Fatalf("no line on %s: %v", path, err)
			}
			buf = append(buf, b[:n]...)
		}
	}
}
