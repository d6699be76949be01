package handlers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"homework/engine/spec"
	"homework/views"
)

// Pages of the downloaded log: iterations and transcript records read at a
// time. The log is written page by page as it is read, never held whole.
const (
	logIterationPage = 50
	logRecordPage    = 500
)

// apiRunLog handles GET /api/runs/{id}/log[?iteration=N]: the run's whole
// log (or one iteration's) as text/plain, each iteration under a header
// line with its number, start, duration and outcome, and its transcript as
// a terminal shows it (colours and cursor moves interpreted, not printed).
// It is streamed from the store a page at a time. Another user's run, or
// an iteration the run does not have, is 404.
func (s *Server) apiRunLog(c *fiber.Ctx) error {
	ctx := c.UserContext()
	u := userOf(c)
	run, err := s.db.FindRun(ctx, u.ID, c.Params("id"))
	if err != nil {
		return s.jsonError(c, err)
	}
	only, err := queryInt(c, "iteration", 0, 1, 1<<31)
	if err != nil {
		return s.jsonError(c, err)
	}
	cursor := ""
	if only > 0 {
		cursor = fmt.Sprintf("i%d", only-1)
		page, err := s.db.PageIterations(ctx, u.ID, run.ID, cursor, 1, false)
		if err != nil {
			return s.jsonError(c, err)
		}
		if len(page.Iterations) == 0 || page.Iterations[0].Iteration != int(only) {
			return s.jsonError(c, spec.Errorf(spec.ENOTFOUND, "Iteration %d not found.", only))
		}
	}
	name := "run-" + run.ID
	if only > 0 {
		name += fmt.Sprintf("-iteration-%d", only)
	}
	c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
	c.Set(fiber.HeaderContentDisposition, `inline; filename="`+name+`.log"`)
	c.Set(fiber.HeaderCacheControl, "no-store")
	// Everything the writer needs is copied out of c: the context is
	// recycled once this handler returns.
	lw := &logWriter{s: s, store: s.db, userID: u.ID, run: run, cursor: cursor, only: int(only), conn: c.Context().Conn()}
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			// fasthttp would recover it silently and drop the connection.
			if r := recover(); r != nil {
				s.log.Error("run log panicked", "run", lw.run.ID, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		lw.w = w
		if err := lw.write(s.ctx); err != nil && !errClientGone(err) {
			s.log.Warn("run log", "run", lw.run.ID, "err", err)
			fmt.Fprintf(w, "\n[error] the log could not be read to the end.\n")
			lw.flush()
		}
	})
	return nil
}

// logWriter writes a run's log, a page of the store at a time.
type logWriter struct {
	s      *Server
	store  spec.ReadStore
	userID int64
	run    *spec.Run
	cursor string // the iteration listing's start
	only   int    // > 0: only this iteration
	conn   net.Conn
	w      *bufio.Writer

	key string // the source of the last block written (its head is not repeated)
}

// errWrite marks a failed write to the client: it went away, or stopped
// reading for longer than the write timeout.
type errWrite struct{ err error }

func (e errWrite) Error() string { return "write the log: " + e.err.Error() }

func errClientGone(err error) bool {
	_, ok := err.(errWrite)
	return ok
}

// flush sends what is buffered; each send has the write timeout.
func (lw *logWriter) flush() error {
	if lw.conn != nil {
		lw.conn.SetWriteDeadline(time.Now().Add(lw.s.opts.WriteTimeout))
	}
	if err := lw.w.Flush(); err != nil {
		return errWrite{err}
	}
	return nil
}

func (lw *logWriter) write(ctx context.Context) error {
	r := lw.run
	objective, _, _ := strings.Cut(r.Objective, "\n")
	fmt.Fprintf(lw.w, "# Run %s: %s\n# %s · %d iterations\n", r.ID, visible(objective), r.Status, r.Metrics.Iterations)
	cursor := lw.cursor
	for {
		page, err := lw.store.PageIterations(ctx, lw.userID, r.ID, cursor, logIterationPage, false)
		if err != nil {
			return err
		}
		for _, it := range page.Iterations {
			if lw.only > 0 && it.Iteration != lw.only {
				return lw.flush()
			}
			if err := lw.iteration(ctx, it); err != nil {
				return err
			}
			if lw.only > 0 {
				return lw.flush()
			}
		}
		if page.NextCursor == "" || len(page.Iterations) == 0 {
			return lw.flush()
		}
		cursor = page.NextCursor
	}
}

// iteration writes one iteration: its header line, then its transcript,
// read and written a page at a time. A block of output that runs on past a
// page waits for the rest of its line in the next page.
func (lw *logWriter) iteration(ctx context.Context, it *spec.Iteration) error {
	fmt.Fprintf(lw.w, "\n=== Iteration %d · started %s · %s · %s ===\n", it.Iteration, logTime(it.StartedAt), logDuration(it), logOutcome(it))
	lw.key = ""
	var (
		after   int64
		held    []*spec.TranscriptLine // the open block carried into the next page
		info    spec.TranscriptInfo
		records int
	)
	for {
		t, err := lw.store.FindTranscript(ctx, lw.userID, lw.run.ID, it.Iteration, after, logRecordPage)
		if err != nil {
			return err
		}
		info = t.Info
		records += len(t.Lines)
		if len(t.Lines) > 0 {
			after = t.Lines[len(t.Lines)-1].Seq
		}
		blocks := groupBlocks(append(held, t.Lines...))
		held = nil
		if n := len(blocks); t.More && n > 0 && blocks[n-1].open() && len(blocks[n-1].recs) < 4*logRecordPage {
			held, blocks = blocks[n-1].recs, blocks[:n-1]
		}
		for _, b := range blocks {
			lw.block(b)
		}
		if err := lw.flush(); err != nil {
			return err
		}
		if !t.More {
			break
		}
	}
	if records == 0 {
		lw.w.WriteString("(no transcript)\n")
	}
	if info.DroppedBytes > 0 {
		fmt.Fprintf(lw.w, "[truncated] the %d-byte cap dropped %d bytes (%d records)\n", info.CapBytes, info.DroppedBytes, info.DroppedLines)
	}
	return nil
}

// block writes a log block: a head line (unless it goes on from the
// previous block's source), then its text as a terminal shows it; what
// is not an agent's output is indented under its head.
func (lw *logWriter) block(b *logBlock) {
	first := b.recs[0]
	key := first.Kind + "\x00" + first.Name + "\x00" + first.Role + "\x00" + fmt.Sprint(first.Attempt)
	if key != lw.key || first.Kind != spec.TranscriptOutput {
		fmt.Fprintf(lw.w, "[%s] %s\n", first.CreatedAt.UTC().Format("15:04:05"), visible(transcriptHeading(first)))
	}
	lw.key = key
	text := PlainText(b.text())
	if text == "" {
		return
	}
	if first.Kind == spec.TranscriptOutput {
		lw.w.WriteString(text)
		lw.w.WriteString("\n")
		return
	}
	for _, line := range strings.Split(text, "\n") {
		lw.w.WriteString("    ")
		lw.w.WriteString(line)
		lw.w.WriteString("\n")
	}
}

func logTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func logDuration(it *spec.Iteration) string {
	switch {
	case it.StartedAt.IsZero():
		return "not started"
	case it.EndedAt.IsZero():
		return "still running"
	}
	return "took " + views.Duration(it.EndedAt.Sub(it.StartedAt))
}

// logOutcome is how an iteration ended: its status and the gate's decision.
func logOutcome(it *spec.Iteration) string {
	out := it.Status
	if it.GateRecord != nil && it.GateRecord.Decision.Decision != "" {
		out += ", gate: " + it.GateRecord.Decision.Decision
	}
	return out
}
