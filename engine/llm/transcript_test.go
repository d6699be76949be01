package llm_test

import (
	"strings"
	"testing"

	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

func TestLLMTranscriptHoldsMessagesToolCallsRepairsAndRetries(t *testing.T) {
	h := newE2E(t, e2eOptions{},
		llmtest.Reply{Content: "Let me write the notes.", ToolCalls: []llmtest.Call{{Name: "workspace_write", Args: `{"path":"notes/x.md","body":"oops"}`}}},
		llmtest.Text("```json\n{\"path\":\"notes/x.md\",\"content\":\"# Fixed\"}\n```"),
		llmtest.Error(503, "overloaded"),
		status(true, "Wrote notes/x.md.", "notes/x.md"),
	)
	narrate(h.srv, "A narrative.")
	run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusCompleted)

	tr, err := h.db.FindTranscript(h.ctx, h.user.ID, run.ID, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range tr.Lines {
		got = append(got, l.Kind+" "+l.Name)
	}
	t.Logf("transcript: %q", got)
	find := func(kind, name, text string) {
		t.Helper()
		for _, l := range tr.Lines {
			if l.Kind == kind && (name == "*" || l.Name == name) && strings.Contains(l.Text, text) {
				return
			}
		}
		t.Errorf("no %s %s line containing %q in %q", kind, name, text, got)
	}
	find(spec.TranscriptAssistant, "", "Let me write the notes.")
	find(spec.TranscriptToolCall, "workspace_write", `"body":"oops"`)
	find(spec.TranscriptRepair, "workspace_write", `"content":"# Fixed"`)
	find(spec.TranscriptToolResult, "workspace_write", "")
	find(spec.TranscriptModelCall, "*", "failed")
	find(spec.TranscriptToolCall, "report_status", "exit_signal")
}
