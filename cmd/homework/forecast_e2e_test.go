package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// TestBudgetForecastThroughTheBinary: LLM runs on a priced model whose
// every iteration costs $0.35 (gpt-4o, 100k prompt and 10k completion
// tokens). With on_forecast stop a run stops before the iteration that
// would pass its limit, within it; the first iteration is forecast from
// the user's earlier runs; with ask the run waits and Continue with a
// raised budget resumes it; off keeps the old overshoot; the report and
// /api/stats show how it went.
func TestBudgetForecastThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := llmtest.New(t)
	var calls atomic.Int64
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if isSummarizer(r) {
			return llmtest.Reply{Content: "A narrative.", PromptTokens: 1, CompletionTokens: 1}, true
		}
		k := calls.Add(1)
		rep := llmtest.Tools(llmtest.ToolCall("report_status", map[string]any{"exit_signal": false, "confidence": "high",
			"progress_summary": fmt.Sprint("step ", k), "remaining_work": []string{fmt.Sprint("part ", k+1)}}))
		rep.PromptTokens, rep.CompletionTokens = 100_000, 10_000
		return rep, true
	})
	dbPath := filepath.Join(t.TempDir(), "forecast.db")
	s := llmServer(t, bin, dbPath, endpoint)
	token := userAndToken(t, bin, dbPath)
	create := func(budgets map[string]any) string {
		return s.createRun(t, token, map[string]any{"objective": "research in parts", "executor": "llm", "model": "gpt-4o", "budgets": budgets})
	}
	type forecastRun struct {
		runWithIterations
		Forecast *spec.Forecast `json:"forecast"`
		Report   *spec.Report   `json:"report"`
	}
	get := func(id string) forecastRun {
		t.Helper()
		var r forecastRun
		if code := s.api(t, token, "GET", "/api/runs/"+id+"?include=iterations", nil, &r); code != 200 {
			t.Fatalf("run: %d", code)
		}
		return r
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

	t.Run("stop: the iteration that would pass the limit is not started", func(t *testing.T) {
		id := create(map[string]any{"max_cost_usd": 1, "max_iterations": 10})
		waitRunStatus(t, s, token, id, "stopped")
		r := get(id)
		if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetCost || len(r.Iterations) != 2 || !near(r.Metrics.CostTotalUSD, 0.70) {
			t.Fatalf("run %s %+v after %d iterations, $%v; want stopped on budget_cost after 2, $0.70", r.Status, r.StopReason, len(r.Iterations), r.Metrics.CostTotalUSD)
		}
		for _, want := range []string{"spent $0.700", "forecast $0.350", "limit $1.00"} {
			if !strings.Contains(r.StopReason.Detail, want) {
				t.Errorf("stop detail %q lacks %q", r.StopReason.Detail, want)
			}
		}
		if fc := r.Report.Forecasts; fc == nil || len(fc.Iterations) != 1 || !near(fc.Iterations[0].ForecastUSD, 0.35) || !near(fc.MeanAbsErrorUSD, 0) {
			t.Errorf("report forecasts %+v; want iteration 2 forecast at $0.35, exactly right", fc)
		}
		if f := r.Forecast; f == nil || !near(f.NextIterationUSD, 0.35) || f.IterationsLeft == nil || *f.IterationsLeft != 0 {
			t.Errorf("the stopped run's forecast %+v; want $0.35 and 0 iterations left", f)
		}
	})

	t.Run("first iteration: forecast from the user's earlier runs", func(t *testing.T) {
		before := calls.Load()
		id := create(map[string]any{"max_cost_usd": 0.3})
		waitRunStatus(t, s, token, id, "stopped")
		r := get(id)
		if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetCost || len(r.Iterations) != 0 || r.Metrics.CostTotalUSD != 0 ||
			!strings.Contains(r.StopReason.Detail, "earlier runs") {
			t.Fatalf("run %s %+v after %d iterations; want stopped before the first", r.Status, r.StopReason, len(r.Iterations))
		}
		if calls.Load() != before {
			t.Errorf("the model was called %d times for a run that should not have started", calls.Load()-before)
		}
	})

	t.Run("ask: the run waits, Continue with a raised budget resumes it, cancel ends it", func(t *testing.T) {
		id := create(map[string]any{"max_cost_usd": 1, "max_iterations": 10, "on_forecast": "ask"})
		waitRunStatus(t, s, token, id, "waiting_on_user")
		r := get(id)
		if r.Waiting == nil || r.Waiting.Reason != spec.WaitBudgetForecast || len(r.Iterations) != 2 ||
			!strings.Contains(strings.Join(r.Waiting.Questions, " "), "forecast $0.350") {
			t.Fatalf("run %s %+v after %d iterations; want waiting on budget_forecast after 2", r.Status, r.Waiting, len(r.Iterations))
		}
		var e struct {
			Error spec.Error `json:"error"`
		}
		if code := s.api(t, token, "POST", "/api/runs/"+id+"/continue", map[string]any{"budgets": map[string]any{"max_cost_usd": 1.01}}, &e); code != 400 ||
			e.Error.Field != "budgets.max_cost_usd" || !strings.Contains(e.Error.Message, "at least $1.05") {
			t.Fatalf("continue with too small a raise: %d %+v", code, e.Error)
		}
		if code := s.api(t, token, "POST", "/api/runs/"+id+"/continue", map[string]any{"budgets": map[string]any{"max_cost_usd": 1.5}}, nil); code != 200 {
			t.Fatalf("continue: %d", code)
		}
		// $1.05 after the third, $1.40 after the fourth; a fifth would pass $1.50.
		s.follow(t, token, id, func(typ spec.EventType) bool { return typ == spec.EventRunContinued })
		pollUntil(t, "the run waiting again", func() bool {
			r = get(id)
			return r.Status == spec.StatusWaiting && len(r.Iterations) == 4
		})
		if !near(r.Metrics.CostTotalUSD, 1.40) {
			t.Fatalf("spent $%v, want $1.40", r.Metrics.CostTotalUSD)
		}
		if code := s.api(t, token, "POST", "/api/runs/"+id+"/cancel", nil, nil); code != 200 {
			t.Fatalf("cancel: %d", code)
		}
		waitRunStatus(t, s, token, id, "canceled")
	})

	t.Run("off: the budget stops the run once passed", func(t *testing.T) {
		id := create(map[string]any{"max_cost_usd": 1, "max_iterations": 10, "on_forecast": "off"})
		waitRunStatus(t, s, token, id, "stopped")
		r := get(id)
		if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetCost || len(r.Iterations) != 3 || r.Metrics.CostTotalUSD < 1.0499 {
			t.Fatalf("run %s %+v after %d iterations, $%v; want the old overshoot to $1.05", r.Status, r.StopReason, len(r.Iterations), r.Metrics.CostTotalUSD)
		}
	})

	t.Run("the report counts overshoot and stops by forecast", func(t *testing.T) {
		var st struct {
			spec.Figures
		}
		if code := s.api(t, token, "GET", "/api/stats", nil, &st); code != 200 {
			t.Fatalf("stats: %d", code)
		}
		o := st.BudgetOvershoot
		if st.StoppedByForecast != 2 || o.Runs != 1 || o.CostUSD < 0.0499 || o.CostUSD > 0.051 {
			t.Fatalf("stopped by forecast %d, overshoot %+v; want 2, and one run $0.05 over", st.StoppedByForecast, o)
		}
	})
}
