package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"homework/db/pg/pgtest"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// TestLLMRunCompletesOnPostgres runs an LLM run against a scripted endpoint
// on the PostgreSQL store: the executor's workspace reads and writes go
// through that store, not SQLite's.
func TestLLMRunCompletesOnPostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	env := func(k string) string {
		if k == "HOMEWORK_DB" {
			return url
		}
		return ""
	}
	ctx := context.Background()
	do := func(stdin string, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, env, strings.NewReader(stdin), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	do("", "migrate")
	do("correct horse battery\n", "user", "add", "--email", "ann@example.com")
	token := strings.TrimSpace(do("", "token", "create", "--email", "ann@example.com", "--name", "ci"))

	endpoint := llmtest.New(t,
		llmtest.Tools(llmtest.ToolCall("workspace_write", map[string]any{"path": "report.md", "content": "# Report\n\nDone on PostgreSQL."}),
			llmtest.ToolCall("append_scratchpad", map[string]any{"text": "Wrote report.md."})),
		llmtest.Tools(llmtest.ToolCall("report_status", map[string]any{"exit_signal": true, "progress_summary": "Wrote the report.",
			"confidence": "high", "completion_evidence": []string{"report.md is written"}})),
	)
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if !strings.HasPrefix(r.System(), "You write the narrative summary") {
			return llmtest.Reply{}, false
		}
		return llmtest.Text("The run wrote report.md."), true
	})
	m, base := startMain(t, func(c *Config) {
		c.DBPath, c.LLMBaseURL, c.LLMAPIKey, c.LLMModel = url, endpoint.URL, "test", "gpt-4o-mini"
	})
	s := &server{base: base, logs: &bytes.Buffer{}, mu: &sync.Mutex{}}

	var created struct {
		RunID string `json:"run_id"`
	}
	if code := s.api(t, token, "POST", "/api/runs", map[string]any{"objective": "Write a report on PostgreSQL", "executor": "llm"}, &created); code != 201 || created.RunID == "" {
		t.Fatalf("create run: %d", code)
	}
	waitRunStatus(t, s, token, created.RunID, spec.StatusCompleted)

	r, err := m.Store.FindRunByID(ctx, created.RunID)
	if err != nil {
		t.Fatal(err)
	}
	// The workspace id is set only by StartRun, in the transaction that
	// starts the run: the engine found the executor's RunStarter.
	if r.Status != spec.StatusCompleted || r.WorkspaceDocID == "" {
		t.Errorf("run status %s, workspace %q", r.Status, r.WorkspaceDocID)
	}
	if n := endpoint.Remaining(); n != 0 {
		t.Errorf("%d scripted replies unused", n)
	}
	for _, p := range []string{"", "scratchpad.md", "report.md"} {
		if _, err := m.Store.FindRunDocumentByPath(ctx, r.UserID, r.ID, p); err != nil {
			t.Errorf("document %q: %v", p, err)
		}
	}
}
