package handlers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"homework/engine/spec"
	textutil "homework/engine/text"

	"github.com/gofiber/fiber/v2"
)

// transcriptRoutes adds the transcript and iteration paging endpoints.
func (s *Server) transcriptRoutes(api fiber.Router) {
	api.Get("/runs/:id/iterations", s.apiListIterations)
	api.Get("/runs/:id/iterations/:n/transcript", s.apiTranscript)
	api.Get("/runs/:id/log", s.apiRunLog)
}

// IterationPageJSON is one page of GET /api/runs/{id}/iterations.
type IterationPageJSON struct {
	Iterations []IterationJSON `json:"iterations"`
	NextCursor *string         `json:"next_cursor"`
}

// apiListIterations handles GET /api/runs/{id}/iterations?cursor=&limit=&order=:
// the run's iterations oldest first (order=desc: newest first), one page at
// a time, each with its transcript's size.
func (s *Server) apiListIterations(c *fiber.Ctx) error {
	limit, err := queryInt(c, "limit", 50, 1, 200)
	if err != nil {
		return s.jsonError(c, err)
	}
	desc := false
	switch c.Query("order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return s.jsonError(c, spec.FieldError("order", "order must be asc or desc."))
	}
	page, err := s.db.PageIterations(c.UserContext(), userOf(c).ID, c.Params("id"), c.Query("cursor"), int(limit), desc)
	if err != nil {
		return s.jsonError(c, err)
	}
	out := IterationPageJSON{Iterations: make([]IterationJSON, 0, len(page.Iterations))}
	for _, it := range page.Iterations {
		j := iterationJSON(it)
		if t := page.Transcripts[it.Iteration]; t != nil {
			j.Transcript = t
		} else {
			j.Transcript = &spec.TranscriptInfo{Iteration: it.Iteration}
		}
		out.Iterations = append(out.Iterations, j)
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	return c.JSON(out)
}

// transcriptQuery parses the iteration number and the after cursor of a
// transcript request.
func transcriptQuery(c *fiber.Ctx) (int, int64, error) {
	n, err := strconv.Atoi(c.Params("n"))
	if err != nil || n < 1 {
		return 0, 0, spec.FieldError("iteration", "The iteration must be a number from 1.")
	}
	after, err := queryInt(c, "after", 0, 0, 1<<62)
	if err != nil {
		return 0, 0, err
	}
	return n, after, nil
}

// apiTranscript handles GET /api/runs/{id}/iterations/{n}/transcript?after=SEQ:
// the iteration's transcript as JSON lines (one object a line; a final
// {"kind":"truncated"} line says what the cap dropped), or as readable text
// with Accept: text/plain. Another user's run is 404.
func (s *Server) apiTranscript(c *fiber.Ctx) error {
	n, after, err := transcriptQuery(c)
	if err != nil {
		return s.jsonError(c, err)
	}
	t, err := s.db.FindTranscript(c.UserContext(), userOf(c).ID, c.Params("id"), n, after, 0)
	if err != nil {
		return s.jsonError(c, err)
	}
	c.Set("X-Transcript-Lines", strconv.FormatInt(t.Info.Lines, 10))
	c.Set("X-Transcript-Dropped-Bytes", strconv.FormatInt(t.Info.DroppedBytes, 10))
	c.Set("X-Transcript-Cap-Bytes", strconv.FormatInt(t.Info.CapBytes, 10))
	if wantsText(c) {
		c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
		return c.Send(transcriptText(c.Params("id"), t))
	}
	c.Set(fiber.HeaderContentType, "application/x-ndjson")
	return c.Send(transcriptJSONLines(t))
}

// wantsText reports whether the client asked for text/plain over JSON.
func wantsText(c *fiber.Ctx) bool {
	if c.Query("format") == "text" {
		return true
	}
	accept := c.Get(fiber.HeaderAccept)
	return strings.Contains(accept, "text/plain") && !strings.Contains(accept, "json")
}

// transcriptJSONLines renders t as JSON lines.
func transcriptJSONLines(t *spec.Transcript) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, l := range t.Lines {
		enc.Encode(l)
	}
	if t.Info.DroppedBytes > 0 && !t.More {
		enc.Encode(map[string]any{"kind": "truncated", "iteration": t.Info.Iteration, "dropped_bytes": t.Info.DroppedBytes,
			"dropped_lines": t.Info.DroppedLines, "cap_bytes": t.Info.CapBytes})
	}
	return buf.Bytes()
}

// transcriptText renders t as readable text: a header per line, its text
// indented below.
func transcriptText(runID string, t *spec.Transcript) []byte {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	fmt.Fprintf(w, "# run %s, iteration %d: %d lines, %d bytes\n", runID, t.Info.Iteration, t.Info.Lines, t.Info.Bytes)
	for _, l := range t.Lines {
		fmt.Fprintf(w, "\n[%s] %s\n", l.CreatedAt.Format("15:04:05"), textutil.VisibleControls(transcriptHeading(l)))
		// An agent's raw bytes are shown, never passed through: a NUL or
		// a terminal control in its output reaches the reader as an escape.
		body := textutil.VisibleControls(l.Text)
		if l.Kind == "output" {
			w.WriteString(body)
			if !strings.HasSuffix(body, "\n") {
				w.WriteString("\n")
			}
			continue
		}
		for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
			w.WriteString("    " + line + "\n")
		}
	}
	if t.Info.DroppedBytes > 0 {
		fmt.Fprintf(w, "\n[truncated] the %d-byte cap dropped %d bytes (%d lines)\n", t.Info.CapBytes, t.Info.DroppedBytes, t.Info.DroppedLines)
	}
	w.Flush()
	return buf.Bytes()
}

// transcriptHeading is a line's one-line title: its kind, who and what.
func transcriptHeading(l *spec.TranscriptLine) string {
	parts := []string{l.Kind}
	if l.Name != "" {
		parts = append(parts, l.Name)
	}
	if l.Role != "" {
		parts = append(parts, "("+l.Role+")")
	}
	if l.Attempt > 1 {
		parts = append(parts, fmt.Sprintf("[attempt %d]", l.Attempt))
	}
	return strings.Join(parts, " ")
}
