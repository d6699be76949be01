package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// endedRun is what these tests read of a run that ended.
type endedRun struct {
	Status      string           `json:"status"`
	StopReason  *spec.StopReason `json:"stop_reason"`
	StartedAt   time.Time        `json:"started_at"`
	CompletedAt *time.Time       `json:"completed_at"`
	Metrics     spec.Metrics     `json:"metrics"`
	Report      *spec.Report     `json:"report"`
}

func (s *server) ended(t *testing.T, token, id string) endedRun {
	t.Helper()
	var r endedRun
	if code := s.api(t, token, "GET", "/api/runs/"+id, nil, &r); code != 200 {
		t.Fatalf("run: %d", code)
	}
	return r
}

// TestAHangingModelUnderMaxRunningMS: a model endpoint that never answers
// does not keep a run "running" past its running-time budget: the
// iteration is ended where it stands when the budget runs out, the run
// stops as budget_time, and no summary is asked of the hanging endpoint.
func TestAHangingModelUnderMaxRunningMS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	endpoint := llmtest.New(t)
	endpoint.Route(func(llmtest.Request) (llmtest.Reply, bool) { return llmtest.Reply{Wait: hang}, true })
	dbPath := filepath.Join(t.TempDir(), "hang.db")
	s := llmServer(t, bin, dbPath, endpoint)
	token := userAndToken(t, bin, dbPath)
	const budget = 2000
	id := s.createRun(t, token, map[string]any{"objective": "write a report while the endpoint hangs", "executor": "llm",
		"budgets": map[string]any{"max_running_ms": budget}})
	s.openRunStream(t, token, id, 0).until(t, s, "run_stopped", isType(spec.EventRunStopped))
	r := s.ended(t, token, id)
	if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetTime {
		t.Fatalf("stop reason %+v, want budget_time", r.StopReason)
	}
	// The recorded running time ends where the budget did, not at the
	// iteration's timeout (10 min) or later.
	if r.Metrics.RunningMS < budget || r.Metrics.RunningMS > 3*budget {
		t.Fatalf("running_ms %d for a budget of %d", r.Metrics.RunningMS, budget)
	}
	for _, req := range endpoint.Requests() {
		if isSummarizer(req) {
			t.Fatal("the summarizer was asked after the running-time budget ran out")
		}
	}
}

// TestAHangingAgentUnderMaxRunningMS: the same for a command agent that
// never ends: it is killed when the budget runs out.
func TestAHangingAgentUnderMaxRunningMS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "hang-agent.db")
	s := startServer(t, bin, dbPath, "--allow-command-runs", root)
	token := adminToken(t, bin, dbPath)
	const budget = 2000
	id := s.createRun(t, token, map[string]any{"objective": "an agent that never ends", "executor": "command",
		"agent":   map[string]any{"workdir": wd, "argv": []string{"sleep", "600"}},
		"budgets": map[string]any{"max_running_ms": budget}})
	s.openRunStream(t, token, id, 0).until(t, s, "run_stopped", isType(spec.EventRunStopped))
	r := s.ended(t, token, id)
	if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetTime {
		t.Fatalf("stop reason %+v, want budget_time", r.StopReason)
	}
	if r.Metrics.RunningMS < budget || r.Metrics.RunningMS > 3*budget {
		t.Fatalf("running_ms %d for a budget of %d", r.Metrics.RunningMS, budget)
	}
}

// TestAHangingSummarizerIsCutAtTheIterationsDeadline: the summary is one of
// the iteration's model calls: a summarizer that never answers is cut at
// the iteration's deadline (3 s here), not after its own 60 s, and the
// run completes with the summary marked missing.
func TestAHangingSummarizerIsCutAtTheIterationsDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	endpoint := llmtest.New(t,
		llmtest.Tools(llmtest.ToolCall("report_status", map[string]any{"exit_signal": true, "progress_summary": "Done.",
			"confidence": "high", "completion_evidence": []string{"nothing to do"}})),
	)
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if !isSummarizer(r) {
			return llmtest.Reply{}, false
		}
		return llmtest.Reply{Wait: hang}, true
	})
	dbPath := filepath.Join(t.TempDir(), "hang-summary.db")
	s := llmServer(t, bin, dbPath, endpoint)
	token := userAndToken(t, bin, dbPath)
	id := s.createRun(t, token, map[string]any{"objective": "finish at once", "executor": "llm",
		"budgets": map[string]any{"iteration_timeout_ms": 3000}})
	waitRunStatus(t, s, token, id, "completed")
	r := s.ended(t, token, id)
	if r.Report == nil || r.Report.Summary != "" || !strings.Contains(r.Report.NarrativeError, "deadline") {
		t.Fatalf("report %+v: want no narrative and an error naming the deadline", r.Report)
	}
	// A hang guard on the record, not a measurement: 60 s would be the
	// summarizer's own timeout.
	if d := r.CompletedAt.Sub(r.StartedAt); d > 30*time.Second {
		t.Fatalf("the run took %s to complete after a hanging summarizer", d)
	}
}

// TestAnOutageIsNamedOverTheBudgetItExhausted: an endpoint answering 503 to
// every call under max_iterations 2 stops the run as model_unavailable with
// the status and message, saying the budget ran out at the same time; not
// as max_iterations, which would hide the outage.
func TestAnOutageIsNamedOverTheBudgetItExhausted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := llmtest.New(t)
	endpoint.Route(func(llmtest.Request) (llmtest.Reply, bool) {
		return llmtest.Error(503, "upstream is overloaded"), true
	})
	dbPath := filepath.Join(t.TempDir(), "outage.db")
	s := llmServer(t, bin, dbPath, endpoint)
	token := userAndToken(t, bin, dbPath)
	id := s.createRun(t, token, map[string]any{"objective": "write a report while the endpoint is down", "executor": "llm",
		"budgets": map[string]any{"max_iterations": 2}})
	s.openRunStream(t, token, id, 0).until(t, s, "run_stopped", isType(spec.EventRunStopped))
	r := s.ended(t, token, id)
	if r.StopReason == nil || r.StopReason.Type != spec.StopModelUnavailable {
		b, _ := json.Marshal(r.StopReason)
		t.Fatalf("stop reason %s, want model_unavailable", b)
	}
	if d := r.StopReason.Detail; !strings.Contains(d, "503") || !strings.Contains(d, "upstream is overloaded") || !strings.Contains(d, "iteration budget") {
		t.Fatalf("the stop reason does not name the outage, its last error and the budget: %q", d)
	}
}
