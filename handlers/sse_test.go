package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"homework/engine/spec"

	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"
)

// seqOf returns the SSE id of m as a number.
func seqOf(t testing.TB, m sseMsg) int64 {
	t.Helper()
	n, err := strconv.ParseInt(m.ID, 10, 64)
	if err != nil {
		t.Fatalf("id %q: %v", m.ID, err)
	}
	return n
}

// checkSeqs checks that msgs carry seqs from+1, from+2, ... in order and
// that each message's id, event and data agree.
func checkSeqs(t testing.TB, msgs []sseMsg, from int64) {
	t.Helper()
	for i, m := range msgs {
		e := m.event(t)
		if want := from + int64(i) + 1; seqOf(t, m) != want || e.Seq != want {
			t.Fatalf("message %d has id %s (seq %d), want %d", i, m.ID, e.Seq, want)
		}
		if string(e.Type) != m.Event {
			t.Fatalf("message %d: event %q but data type %q", i, m.Event, e.Type)
		}
	}
}

func TestSSEReplay(t *testing.T) {
	if onBothStores(t, TestSSEReplay) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	id := ts.createRun(t, alice, doneStep("done"))
	ts.waitStatus(t, alice, id, spec.StatusCompleted)
	n, err := ts.Store.LastSeq(ts.ctx, id)
	if err != nil || n < 5 {
		t.Fatalf("last seq %d, %v", n, err)
	}
	path := "/api/runs/" + id + "/events"

	t.Run("from 0 replays every event with SSE headers, then ends", func(t *testing.T) {
		c := ts.openSSE(t, alice, path)
		h := c.Resp.Header
		if c.Resp.StatusCode != 200 || h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" ||
			h.Get("X-Accel-Buffering") != "no" {
			t.Fatalf("status %d headers %v", c.Resp.StatusCode, h)
		}
		msgs := c.readAll(t)
		if int64(len(msgs)) != n {
			t.Fatalf("got %d events, want %d", len(msgs), n)
		}
		checkSeqs(t, msgs, 0)
	})
	t.Run("since_seq starts in the middle", func(t *testing.T) {
		msgs := ts.openSSE(t, alice, path+"?since_seq=3").readAll(t)
		if int64(len(msgs)) != n-3 {
			t.Fatalf("got %d events, want %d", len(msgs), n-3)
		}
		checkSeqs(t, msgs, 3)
	})
	t.Run("Last-Event-ID wins over since_seq", func(t *testing.T) {
		msgs := ts.openSSE(t, alice, path+"?since_seq=1", "Last-Event-ID", "4").readAll(t)
		if int64(len(msgs)) != n-4 {
			t.Fatalf("got %d events, want %d", len(msgs), n-4)
		}
		checkSeqs(t, msgs, 4)
	})
	t.Run("a finished run with nothing after the cursor answers 204", func(t *testing.T) {
		c := ts.openSSE(t, alice, path, "Last-Event-ID", strconv.FormatInt(n, 10))
		if c.Resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", c.Resp.StatusCode)
		}
	})
	t.Run("a malformed Last-Event-ID is 400", func(t *testing.T) {
		for _, v := range []string{"x", "-1", "1.5"} {
			ts.expectError(t, alice, "GET", path, nil, 400, spec.EINVALID, "Last-Event-ID", "Accept", "text/event-stream", "Last-Event-ID", v)
		}
		ts.expectError(t, alice, "GET", path+"?since_seq=-2", nil, 400, spec.EINVALID, "since_seq", "Accept", "text/event-stream")
	})
	t.Run("another user's stream is 404", func(t *testing.T) {
		ts.expectError(t, bob, "GET", path, nil, 404, spec.ENOTFOUND, "", "Accept", "text/event-stream")
	})
}

// A replay of many pages, whose pages after the first are read several at
// once (readAhead), sends every event once and in seq order, from the
// start and from a cursor in the middle of a page, on both stores.
func TestSSEReplayOfManyPagesSendsEveryEventOnceInOrder(t *testing.T) {
	if onBothStores(t, TestSSEReplayOfManyPagesSendsEveryEventOnceInOrder) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("q"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	err := ts.Store.WriteTx(ts.ctx, func(tx spec.Tx) error {
		for i := range 4*sseReplayPage + sseReplayPage/2 {
			if _, err := tx.AppendEvent(ts.ctx, id, "bench", map[string]int{"i": i}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Engine.Cancel(ts.ctx, alice.ID, id); err != nil {
		t.Fatal(err)
	}
	ts.waitStatus(t, alice, id, spec.StatusCanceled)
	n, err := ts.Store.LastSeq(ts.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{0, sseReplayPage + 234} {
		msgs := ts.openSSE(t, alice, fmt.Sprintf("/api/runs/%s/events?since_seq=%d", id, from)).readAll(t)
		if int64(len(msgs)) != n-from {
			t.Fatalf("from %d: got %d events, want %d", from, len(msgs), n-from)
		}
		checkSeqs(t, msgs, from)
		if last := msgs[len(msgs)-1].event(t); !last.IsTerminal() {
			t.Fatalf("from %d: the last event is %s, want the run's terminal event", from, last.Type)
		}
	}
}

func TestSSENoGapNoDuplicateDuringSwitch(t *testing.T) {
	if onBothStores(t, TestSSENoGapNoDuplicateDuringSwitch) {
		return
	}
	for _, before := range []int{0, 2500} {
		t.Run(fmt.Sprintf("with %d events before connecting and 1000 appended while switching", before), func(t *testing.T) {
			ts := newTestServer(t, func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
			alice := ts.user(t, "alice@example.com")
			id := ts.createRun(t, alice, askStep("q"))
			ts.waitStatus(t, alice, id, spec.StatusWaiting)
			for i := range before {
				if _, err := ts.Store.AppendEvent(ts.ctx, id, "test_event", map[string]int{"before": i}); err != nil {
					t.Fatal(err)
				}
			}

			c := ts.openSSE(t, alice, "/api/runs/"+id+"/events")
			var wg sync.WaitGroup
			var appended atomic.Bool
			errs := make(chan error, 10)
			for g := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						if _, err := ts.Store.AppendEvent(ts.ctx, id, "test_event", map[string]int{"g": g, "i": i}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			var target atomic.Int64
			go func() {
				wg.Wait()
				n, err := ts.Store.LastSeq(ts.ctx, id)
				if err != nil {
					errs <- err
				}
				target.Store(n)
				appended.Store(true)
			}()

			var last int64
			for !appended.Load() || last < target.Load() {
				m, err := c.Next()
				if err != nil {
					t.Fatalf("stream ended after seq %d: %v", last, err)
				}
				if m.Comment != "" {
					continue
				}
				if s := seqOf(t, m); s != last+1 {
					t.Fatalf("got seq %d after %d", s, last)
				}
				last++
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}

			// The run's end ends the stream, with nothing skipped.
			ts.expect(t, alice, "POST", "/api/runs/"+id+"/cancel", nil, 200, nil)
			rest := c.readAll(t)
			checkSeqs(t, rest, last)
			if len(rest) == 0 || !hasType(rest, "run_canceled") {
				t.Fatalf("stream ended without run_canceled: %v", rest)
			}
			if got, want := last+int64(len(rest)), lastSeq(t, ts, id); got != want {
				t.Fatalf("stream ended at seq %d, log at %d", got, want)
			}
		})
	}
}

func hasType(msgs []sseMsg, typ spec.EventType) bool {
	for _, m := range msgs {
		if m.Event == string(typ) {
			return true
		}
	}
	return false
}

func lastSeq(t testing.TB, ts *testServer, runID string) int64 {
	t.Helper()
	n, err := ts.Store.LastSeq(ts.ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSSELiveFollowsRunToItsEnd(t *testing.T) {
	if onBothStores(t, TestSSELiveFollowsRunToItsEnd) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("which?"), doneStep("done"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	c := ts.openSSE(t, alice, "/api/runs/"+id+"/events")
	var msgs []sseMsg
	for !hasType(msgs, "run_waiting_on_user") {
		m, err := c.NextEvent()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	ts.expect(t, alice, "POST", "/api/runs/"+id+"/respond", `{"answers":["modernc"]}`, 200, nil)
	msgs = append(msgs, c.readAll(t)...)
	checkSeqs(t, msgs, 0)
	if !hasType(msgs, "user_response") || !hasType(msgs, "run_completed") {
		t.Fatalf("missing events in %v", msgs)
	}
	if got, want := int64(len(msgs)), lastSeq(t, ts, id); got != want {
		t.Fatalf("stream sent %d events, log has %d", got, want)
	}
}

func TestSSEHeartbeat(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = 10 * time.Millisecond })
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("q"))
	c := ts.openSSE(t, alice, "/api/runs/"+id+"/events")
	for {
		m, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if m.Comment == "ping" {
			return
		}
	}
}

func TestSSEClientGoneUnsubscribes(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = 10 * time.Millisecond })
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("q"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	base := ts.Bus.Subscribers()
	run := ts.openSSE(t, alice, "/api/runs/"+id+"/events")
	feed := ts.openSSE(t, alice, "/api/events?since=0")
	// A stream subscribes before it replays, so its first event means it is
	// subscribed.
	for _, c := range []*sseConn{run, feed} {
		if _, err := c.NextEvent(); err != nil {
			t.Fatal(err)
		}
	}
	if got := ts.Bus.Subscribers(); got != base+2 {
		t.Fatalf("subscribers %d, want %d", got, base+2)
	}
	run.Close()
	feed.Close()
	waitUntil(t, "the streams to unsubscribe", func() bool { return ts.Bus.Subscribers() == base })
}

func TestSSEShutdownEndsStreams(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = time.Hour })
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("q"))
	c := ts.openSSE(t, alice, "/api/runs/"+id+"/events")
	if _, err := c.NextEvent(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open stream: %v", err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := c.Next(); err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end after shutdown")
	}
}

func TestSSEUserFeed(t *testing.T) {
	if onBothStores(t, TestSSEUserFeed) {
		return
	}
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = 10 * time.Millisecond })
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	a1 := ts.createRun(t, alice, doneStep("done"))
	ts.waitStatus(t, alice, a1, spec.StatusCompleted)
	b1 := ts.createRun(t, bob, doneStep("done"))
	ts.waitStatus(t, bob, b1, spec.StatusCompleted)

	c := ts.openSSE(t, alice, "/api/events?since=0")
	var msgs []sseMsg
	// readUntil reads alice's feed until runID's run_completed, checking
	// that ids rise and that bob's events never appear.
	readUntil := func(runID string) {
		t.Helper()
		for {
			m, err := c.NextEvent()
			if err != nil {
				t.Fatal(err)
			}
			e := m.event(t)
			if e.RunID == b1 {
				t.Fatalf("alice's feed has bob's event %+v", e)
			}
			if m.ID != strconv.FormatInt(e.ID, 10) {
				t.Fatalf("SSE id %s is not the global id %d", m.ID, e.ID)
			}
			if len(msgs) > 0 && e.ID <= msgs[len(msgs)-1].event(t).ID {
				t.Fatalf("ids out of order: %d after %s", e.ID, msgs[len(msgs)-1].ID)
			}
			msgs = append(msgs, m)
			if e.RunID == runID && m.Event == "run_completed" {
				return
			}
		}
	}
	readUntil(a1) // replayed
	a2 := ts.createRun(t, alice, doneStep("done"))
	readUntil(a2) // live
	// The feed outlives its runs' ends.
	for {
		m, err := c.Next()
		if err != nil {
			t.Fatalf("feed ended: %v", err)
		}
		if m.Comment == "ping" {
			break
		}
	}

	t.Run("resumes after Last-Event-ID", func(t *testing.T) {
		mid := msgs[len(msgs)/2]
		c := ts.openSSE(t, alice, "/api/events", "Last-Event-ID", mid.ID)
		m, err := c.NextEvent()
		if err != nil {
			t.Fatal(err)
		}
		if want := msgs[len(msgs)/2+1].ID; m.ID != want {
			t.Fatalf("resumed at %s, want %s", m.ID, want)
		}
	})
}

// tcpProxy forwards loopback connections to a server and can cut them all,
// as a flaky network would.
type tcpProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		waitWithin(t, "the proxy's connections to close", 10*time.Second, p.wg.Wait)
	})
	return p
}

// URL returns the proxy's base URL.
func (p *tcpProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(out, in); out.Close() }()
		go func() { defer p.wg.Done(); io.Copy(in, out); in.Close() }()
	}
}

// cut closes every connection open through the proxy.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestR3labsClientFollowsRunAcrossDrop(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, askStep("which?"), doneStep("done"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	proxy := newTCPProxy(t, ts.URL[len("http://"):])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sse.NewClient(proxy.URL()+"/api/runs/"+id+"/events", sse.ClientMaxBufferSize(1<<20))
	client.Headers["Authorization"] = "Bearer " + alice.Token
	client.ReconnectStrategy = backoff.WithContext(&backoff.ExponentialBackOff{
		InitialInterval: 20 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2,
		MaxInterval: 200 * time.Millisecond, MaxElapsedTime: 0, Clock: backoff.SystemClock,
	}, ctx)
	events := make(chan sseMsg, 10000)
	done := make(chan error, 1)
	var terminal atomic.Bool
	go func() {
		// A connection that ends cleanly returns nil without a reconnect
		// (the cut can look like that), so subscribe again, as homework
		// tail does, until the run's end; the client keeps Last-Event-ID.
		for {
			err := client.SubscribeWithContext(ctx, "", func(e *sse.Event) {
				if len(e.Data) == 0 {
					return // a heartbeat
				}
				if string(e.Event) == "run_completed" {
					terminal.Store(true)
				}
				events <- sseMsg{ID: string(e.ID), Event: string(e.Event), Data: string(e.Data)}
			})
			if err != nil || terminal.Load() {
				done <- err
				return
			}
		}
	}()

	var msgs []sseMsg
	cutDone, finished := false, false
	for {
		var m sseMsg
		select {
		case m = <-events:
		case err := <-done:
			if err == nil && terminal.Load() {
				// The rest is buffered in events.
				finished, done = true, nil
				continue
			}
			t.Fatalf("client returned early after %d events (cut %v): %v", len(msgs), cutDone, err)
		case <-ctx.Done():
			t.Fatalf("timed out after %d events", len(msgs))
		}
		msgs = append(msgs, m)
		if m.Event == "run_waiting_on_user" && !cutDone {
			cutDone = true
			proxy.cut()
			ts.expect(t, alice, "POST", "/api/runs/"+id+"/respond", `{"answer":"modernc"}`, 200, nil)
		}
		if m.Event == "run_completed" {
			break
		}
	}
	cancel()
	if !finished {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("client ended with %v", err)
		}
	}
	// The terminal event's notification may or may not have arrived before
	// we stopped; everything up to run_completed must be there once.
	checkSeqs(t, msgs, 0)
	if proxy.accepted.Load() < 2 {
		t.Fatalf("the client connected %d times; the drop was not exercised", proxy.accepted.Load())
	}
}
