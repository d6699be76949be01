package spec

import (
	"context"
	"encoding/json"
	"io"
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
