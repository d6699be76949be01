package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"

	"homework/engine"
)

// Server-sent event streams.
//
// Each message is
//
//	id: <cursor>
//	event: <type>
//	data: <one-line JSON: the event, spec.Event.AppendJSON>
//
// where the cursor is the event's seq on a run stream and its global id on
// the user feed. A stream starts after the cursor given by Last-Event-ID, or
// else the since_seq (since_id) query parameter, or else 0. It subscribes to
// the bus first, then replays from the database everything after the
// cursor, then sends live events, skipping any already sent, so there is no
// gap and no duplicate however events are appended during the switch. A
// subscription the bus drops for falling behind is replaced by a new one and
// a replay from the last event sent. A comment (": ping") at every
// heartbeat unless the stream sent events within the last half of one
// keeps proxies from closing idle streams and is how a gone client is
// noticed (its flush fails). Before anything is sent, events or ping, the
// stream's credential is re-checked (see sse_verify.go): a stream ends,
// sending nothing more, as soon as its credential is revoked anywhere.
//
// A stream never holds the server: every send (an event, a page of replay,
// a ping) must be taken by the client within Options.WriteTimeout, or the
// connection is cut and the stream ends, freeing its buffers. A client that
// stops reading is let go that way; it reconnects with Last-Event-ID and
// misses nothing. The bus buffers sseBuffer events per stream at most.

const (
	// sseBuffer is the bus buffer of one stream. A stream that falls
	// further behind is dropped by the bus and catches up from the
	// database.
	sseBuffer = 256
	// sseReplayPage is how many events one replay query reads.
	sseReplayPage = 1000
)

// streamSource describes one event stream.
type streamSource struct {
	// subscribe subscribes to the stream's live events.
	subscribe func() *engine.Subscription
	// replay reads up to limit events after the cursor from the database.
	replay func(ctx context.Context, after int64, limit int) ([]*spec.Event, error)
	// key is the event's cursor value (seq or global id).
	key func(*spec.Event) int64
	// run streams are gap-free by seq and end after the run's terminal
	// event; the user feed never ends by itself.
	run bool
	// finished is set when the run was already over at connect time: the
	// stream replays what is left and ends without subscribing.
	finished bool
}

func wantsEventStream(c *fiber.Ctx) bool {
	return strings.Contains(c.Get(fiber.HeaderAccept), "text/event-stream")
}

// streamCursor returns the stream's starting cursor: Last-Event-ID when
// sent (a non-negative integer), else the query parameter param, else 0.
func streamCursor(c *fiber.Ctx, param string) (int64, error) {
	if h := strings.TrimSpace(c.Get("Last-Event-ID")); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < 0 {
			return 0, spec.FieldError("Last-Event-ID", "Last-Event-ID must be a non-negative whole number.")
		}
		return n, nil
	}
	return queryInt(c, param, 0, 0, math.MaxInt64)
}

// apiRunEvents handles GET /api/runs/{id}/events: an SSE stream when the
// client accepts text/event-stream, else a JSON page of events.
func (s *Server) apiRunEvents(c *fiber.Ctx) error {
	u := userOf(c)
	runID := strings.Clone(c.Params("id"))
	if !wantsEventStream(c) {
		return s.runEventsPage(c, u.ID, runID)
	}
	cursor, err := streamCursor(c, "since_seq")
	if err != nil {
		return s.jsonError(c, err)
	}
	ctx := c.UserContext()
	run, err := s.db.FindRun(ctx, u.ID, runID)
	if err != nil {
		return s.jsonError(c, err)
	}
	src := &streamSource{
		subscribe: func() *engine.Subscription { return s.engine.Bus().SubscribeRun(runID, sseBuffer) },
		replay: func(ctx context.Context, after int64, limit int) ([]*spec.Event, error) {
			return s.db.ListRunEvents(ctx, u.ID, runID, after, limit)
		},
		key:      func(e *spec.Event) int64 { return e.Seq },
		run:      true,
		finished: spec.IsTerminalStatus(run.Status),
	}
	if src.finished {
		// 204 tells an EventSource that there is nothing more, ever, so it
		// stops reconnecting.
		evs, err := s.db.ListRunEvents(ctx, u.ID, runID, cursor, 1)
		if err != nil {
			return s.jsonError(c, err)
		}
		if len(evs) == 0 {
			return c.SendStatus(fiber.StatusNoContent)
		}
	}
	return s.startStream(c, src, cursor)
}

// apiUserEvents handles GET /api/events: every event of the caller's runs,
// with the global event id as cursor. As SSE it never ends by itself and
// starts at the newest event unless given a cursor.
func (s *Server) apiUserEvents(c *fiber.Ctx) error {
	u := userOf(c)
	userID := u.ID
	if !wantsEventStream(c) {
		return s.userEventsPage(c, userID)
	}
	// The feed starts at now unless asked for more: a dashboard that
	// connects wants what happens next, not the user's whole history.
	// Last-Event-ID (a reconnect) or ?since= (since_id, since_seq) picks
	// the cursor; since=0 replays everything.
	param := ""
	for _, p := range []string{"since", "since_id", "since_seq"} {
		if c.Query(p) != "" {
			param = p
			break
		}
	}
	var cursor int64
	var err error
	if param == "" && strings.TrimSpace(c.Get("Last-Event-ID")) == "" {
		cursor, err = s.db.LastUserEventID(c.UserContext(), userID)
	} else {
		cursor, err = streamCursor(c, cmp.Or(param, "since"))
	}
	if err != nil {
		return s.jsonError(c, err)
	}
	src := &streamSource{
		subscribe: func() *engine.Subscription { return s.engine.Bus().SubscribeUser(userID, sseBuffer) },
		replay: func(ctx context.Context, after int64, limit int) ([]*spec.Event, error) {
			return s.db.ListUserEvents(ctx, userID, after, limit)
		},
		key: func(e *spec.Event) int64 { return e.ID },
	}
	return s.startStream(c, src, cursor)
}

// runEventsPage answers GET /api/runs/{id}/events as JSON:
// ?since_seq=N&limit=M (1..1000, default 100).
func (s *Server) runEventsPage(c *fiber.Ctx, userID int64, runID string) error {
	since, err := queryInt(c, "since_seq", 0, 0, math.MaxInt64)
	if err != nil {
		return s.jsonError(c, err)
	}
	limit, err := queryInt(c, "limit", 100, 1, 1000)
	if err != nil {
		return s.jsonError(c, err)
	}
	evs, err := s.db.ListRunEvents(c.UserContext(), userID, runID, since, int(limit)+1)
	if err != nil {
		return s.jsonError(c, err)
	}
	page := EventPage{NextSinceSeq: since}
	if len(evs) > int(limit) {
		evs, page.HasMore = evs[:limit], true
	}
	page.Events = make([]*spec.Event, 0, len(evs))
	for _, e := range evs {
		page.Events = append(page.Events, e)
		page.NextSinceSeq = e.Seq
	}
	return c.JSON(page)
}

// userEventsPage answers GET /api/events as JSON: ?since_id=N&limit=M.
func (s *Server) userEventsPage(c *fiber.Ctx, userID int64) error {
	since, err := queryInt(c, "since_id", 0, 0, math.MaxInt64)
	if err != nil {
		return s.jsonError(c, err)
	}
	limit, err := queryInt(c, "limit", 100, 1, 1000)
	if err != nil {
		return s.jsonError(c, err)
	}
	evs, err := s.db.ListUserEvents(c.UserContext(), userID, since, int(limit)+1)
	if err != nil {
		return s.jsonError(c, err)
	}
	page := UserEventPage{NextSinceID: since}
	if len(evs) > int(limit) {
		evs, page.HasMore = evs[:limit], true
	}
	page.Events = make([]*spec.Event, 0, len(evs))
	for _, e := range evs {
		page.Events = append(page.Events, e)
		page.NextSinceID = e.ID
	}
	return c.JSON(page)
}

// startStream answers with the SSE headers and hands the connection to a
// stream writer (see sse_conn.go). Everything the writer needs has been
// copied out of c: the Fiber context is recycled as soon as this handler
// returns.
func (s *Server) startStream(c *fiber.Ctx, src *streamSource, cursor int64) error {
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	c.Status(fiber.StatusOK)
	if c.Method() == fiber.MethodHead {
		// The headers alone: no stream.
		return nil
	}
	st := newStreamer(s, src, cursor, credentialOf(c, userOf(c).ID))
	if !s.hijackStream(c, st) {
		return fiber.NewError(fiber.StatusServiceUnavailable, "The server is shutting down.")
	}
	return nil
}

// streamer writes one SSE stream. It runs on the goroutine fasthttp starts
// for the hijacked connection and returns when the stream ends: after a
// run's terminal event, when the client is gone (a failed write), when the
// credential is revoked, or when the server shuts down.
type streamer struct {
	s     *Server
	w     *chunkedWriter
	conn  net.Conn  // the client's connection, whose write deadline bounds each send
	armed time.Time // when conn's write deadline was last set
	cut   streamCut // set at shutdown: writes fail after streamCutGrace
	src   *streamSource
	last  int64 // the cursor of the last event sent
	ended bool  // a run stream sent its terminal event

	cred     credential    // what authenticated the stream
	revoked  revokedFlag   // set (before the revocation commits) when cred is revoked
	revokedC chan struct{} // closed when this process revokes cred
	// poke wakes the stream to look at the server's state: shutdown, its
	// credential revoked, a heartbeat tick. A channel of its own, so that
	// waiting for its next event locks nothing the other streams lock
	// (selecting on the server's context and the shared heartbeat did, on
	// every event of every stream).
	poke  chan struct{}
	tick  int64         // the heartbeat tick the stream last looked at
	sent  time.Time     // when events were last sent
	batch []*spec.Event // live events received together
	// sub is the live subscription, for the verifier to see which streams
	// have events waiting (their checks join the round it starts).
	sub atomic.Pointer[engine.Subscription]
}

func newStreamer(s *Server, src *streamSource, cursor int64, cred credential) *streamer {
	return &streamer{s: s, src: src, last: cursor, cred: cred, revokedC: make(chan struct{}), poke: make(chan struct{}, 1)}
}

// wake pokes the stream; a poke already pending covers this one.
func (st *streamer) wake() {
	select {
	case st.poke <- struct{}{}:
	default:
	}
}

// errRevoked ends a stream whose credential was revoked.
var errRevoked = errors.New("the stream's credential was revoked")

// arm gives the writes of one send (whatever is written up to the next
// arm) the write timeout: a write to the connection the client does not
// take by then fails, and so ends the stream.
//
// A deadline set less than a quarter of the timeout ago is kept: it still
// gives the send at least three quarters of the timeout, and setting one
// takes the poller's lock, which on every event of a thousand streams was
// a measurable part of delivering it.
func (st *streamer) arm() {
	if st.conn == nil {
		return
	}
	now := time.Now()
	if !st.armed.IsZero() && now.Sub(st.armed) < st.s.opts.WriteTimeout/4 {
		return
	}
	st.armed = now
	st.cut.setDeadline(st.conn, now.Add(st.s.opts.WriteTimeout))
}

// flush sends what is buffered, within the write timeout.
func (st *streamer) flush() error {
	st.arm()
	return st.w.Flush()
}

func (st *streamer) run() {
	ctx := st.s.ctx
	st.arm()
	if _, err := st.w.WriteString("retry: 3000\n\n"); err != nil || st.flush() != nil {
		return
	}
	if st.src.finished {
		st.replay(ctx)
		return
	}
	for st.follow(ctx) {
	}
}

// follow subscribes, replays what the database has and sends live events
// until the stream ends; it reports true when the bus dropped the
// subscription and the stream must subscribe and replay again. The
// subscription ends with it, however it returns (a panic included).
func (st *streamer) follow(ctx context.Context) bool {
	// Subscribe first: whatever commits after this point reaches the
	// subscription, and everything before it is in the database.
	sub := st.src.subscribe()
	defer sub.Close()
	if err := st.replay(ctx); err != nil || st.ended {
		return false
	}
	st.sub.Store(sub)
	defer st.sub.Store(nil)
	return st.live(ctx, sub)
}

// live sends the subscription's events until the stream ends. It reports
// true when the bus dropped the subscription and the stream must resubscribe
// and replay.
//
// It waits on its subscription and its own poke alone: the server's
// shutdown (ctx is the server's), a revocation and each heartbeat tick
// poke every stream (Server.Shutdown, streamRegistry.revoke,
// Server.tick), and the stream then looks at what changed.
func (st *streamer) live(ctx context.Context, sub *engine.Subscription) bool {
	// The heartbeat starts with the first stream; this one pings from its
	// next tick on.
	st.s.beat.start(st.s.ctx, st.s.opts.Heartbeat, st.s.tick)
	st.tick = st.s.beat.ticks.Load()
	for {
		if ctx.Err() != nil || st.revoked.Load() {
			return false
		}
		select {
		case <-st.poke:
			if ctx.Err() != nil || st.revoked.Load() {
				return false
			}
			t := st.s.beat.ticks.Load()
			if t == st.tick {
				continue
			}
			st.tick = t
			// Re-authenticate even when idle: a credential revoked
			// anywhere ends the stream within one heartbeat (by a check
			// that started after the tick).
			if st.verify(ctx, st.s.verifier.clock()) != nil {
				return false
			}
			if time.Since(st.sent) < st.s.opts.Heartbeat/2 {
				// Events went out within half a heartbeat: the connection
				// is not idle (it is never silent for more than one and a
				// half), and a gone client failed their flush.
				continue
			}
			st.arm()
			if _, err := st.w.WriteString(": ping\n\n"); err != nil || st.flush() != nil {
				return false
			}
		case e, ok := <-sub.C:
			if !ok {
				return sub.Dropped()
			}
			// Take what else is already buffered: one check and one
			// flush for all of it.
			batch, closed := append(st.batch[:0], e), false
		drain:
			for len(batch) < sseBuffer {
				select {
				case e, ok := <-sub.C:
					if !ok {
						closed = true
						break drain
					}
					batch = append(batch, e)
				default:
					break drain
				}
			}
			st.batch = batch
			// Every event in batch was published before the clock
			// reached after.
			after := st.s.verifier.clock()
			st.arm()
			last := st.last
			err := st.liveBatch(ctx, batch, after)
			clear(batch)
			if err != nil || st.flush() != nil || st.ended {
				return false
			}
			if st.last != last {
				st.sent = time.Now()
			}
			if closed {
				return sub.Dropped()
			}
		}
	}
}

// liveBatch sends events that arrived from the bus, published before the
// verifier's clock reached after, once a check that started after that
// (so after the events were committed) found the credential live. A batch
// of events all sent already needs no check.
func (st *streamer) liveBatch(ctx context.Context, batch []*spec.Event, after int64) error {
	for _, e := range batch {
		if st.src.key(e) > st.last {
			if err := st.verify(ctx, after); err != nil {
				return err
			}
			break
		}
	}
	for _, e := range batch {
		if err := st.liveEvent(ctx, e); err != nil || st.ended {
			return err
		}
	}
	return nil
}

// liveEvent sends one event from the bus unless it was already sent.
func (st *streamer) liveEvent(ctx context.Context, e *spec.Event) error {
	k := st.src.key(e)
	if k <= st.last {
		if st.src.run && e.IsTerminal() {
			// The run is over and its terminal event, its last, was sent.
			st.ended = true
		}
		return nil
	}
	if st.src.run && k > st.last+1 {
		// Seq is gap-free, so a jump means events are missing here;
		// the database has them.
		if err := st.replay(ctx); err != nil {
			return err
		}
		if k <= st.last || st.ended {
			return nil
		}
	}
	if err := st.write(e); err != nil {
		return err
	}
	if st.src.run && e.IsTerminal() {
		// A run's terminal event is its last: the stream ends with it.
		st.ended = true
	}
	return nil
}

// replay sends every event after st.last from the database, a page at a
// time, flushing after each page.
//
// Other goroutines read the pages (readPages), each as soon as the one
// before it is handed over, while the stream writes: the stream writes
// straight to its connection, so reading and writing would otherwise take
// turns, and a reader that waited for the stream to take a page (and check
// its credential) before it began the next left the database idle for
// that long on every page. A run's pages are read replayReaders at a time.
// At most replayReaders + 1 pages wait read, so a slow client holds back
// the reads, not the memory. The readers end with the replay (canceled,
// waited for).
func (st *streamer) replay(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	pages := st.readPages(ctx, st.last)
	defer func() {
		cancel()
		for range pages {
		}
	}()
	// A page is sent in chunks of chunkMax; the buffer they grew is kept
	// until the replay is over instead of grown again for every chunk.
	st.w.keep = true
	defer st.w.release()
	for {
		// The reader closes pages without a page only once ctx ended;
		// otherwise its last page is short and ends this loop first.
		p := <-pages
		if p.panic != "" {
			panic(p.panic)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		evs, err := p.evs, p.err
		if err != nil {
			st.s.log.Error("event stream replay failed", "err", err)
			return err
		}
		// The page was read before this check started.
		if len(evs) > 0 {
			if err := st.verify(ctx, afterNow); err != nil {
				return err
			}
		}
		st.arm()
		for _, e := range evs {
			if err := st.write(e); err != nil {
				return err
			}
			if st.src.run && e.IsTerminal() {
				st.ended = true
				break
			}
		}
		if err := st.flush(); err != nil {
			return err
		}
		if st.ended || len(evs) < sseReplayPage {
			return nil
		}
	}
}

// readPages starts a goroutine that reads the pages of events after
// after, in order, and hands each over on the channel it returns (which
// holds none: a page read waits there until it is taken), until a page is
// not full, a read fails (that page carries the error or the panic) or ctx
// ends; then it closes the channel.
//
// A run stream's pages after a full first one are read replayReaders at a
// time (readAhead): its seq has no gaps, so where each page starts is
// known before the one before it is read, and the reads use the cores the
// stream's writing leaves idle. The first page is read alone, so a stream
// with little to replay (nearly every reconnect) costs one read.
func (st *streamer) readPages(ctx context.Context, after int64) <-chan replayPage {
	pages := make(chan replayPage)
	go func() {
		defer close(pages)
		p := st.readPage(ctx, after)
		if !handOver(ctx, pages, p) {
			return
		}
		after = p.last
		if st.src.run {
			var over bool
			if after, over = st.readAhead(ctx, after, pages); over {
				return
			}
		}
		for {
			p := st.readPage(ctx, after)
			if !handOver(ctx, pages, p) {
				return
			}
			after = p.last
		}
	}()
	return pages
}

// replayReaders is how many pages of a run stream's replay are read at
// once.
const replayReaders = 2

// readAhead hands over a run's pages after after, in order, each read by
// one of replayReaders goroutines that take every replayReaders-th page
// from the seq it must start at. It returns the key of the last event it
// handed over and whether the replay is over; it is not when a page did
// not hold the seqs expected of it (a run's seq has no gaps, so only a
// store that broke that promise gives one), and the caller reads on in
// order from there. The goroutines end before it returns.
func (st *streamer) readAhead(ctx context.Context, after int64, pages chan<- replayPage) (last int64, over bool) {
	ctx, cancel := context.WithCancel(ctx)
	lanes := make([]chan replayPage, replayReaders)
	var wg sync.WaitGroup
	for i := range lanes {
		lanes[i] = make(chan replayPage)
		wg.Add(1)
		go func(lane chan<- replayPage, first int) {
			defer wg.Done()
			defer close(lane)
			for k := first; ; k += replayReaders {
				if !handOver(ctx, lane, st.readPage(ctx, after+int64(k)*sseReplayPage)) {
					return
				}
			}
		}(lanes[i], i)
	}
	defer func() {
		cancel()
		for _, lane := range lanes {
			for range lane {
			}
		}
		wg.Wait()
	}()
	last = after
	for k := 0; ; k++ {
		p, ok := <-lanes[k%replayReaders]
		if !ok {
			return last, true // ctx ended
		}
		if p.err == nil && p.panic == "" && len(p.evs) > 0 &&
			(st.src.key(p.evs[0]) != last+1 || p.last != last+int64(len(p.evs))) {
			return last, false
		}
		if !handOver(ctx, pages, p) {
			return last, true
		}
		last = p.last
	}
}

// handOver sends p on pages unless ctx ends first, and reports whether a
// page follows it: false when ctx ended, p failed or p is not full.
func handOver(ctx context.Context, pages chan<- replayPage, p replayPage) bool {
	select {
	case pages <- p:
	case <-ctx.Done():
		return false
	}
	return p.err == nil && p.panic == "" && len(p.evs) == sseReplayPage
}

// readPage reads one page of events after after. A panic comes back in the
// page, for the stream's goroutine, which logs it (serveStream) with where
// it happened.
func (st *streamer) readPage(ctx context.Context, after int64) (p replayPage) {
	defer func() {
		if r := recover(); r != nil {
			p = replayPage{panic: fmt.Sprintf("%v\n\nread ahead at:\n%s", r, debug.Stack())}
		}
	}()
	p.evs, p.err = st.src.replay(ctx, after, sseReplayPage)
	if len(p.evs) > 0 {
		p.last = st.src.key(p.evs[len(p.evs)-1])
	}
	return p
}

// replayPage is one page of a replay read ahead, or the panic reading it.
type replayPage struct {
	evs   []*spec.Event
	last  int64 // the key of the page's last event
	err   error
	panic string
}

// write buffers one event and advances the cursor. Nothing is written once
// the stream's credential is revoked.
func (st *streamer) write(e *spec.Event) error {
	if st.revoked.Load() {
		return errRevoked
	}
	k := st.src.key(e)
	if err := st.w.appendEvent(k, e); err != nil {
		return err
	}
	st.last = k
	return nil
}

// appendSSE appends one SSE message for e with the given id to b.
func appendSSE(b []byte, id int64, e *spec.Event) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, "\nevent: "...)
	b = appendLine(b, string(e.Type))
	b = append(b, "\ndata: "...)
	b = e.AppendJSON(b)
	return append(b, "\n\n"...)
}

// appendLine appends s with any line breaks replaced, so it stays one field.
func appendLine(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\r\n") {
		return append(b, s...)
	}
	return append(b, strings.NewReplacer("\r", " ", "\n", " ").Replace(s)...)
}
