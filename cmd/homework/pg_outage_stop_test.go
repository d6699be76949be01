package main

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"homework/db/pg/pgtest"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// TestAnIterationTheDatabaseFailedNamesTheStopOnPostgres: the database is cut
// off (a proxy between the server and PostgreSQL) while an LLM iteration
// works, so its workspace write fails; the iteration's outcome is written
// once the database answers again, as failed on the database, and the run,
// whose max_iterations of 1 ran out at the same time, stops as
// store_unavailable with the database's error, not as max_iterations.
func TestAnIterationTheDatabaseFailedNamesTheStopOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	dbURL := pgtest.NewDatabase(t)
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	proxy, via := pgtest.NewProxy(t, dbURL)
	token := userAndToken(t, bin, dbURL)

	first, release, second := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var planner atomic.Int32
	endpoint := llmtest.New(t)
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if isSummarizer(r) {
			return llmtest.Text("The database went away during the run."), true
		}
		switch planner.Add(1) {
		case 1:
			// Held until the database is cut off: the write it asks for
			// then fails.
			close(first)
			<-release
			return llmtest.Tools(llmtest.ToolCall("workspace_write", map[string]any{"path": "report.md", "content": "# Report"})), true
		case 2:
			close(second)
		}
		return llmtest.Tools(llmtest.ToolCall("report_status", map[string]any{"exit_signal": false, "progress_summary": "The write failed.",
			"confidence": "low", "remaining_work": []string{"write report.md"}})), true
	})
	s := llmServer(t, bin, via, endpoint)
	runID := s.createRun(t, token, map[string]any{"objective": "write a report while the database goes away", "executor": "llm",
		"budgets": map[string]any{"max_iterations": 1}})
	waitClosed(t, first, "the model's first call")
	proxy.Cut()
	close(release)
	waitClosed(t, second, "the model's call after the failed write")
	proxy.Mend()
	waitRunStatus(t, s, token, runID, spec.StatusStopped)

	rec := s.record(t, token, runID, spec.EventRunStopped)
	var run struct {
		StopReason *spec.StopReason `json:"stop_reason"`
	}
	if err := json.Unmarshal(rec.Run, &run); err != nil {
		t.Fatal(err)
	}
	if run.StopReason == nil || run.StopReason.Type != spec.StopStoreUnavailable {
		t.Fatalf("stop reason %+v, want store_unavailable\n%s", run.StopReason, s.log())
	}
	for _, want := range []string{"could not reach the database", "iteration budget (1 of 1)"} {
		if !strings.Contains(run.StopReason.Detail, want) {
			t.Errorf("the stop reason's detail lacks %q: %q", want, run.StopReason.Detail)
		}
	}
	if len(rec.Iterations) != 1 || rec.Iterations[0].Status != spec.IterFailed {
		t.Fatalf("iterations: %+v", rec.Iterations)
	}
}

// waitClosed waits for c to be closed, failing t after a minute (a guard
// against a hung server, not a measurement).
func waitClosed(t testing.TB, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}
