package spec

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Transcript line kinds.
const (
	TranscriptAssistant  = "assistant"   // a model message's text
	TranscriptToolCall   = "tool_call"   // a tool call with its full arguments
	TranscriptToolResult = "tool_result" // what the tool returned to the model
	TranscriptRepair     = "repair"      // repaired (or unrepairable) tool arguments
	TranscriptModelCall  = "model_call"  // one model call; a failed one is a retry or an error
	TranscriptPrompt     = "prompt"      // the prompt a command agent was given
	TranscriptOutput     = "output"      // a chunk of a command agent's stdout and stderr
	TranscriptCheck      = "check"       // an objective check's outcome and output
	TranscriptNote       = "note"        // anything else worth reading
)

// TranscriptEntry is one line an executor adds to its iteration's
// transcript.
type TranscriptEntry struct {
	Kind string
	// Name is the tool or check the line is about.
	Name string
	// Role is the model role (planner, executor, repair) or a branch.
	Role string
	// Text is the line's readable content.
	Text string
	// Data holds structured details (a tool call's arguments, ok flags).
	Data json.RawMessage
}

// Transcriber is implemented by a Host that keeps each iteration's
// transcript. Executors reach it through Transcribe and TranscriptWriter so
// that a Host without one (a test's) simply keeps nothing.
type Transcriber interface {
	// Transcribe adds e to the iteration's transcript. It never blocks the
	// iteration for long and never fails it: a transcript is best effort.
	Transcribe(ctx context.Context, e TranscriptEntry)
	// TranscriptWriter returns a writer for streamed output (a command
	// agent's stdout and stderr), batched into lines of kind
	// TranscriptOutput. Its writes never fail.
	TranscriptWriter(stream string) io.Writer
}

// Transcribe adds e to h's transcript when h keeps one.
func Transcribe(ctx context.Context, h Host, e TranscriptEntry) {
	if t, ok := h.(Transcriber); ok {
		t.Transcribe(ctx, e)
	}
}

// TranscriptWriter returns h's transcript writer for stream, or io.Discard
// when h keeps no transcript.
func TranscriptWriter(h Host, stream string) io.Writer {
	if t, ok := h.(Transcriber); ok {
		return t.TranscriptWriter(stream)
	}
	return io.Discard
}

// TranscriptJSON marshals v for TranscriptEntry.Data; nil when it cannot.
func TranscriptJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// TranscriptLine is one line of an iteration's transcript: a model message,
// a tool call or its result, a repair, a model call (retries show as failed
// calls), the prompt a command agent was given or a chunk of its output.
type TranscriptLine struct {
	RunID     string          `json:"-"`
	Iteration int             `json:"iteration"`
	Seq       int64           `json:"seq"`
	Attempt   int             `json:"attempt"`
	Kind      string          `json:"kind"`
	Name      string          `json:"name,omitempty"`
	Role      string          `json:"role,omitempty"`
	Text      string          `json:"text"`
	Data      json.RawMessage `json:"data,omitempty"`
	CreatedAt time.Time       `json:"at"`
}

// TranscriptInfo is an iteration transcript's size and what its cap dropped.
type TranscriptInfo struct {
	RunID        string `json:"-"`
	Iteration    int    `json:"iteration"`
	Lines        int64  `json:"lines"`
	Bytes        int64  `json:"bytes"`
	DroppedBytes int64  `json:"dropped_bytes"`
	DroppedLines int64  `json:"dropped_lines"`
	CapBytes     int64  `json:"cap_bytes"`
}

// Transcript is one page of an iteration's transcript.
type Transcript struct {
	Info  TranscriptInfo
	Lines []*TranscriptLine
	// More is set when lines after the page's last are left.
	More bool
}

// IterationPage is one page of a run's iterations.
type IterationPage struct {
	Iterations []*Iteration
	// Transcripts holds the page's iterations' transcript info, by
	// iteration; an iteration without a transcript has no entry.
	Transcripts map[int]*TranscriptInfo
	// NextCursor continues the listing; empty on the last page.
	NextCursor string
}

// ActionEventTypes are the events the run page's timeline shows beside the
// iterations.
var ActionEventTypes = []EventType{EventIterationStarted, EventRunWaitingOnUser, EventUserResponse, EventMessageQueued, EventRunStopped,
	EventRunStalled, EventRunContinued, EventRunCanceled, EventRunRecovered, EventRunCompleted, EventRunFailed}

// CapTranscript applies an iteration's transcript cap to lines about to be
// appended after info (the iteration's state so far): it keeps at most
// info.CapBytes of text and data for the iteration in all attempts
// together. The line that reaches the cap is cut at a rune boundary; every
// line after a cut is dropped whole (a fragment after a gap would mislead).
// What is cut is counted in info. The kept lines get their Seq (from next),
// RunID, Iteration, Attempt (1 when unset) and CreatedAt; info's Bytes and
// Lines grow by them.
func CapTranscript(info *TranscriptInfo, lines []*TranscriptLine, next int64, now time.Time) []*TranscriptLine {
	var kept []*TranscriptLine
	for _, l := range lines {
		size := int64(len(l.Text) + len(l.Data))
		room := info.CapBytes - info.Bytes
		if room < size || info.DroppedBytes > 0 {
			if room <= int64(len(l.Data)) || info.DroppedBytes > 0 {
				info.DroppedBytes += size
				info.DroppedLines++
				continue
			}
			cut := cutRunes(l.Text, int(room)-len(l.Data))
			info.DroppedBytes += int64(len(l.Text) - len(cut))
			l.Text = cut
			size = int64(len(l.Text) + len(l.Data))
		}
		l.RunID, l.Iteration, l.Seq, l.CreatedAt = info.RunID, info.Iteration, next, now
		if l.Attempt == 0 {
			l.Attempt = 1
		}
		next++
		info.Bytes += size
		info.Lines++
		kept = append(kept, l)
	}
	return kept
}

// cutRunes returns the longest prefix of s of at most n bytes that ends on
// a rune boundary.
func cutRunes(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// IterationCursor is the cursor of an iteration page that continues after
// (or, newest first, before) iteration n.
func IterationCursor(n int) string { return "i" + strconv.Itoa(n) }

// ParseIterationCursor reads an IterationCursor; anything else is EINVALID
// on field cursor.
func ParseIterationCursor(s string) (int, error) {
	rest, ok := strings.CutPrefix(s, "i")
	n, err := strconv.Atoi(rest)
	if !ok || err != nil || n < 0 || IterationCursor(n) != s {
		return 0, FieldError("cursor", "Invalid cursor.")
	}
	return n, nil
}
