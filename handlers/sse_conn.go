package handlers

import (
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// An event stream owns its connection. Its handler hijacks the connection
// (fasthttp's RequestCtx.Hijack, with no response of fasthttp's own) and
// the stream writes the response itself, straight to the connection, on
// the one goroutine fasthttp starts for the hijacked connection. Through
// fasthttp's SetBodyStreamWriter every event took one more goroutine hop
// and one more copy (the writer's goroutine, an in-memory pipe, the
// connection's goroutine copying it out) per subscriber: with a thousand
// subscribers that hop was most of what a publish cost over a minimal
// net/http writer.
//
// The response is the one fasthttp would have written: its status line and
// every header the handler and the middleware set (security headers,
// cookies, the date), serialised by fasthttp's own ResponseHeader, with
// the body chunked. Chunked framing, not a body delimited by the close:
// it is what fasthttp sent before (so every client of ours already reads
// it: browsers' EventSource, r3labs/sse, curl, net/http), and it lets a
// client tell a stream that ended (the last, empty chunk) from a
// connection that broke. The response says "Connection: close" because a
// hijacked connection is closed when its stream ends; it is not handed
// back for another request.
//
// fasthttp neither tracks nor closes a hijacked connection: its Shutdown
// does not wait for it. The server's stream registry does (see
// streamRegistry.close): at shutdown every stream is told to end (s.ctx)
// and its writes are cut after streamCutGrace, so a write it is blocked in
// on a client that does not read fails, and Shutdown waits until every
// stream's goroutine has let its connection go.

const (
	// chunkHeadMax is the room kept before a chunk's data for its size
	// line: 16 hex digits and CRLF.
	chunkHeadMax = 16 + 2
	// chunkMax is the data a chunk holds before it is sent even unflushed
	// (a page of replay is sent in chunks of about this).
	chunkMax = 32 << 10
	// chunkKeep is the most buffer a stream keeps between sends: most of
	// its life a stream is idle, and a live event is small. A buffer that
	// a page of replay grew is let go once it is sent.
	chunkKeep = 4 << 10
)

// chunkedWriter writes an HTTP/1.1 chunked body straight to a connection:
// what is written is buffered, and each Flush sends it as one chunk, in
// one write. The first write is preceded by the response head. Once a
// write fails every later write and flush fails with the same error.
type chunkedWriter struct {
	conn net.Conn
	head []byte // the response's status line and headers, until sent
	// buf is chunkHeadMax bytes kept for the chunk's size line, then the
	// chunk's data; nil between sends of an idle stream.
	buf []byte
	// keep holds on to a grown buffer between sends (a replay); release
	// lets it go.
	keep bool
	err  error
}

func (w *chunkedWriter) grow() {
	if w.buf == nil {
		w.buf = make([]byte, chunkHeadMax, 1<<10)
	}
}

// WriteString buffers s.
func (w *chunkedWriter) WriteString(s string) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.grow()
	w.buf = append(w.buf, s...)
	return len(s), w.spill()
}

// appendEvent buffers one SSE message (appendSSE) for e with the given id.
func (w *chunkedWriter) appendEvent(id int64, e *spec.Event) error {
	if w.err != nil {
		return w.err
	}
	w.grow()
	w.buf = appendSSE(w.buf, id, e)
	return w.spill()
}

// spill sends a chunk that has grown to chunkMax.
func (w *chunkedWriter) spill() error {
	if len(w.buf)-chunkHeadMax < chunkMax {
		return nil
	}
	return w.Flush()
}

// Flush sends what is buffered as one chunk.
func (w *chunkedWriter) Flush() error {
	return w.send(false)
}

// end sends what is buffered and the last, empty chunk: the body's end.
func (w *chunkedWriter) end() error {
	return w.send(true)
}

func (w *chunkedWriter) send(last bool) error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) <= chunkHeadMax && !last && w.head == nil {
		return nil
	}
	w.grow()
	start := chunkHeadMax
	if n := len(w.buf) - chunkHeadMax; n > 0 {
		var size [chunkHeadMax]byte
		line := append(strconv.AppendUint(size[:0], uint64(n), 16), '\r', '\n')
		start -= len(line)
		copy(w.buf[start:], line)
		w.buf = append(w.buf, '\r', '\n')
	}
	if last {
		w.buf = append(w.buf, "0\r\n\r\n"...)
	}
	out := w.buf[start:]
	if w.head != nil {
		out = append(w.head, out...)
		w.head = nil
	}
	if len(out) > 0 {
		_, w.err = w.conn.Write(out)
	}
	if cap(w.buf) > chunkKeep && !w.keep {
		w.buf = nil
	} else {
		w.buf = w.buf[:chunkHeadMax]
	}
	return w.err
}

// release ends keep: a buffer grown past chunkKeep is let go once what it
// holds is sent (now, when it holds nothing).
func (w *chunkedWriter) release() {
	w.keep = false
	if cap(w.buf) > chunkKeep && len(w.buf) <= chunkHeadMax {
		w.buf = nil
	}
}

// hijackStream makes st's handler hand the connection over to st: once the
// handler and the middleware have returned, the stream writes the response
// they set up and then its events, on fasthttp's goroutine for the
// hijacked connection, which ends with the stream. It reports false (and
// hijacks nothing) when the server is shutting down.
func (s *Server) hijackStream(c *fiber.Ctx, st *streamer) bool {
	fctx := c.Context()
	st.conn = fctx.Conn()
	if !s.streams.add(st) {
		return false
	}
	c.Set(fiber.HeaderConnection, "close")
	fctx.HijackSetNoResponse(true)
	fctx.Hijack(func(net.Conn) {
		// Everything fasthttp and the middleware set on the response is
		// in place by now, and fctx lives until this returns.
		s.serveStream(st, &fctx.Response.Header)
	})
	return true
}

// serveStream writes st's response head and then its stream, and lets the
// registry know when it is over. fasthttp closes the connection when it
// returns.
func (s *Server) serveStream(st *streamer, h *fasthttp.ResponseHeader) {
	defer s.streams.remove(st)
	defer func() {
		// A panic on a hijacked connection's goroutine would end the
		// process: fasthttp does not recover it.
		if r := recover(); r != nil {
			s.log.Error("event stream panicked", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	h.SetContentLength(-1) // Transfer-Encoding: chunked
	st.w = &chunkedWriter{conn: st.conn, head: append([]byte(nil), h.Header()...)}
	st.run()
	// The body's end, unless the connection failed (then this fails too).
	st.arm()
	st.w.end()
}

// streamCutGrace is how long a stream cut at shutdown may still write:
// enough for a write the connection takes at once (the last chunk of a
// stream that ended when the server told it to), far too little to wait
// for a client that does not read.
const streamCutGrace = 100 * time.Millisecond

// streamCut ends a stream's writes at shutdown: its connection's write
// deadline is brought forward to the cut, and arm keeps it there.
type streamCut struct {
	mu  sync.Mutex
	cut bool
	at  time.Time // once cut, no write outlasts this
}

// setDeadline sets conn's write deadline to t, or to the cut if that is
// sooner.
func (sc *streamCut) setDeadline(conn net.Conn, t time.Time) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cut && t.After(sc.at) {
		t = sc.at
	}
	conn.SetWriteDeadline(t)
}

// stop cuts the stream at the given time: a write it is blocked in then
// fails, and so does every later one.
func (sc *streamCut) stop(conn net.Conn, at time.Time) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.cut, sc.at = true, at
	conn.SetWriteDeadline(at)
}
