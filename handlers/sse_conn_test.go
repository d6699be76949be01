package handlers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"homework/engine/spec"
	"homework/engine/waitfor"

	"github.com/valyala/fasthttp"
)

// goroutinesWith returns the stacks of the goroutines whose stack contains
// every one of frames.
func goroutinesWith(frames ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		all := true
		for _, f := range frames {
			all = all && strings.Contains(g, f)
		}
		if all {
			out = append(out, g)
		}
	}
	return out
}

// bigRun returns a waiting run with more events (about 12 MB) than a
// client's and the server's socket buffers hold.
func bigRun(t testing.TB, ts *testServer, u *testUser) string {
	t.Helper()
	id := ts.createRun(t, u, askStep("q"))
	ts.waitStatus(t, u, id, spec.StatusWaiting)
	pad := strings.Repeat("x", 64<<10)
	err := ts.DB.WriteTx(ts.ctx, func(tx spec.Tx) error {
		for i := range 200 {
			if _, err := tx.AppendEvent(ts.ctx, id, "bench", map[string]any{"i": i, "pad": pad}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// closedByServer reads conn until the server closes it: what the kernel
// holds drains, then EOF or a reset.
func closedByServer(t testing.TB, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the stalled stream: %v, want its connection closed by the server", err)
	}
}

// A stream owns its hijacked connection, which fasthttp's Shutdown neither
// waits for nor closes: the server's Shutdown ends every stream, cuts the
// write a stream is blocked in on a client that does not read (the write
// timeout here is an hour), and returns once every stream's goroutine is
// gone.
func TestShutdownCutsAStreamBlockedOnAStalledReaderAndLeavesNoStreamGoroutine(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = time.Hour; o.WriteTimeout = time.Hour })
	alice := ts.user(t, "alice@example.com")
	id := bigRun(t, ts, alice)
	stalled := waitfor.StalledStream(t, ts.URL, alice.Token, "/api/runs/"+id+"/events")
	waitUntil(t, "the stream to block writing to the stalled reader", func() bool {
		return len(goroutinesWith("[IO wait", "(*chunkedWriter).send", "(*Server).serveStream")) == 1
	})
	feed := ts.openSSE(t, alice, "/api/events")
	waitUntil(t, "both streams registered", func() bool { return ts.Server.streams.count() == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a stream blocked on a stalled reader: %v", err)
	}
	if n := ts.Server.streams.count(); n != 0 {
		t.Fatalf("%d streams still registered after shutdown", n)
	}
	// fasthttp closes the connection just after the stream's goroutine
	// leaves our code.
	waitUntil(t, "no stream goroutine", func() bool {
		return len(goroutinesWith("(*Server).serveStream")) == 0 && len(goroutinesWith("fasthttp.hijackConnHandler")) == 0
	})
	// The idle feed ends too (with its last chunk, unless its goroutine ran
	// only after the cut).
	for {
		if _, err := feed.Next(); err != nil {
			break
		}
	}
	closedByServer(t, stalled)
}

// A client that stops reading is let go once a write to it has waited the
// write timeout; the server goes on serving.
func TestAStalledReaderIsCutByTheWriteTimeout(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = time.Hour; o.WriteTimeout = 300 * time.Millisecond })
	alice := ts.user(t, "alice@example.com")
	id := bigRun(t, ts, alice)
	stalled := waitfor.StalledStream(t, ts.URL, alice.Token, "/api/runs/"+id+"/events")
	waitUntil(t, "the stream to start", func() bool { return ts.Server.streams.count() == 1 })
	waitUntil(t, "the stalled stream to be cut", func() bool { return ts.Server.streams.count() == 0 })
	closedByServer(t, stalled)
	// The stream of a client that reads gets the whole run.
	c := ts.openSSE(t, alice, "/api/runs/"+id+"/events")
	if _, err := c.NextEvent(); err != nil {
		t.Fatal(err)
	}
}

// The stream's response is an HTTP/1.1 chunked body: each send is one
// chunk, and the stream ends with the last, empty chunk. The response
// carries the headers the middleware set and says the connection closes.
func TestAStreamIsAChunkedResponseWithTheMiddlewaresHeaders(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = time.Hour })
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("q"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	conn, err := net.Dial("tcp", ts.URL[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/runs/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", id, alice.Token)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
		"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("Content-Security-Policy: %q", resp.Header.Get("Content-Security-Policy"))
	}
	if resp.StatusCode != http.StatusOK || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || !resp.Close {
		t.Fatalf("status %d, transfer encoding %v, close %v; want 200, chunked, close", resp.StatusCode, resp.TransferEncoding, resp.Close)
	}
	// The first chunk is the retry field alone, read by its framing (a
	// chunked reader joins the chunks already received in one read).
	size, err := br.ReadString('\n')
	if err != nil || size != "d\r\n" {
		t.Fatalf("first chunk's size line %q, %v; want 13 bytes", size, err)
	}
	first := make([]byte, 13+2)
	if _, err := io.ReadFull(br, first); err != nil || string(first) != "retry: 3000\n\n\r\n" {
		t.Fatalf("first chunk %q, %v", first, err)
	}
	cr := httputil.NewChunkedReader(br)
	if _, err := ts.Engine.Cancel(ts.ctx, alice.ID, id); err != nil {
		t.Fatal(err)
	}
	// The run's stream ends after its terminal event, with the last chunk
	// (the chunked reader's EOF), and the server closes the connection.
	rest, err := io.ReadAll(cr)
	if err != nil {
		t.Fatalf("reading to the last chunk: %v", err)
	}
	if !bytes.Contains(rest, []byte("event: "+string(spec.EventRunCanceled))) {
		t.Fatalf("the stream ended without the terminal event:\n%s", rest)
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("after the last chunk: %v, want the connection closed", err)
	}
}

// syncBuffer is a log sink safe for the stream's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A panic in a stream is logged with its stack, not lost (fasthttp does not
// recover the goroutine of a hijacked connection: it would end the
// process), and the stream leaves the registry.
func TestAPanickingStreamIsLoggedAndLetGo(t *testing.T) {
	var logs syncBuffer
	s := &Server{opts: Options{WriteTimeout: time.Minute}, log: slog.New(slog.NewTextHandler(&logs, nil)), ctx: context.Background()}
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, client)
	}()
	src := &streamSource{
		finished: true, run: true,
		key: func(e *spec.Event) int64 { return e.Seq },
		replay: func(context.Context, int64, int) ([]*spec.Event, error) {
			panic("replay exploded")
		},
	}
	st := newStreamer(s, src, 0, credential{})
	st.conn = server
	if !s.streams.add(st) {
		t.Fatal("the registry refused a stream")
	}
	var h fasthttp.ResponseHeader
	s.serveStream(st, &h)
	if got := logs.String(); !strings.Contains(got, "event stream panicked") || !strings.Contains(got, "replay exploded") || !strings.Contains(got, "stack=") {
		t.Fatalf("log %q, want the panic and its stack", got)
	}
	if n := s.streams.count(); n != 0 {
		t.Fatalf("%d streams registered after the panic", n)
	}
	server.Close()
	<-done
}

// A replay's readers read a few pages ahead of the stream, no more: the
// first page alone, so a stream with little to replay costs one read; once
// the stream takes it, the next pages replayReaders at a time, each held
// until the stream takes the one before it (so a slow client holds back
// the reads, not the memory); and they end, closing the channel, when the
// replay is cancelled.
func TestAReplaysReadersReadAFewPagesAheadAndEndWithTheReplay(t *testing.T) {
	var reads atomic.Int64
	src := &streamSource{
		run: true,
		key: func(e *spec.Event) int64 { return e.Seq },
		replay: func(ctx context.Context, after int64, limit int) ([]*spec.Event, error) {
			reads.Add(1)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			evs := make([]*spec.Event, limit)
			for i := range evs {
				evs[i] = &spec.Event{Seq: after + int64(i) + 1, Type: "bench", Data: []byte(`{}`)}
			}
			return evs, nil
		},
	}
	st := newStreamer(&Server{}, src, 0, credential{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pages := st.readPages(ctx, 0)

	// settled waits until the readers have read n pages and then a while
	// longer, and reports how many they read.
	settled := func(n int64) int64 {
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		return reads.Load()
	}
	if got := settled(1); got != 1 {
		t.Fatalf("the reader read %d pages before the stream took one, want 1", got)
	}
	// Ahead of the page the stream took: one page with each reader and
	// one handed on, waiting for the stream.
	const ahead = replayReaders + 1
	for page := int64(1); page <= 6; page++ {
		var p replayPage
		select {
		case p = <-pages:
		case <-time.After(10 * time.Second):
			t.Fatalf("page %d did not come", page)
		}
		if p.err != nil || len(p.evs) != sseReplayPage || p.evs[0].Seq != (page-1)*sseReplayPage+1 || p.last != page*sseReplayPage {
			t.Fatalf("page %d: %d events, last %d, err %v; want %d events from seq %d", page, len(p.evs), p.last, p.err, sseReplayPage, (page-1)*sseReplayPage+1)
		}
		if got := settled(page + ahead); got != page+ahead {
			t.Fatalf("the readers read %d pages once the stream took %d, want %d", got, page, page+ahead)
		}
	}
	cancel()
	select {
	case p, ok := <-pages:
		if ok {
			t.Fatalf("a page (%d events, err %v) came after the replay was cancelled", len(p.evs), p.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the readers did not end with the replay")
	}
	if g := goroutinesWith("(*streamer).readAhead"); len(g) != 0 {
		t.Fatalf("%d readers left after the replay ended:\n%s", len(g), strings.Join(g, "\n\n"))
	}
}

// A run's seq has no gaps, which lets a replay read its pages several at
// once from where each must start; a page that does not hold the seqs
// expected of it (a store that broke the promise) is not handed over, and
// the replay reads on in order from the last event it handed over: every
// event once, in order, and none twice.
func TestAReplayReadsOnInOrderWhereARunsSeqHasAGap(t *testing.T) {
	const last, missing = 5*sseReplayPage + 300, 2*sseReplayPage + 500
	src := &streamSource{
		run: true,
		key: func(e *spec.Event) int64 { return e.Seq },
		replay: func(_ context.Context, after int64, limit int) ([]*spec.Event, error) {
			var evs []*spec.Event
			for seq := after + 1; seq <= last && len(evs) < limit; seq++ {
				if seq != missing {
					evs = append(evs, &spec.Event{Seq: seq, Type: "bench", Data: []byte(`{}`)})
				}
			}
			return evs, nil
		},
	}
	st := newStreamer(&Server{}, src, 0, credential{})
	var got []int64
	for p := range st.readPages(context.Background(), 0) {
		if p.err != nil || p.panic != "" {
			t.Fatalf("page failed: %v %s", p.err, p.panic)
		}
		for _, e := range p.evs {
			got = append(got, e.Seq)
		}
	}
	want := int64(1)
	for i, seq := range got {
		if want == missing {
			want++
		}
		if seq != want {
			t.Fatalf("event %d has seq %d, want %d (seqs around it: %v)", i, seq, want, got[max(0, i-3):min(len(got), i+3)])
		}
		want++
	}
	if want != last+1 {
		t.Fatalf("the replay ended at seq %d, want %d", want-1, last)
	}
	if g := goroutinesWith("(*streamer).readAhead"); len(g) != 0 {
		t.Fatalf("%d readers left after the replay ended", len(g))
	}
}

// A stream's writer lets a buffer grown past chunkKeep go once it is sent,
// except while a replay keeps it (its chunks would grow a new one each):
// the replay's end lets it go.
func TestAStreamsWriterKeepsItsBufferOnlyWhileAReplayRuns(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	go io.Copy(io.Discard, client)
	defer client.Close()
	w := &chunkedWriter{conn: server}
	e := &spec.Event{Seq: 1, Type: "bench", Data: []byte(`{"text":"` + strings.Repeat("x", 512) + `"}`)}
	fill := func() {
		for range 2 * chunkKeep / 512 {
			if err := w.appendEvent(1, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	fill()
	if w.buf != nil {
		t.Fatalf("a %d-byte buffer kept after its send, outside a replay", cap(w.buf))
	}
	w.keep = true
	fill()
	if cap(w.buf) <= chunkKeep {
		t.Fatalf("a replay's buffer was let go after a send (cap %d)", cap(w.buf))
	}
	w.release()
	if w.buf != nil {
		t.Fatalf("a %d-byte buffer kept after the replay", cap(w.buf))
	}
}

// A replay's readers end with their stream when the client goes away: the
// stream, blocked writing a page to a client that does not read, fails its
// write once the client closes, and the readers, waiting with the next
// pages, are cancelled and waited for.
func TestAReplaysReaderEndsWhenItsClientGoesAway(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = time.Hour; o.WriteTimeout = time.Hour })
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("q"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	// Five pages of 4 KiB events: far more than the connection's buffers
	// take (the stream blocks within the first two or three pages).
	pad := strings.Repeat("x", 4<<10)
	err := ts.DB.WriteTx(ts.ctx, func(tx spec.Tx) error {
		for i := range 5 * sseReplayPage {
			if _, err := tx.AppendEvent(ts.ctx, id, "bench", map[string]any{"i": i, "pad": pad}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stalled := waitfor.StalledStream(t, ts.URL, alice.Token, "/api/runs/"+id+"/events")
	waitUntil(t, "the stream to block writing to the stalled reader", func() bool {
		return len(goroutinesWith("[IO wait", "(*chunkedWriter).send", "(*Server).serveStream")) == 1
	})
	waitUntil(t, "the replay's readers to wait with the next pages", func() bool {
		return len(goroutinesWith("[select", "(*streamer).readPages")) == 1 && len(goroutinesWith("[select", "(*streamer).readAhead.func1")) == replayReaders
	})
	stalled.Close()
	waitUntil(t, "no stream goroutine and no reader", func() bool {
		return len(goroutinesWith("(*Server).serveStream")) == 0 && len(goroutinesWith("(*streamer).readPages")) == 0 &&
			len(goroutinesWith("(*streamer).readAhead")) == 0
	})
	if n := ts.Server.streams.count(); n != 0 {
		t.Fatalf("%d streams still registered after the client went away", n)
	}
}
