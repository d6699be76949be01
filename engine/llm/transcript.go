package llm

import (
	"context"
	"encoding/json"

	"homework/engine/spec"
)

// transcriptRole names who acted in a transcript line: the role, and the
// branch for a delegated sub-task.
func (sc *scope) transcriptRole() string {
	if sc.branch != "" {
		return sc.role + " " + sc.branch
	}
	return sc.role
}

// transcribeRepair records the outcome of a repair pass: the repaired
// arguments, or why they could not be repaired.
func transcribeRepair(ctx context.Context, h spec.Host, sc *scope, tool string, args json.RawMessage, verr error) {
	en := spec.TranscriptEntry{Kind: spec.TranscriptRepair, Name: tool, Role: sc.transcriptRole(), Text: string(args)}
	if verr != nil {
		en.Text = "not repaired: " + verr.Error()
	}
	spec.Transcribe(ctx, h, en)
}
