package handlers

import (
	"encoding/csv"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// createRunWith creates a scripted run with extra config fields.
func (ts *testServer) createRunWith(t testing.TB, u *testUser, extra map[string]any, steps ...scripted.Step) string {
	t.Helper()
	body := map[string]any{"objective": "stats objective", "executor": "script", "script": script(steps...)}
	for k, v := range extra {
		body[k] = v
	}
	var out struct {
		RunID string `json:"run_id"`
	}
	ts.expect(t, u, "POST", "/api/runs", body, http.StatusCreated, &out)
	return out.RunID
}

func llmCall(cost float64) []spec.LLMCall {
	return []spec.LLMCall{{Role: "executor", Model: "m", PromptTokens: 100, CompletionTokens: 50, CostUSD: cost, Priced: true}}
}

// knownRuns makes the four runs of known outcome the report is checked
// against, and returns their ids: completed, false claims then a budget
// stop, waiting then canceled, stopped for no progress.
func knownRuns(t *testing.T, ts *testServer, u *testUser) (completed, falseClaims, canceled, noProgress string) {
	t.Helper()
	work := scripted.Step{Summary: "work", Tools: 2, LLM: llmCall(0.5)}
	done := doneStep("done")
	done.Tools, done.LLM = 2, llmCall(0.5)
	completed = ts.createRunWith(t, u, map[string]any{"tags": []string{"a"}}, work, done)

	claim := doneStep("claims done")
	claim.LLM, claim.Output = llmCall(0.25), "nothing here"
	falseClaims = ts.createRunWith(t, u, map[string]any{"tags": []string{"a", "b"},
		"budgets":    map[string]any{"max_iterations": 3},
		"completion": map[string]any{"checks": []map[string]any{{"type": "content_pattern", "name": "verdict", "pattern": "VERDICT", "target": "output"}}},
	}, claim)

	canceled = ts.createRunWith(t, u, map[string]any{"tags": []string{"b"}}, askStep("which one?"))

	stall := scripted.Step{Summary: "same again", Progress: "same", Tools: 1}
	noProgress = ts.createRunWith(t, u, nil, stall)

	ts.waitStatus(t, u, completed, "completed")
	ts.waitStatus(t, u, falseClaims, "stopped")
	ts.waitStatus(t, u, canceled, "waiting_on_user")
	ts.expect(t, u, "POST", "/api/runs/"+canceled+"/cancel", nil, http.StatusOK, nil)
	ts.waitStatus(t, u, canceled, "canceled")
	ts.waitStatus(t, u, noProgress, "stopped")
	return
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestStatsFigures(t *testing.T) {
	if onBothStores(t, TestStatsFigures) {
		return
	}
	ts := newTestServer(t, nil)
	alice, bob := ts.user(t, "alice@example.com"), ts.user(t, "bob@example.com")
	knownRuns(t, ts, alice)
	// Bob's run must never count in Alice's figures.
	bobRun := ts.createRunWith(t, bob, map[string]any{"tags": []string{"a"}}, doneStep("bob done"))
	ts.waitStatus(t, bob, bobRun, "completed")

	t.Run("the figures match the runs' known outcomes", func(t *testing.T) {
		var s StatsJSON
		ts.expect(t, alice, "GET", "/api/stats", nil, http.StatusOK, &s)
		if s.Runs != 4 || s.Ended != 4 || s.Completed != 1 {
			t.Fatalf("runs/ended/completed = %d/%d/%d, want 4/4/1", s.Runs, s.Ended, s.Completed)
		}
		if !near(s.CompletionRate, 0.25) {
			t.Errorf("completion_rate = %g, want 0.25", s.CompletionRate)
		}
		if s.FalseCompletionsBlocked != 3 || s.CompletionClaims != 4 || !near(s.FalseCompletionRate, 0.75) {
			t.Errorf("false completions %d, claims %d, rate %g; want 3, 4, 0.75", s.FalseCompletionsBlocked, s.CompletionClaims, s.FalseCompletionRate)
		}
		if s.Escalated != 1 || !near(s.EscalationRate, 0.25) {
			t.Errorf("escalated %d rate %g, want 1, 0.25", s.Escalated, s.EscalationRate)
		}
		// Iterations of the ended runs: 2, 3, 1, 3 → sorted 1 2 3 3.
		if s.Iterations.P50 != 2 || s.Iterations.P95 != 3 {
			t.Errorf("iterations p50/p95 = %g/%g, want 2/3", s.Iterations.P50, s.Iterations.P95)
		}
		if !near(s.CostUSD.Total, 1.75) || !near(s.CostUSD.PerCompletedRun, 1.75) {
			t.Errorf("cost = %+v, want total 1.75 and 1.75 per completed run", s.CostUSD)
		}
		if s.TokensTotal != 5*150 {
			t.Errorf("tokens_total = %d, want 750", s.TokensTotal)
		}
		if s.ToolCalls.Total != 7 || !near(s.ToolCalls.PerRun, 1.75) {
			t.Errorf("tool_calls = %+v, want 7 and 1.75 per run", s.ToolCalls)
		}
		want := map[string]int{"completed": 1, "max_iterations": 1, "canceled": 1, "no_progress": 1}
		if len(s.StopReasons) != len(want) {
			t.Errorf("stop_reasons = %v, want %v", s.StopReasons, want)
		}
		for k, v := range want {
			if s.StopReasons[k] != v {
				t.Errorf("stop_reasons = %v, want %v", s.StopReasons, want)
			}
		}
		if s.RunningMS.P95 < s.RunningMS.P50 || s.PercentileMethod == "" {
			t.Errorf("running_ms = %+v, method %q", s.RunningMS, s.PercentileMethod)
		}
	})

	t.Run("group_by tag puts a run in each of its tags' groups", func(t *testing.T) {
		var s StatsJSON
		ts.expect(t, alice, "GET", "/api/stats?group_by=tag", nil, http.StatusOK, &s)
		if len(s.Groups) != 3 {
			t.Fatalf("groups = %+v, want '', a, b", s.Groups)
		}
		untagged, a, b := s.Groups[0], s.Groups[1], s.Groups[2]
		if untagged.Key != "" || untagged.Runs != 1 || untagged.StopReasons["no_progress"] != 1 {
			t.Errorf("untagged group = %+v", untagged)
		}
		if a.Key != "a" || a.Runs != 2 || a.Completed != 1 || !near(a.CompletionRate, 0.5) || a.FalseCompletionsBlocked != 3 {
			t.Errorf("group a = %+v", a)
		}
		if b.Key != "b" || b.Runs != 2 || b.Escalated != 1 || !near(b.EscalationRate, 0.5) || b.Completed != 0 {
			t.Errorf("group b = %+v", b)
		}
	})

	t.Run("group_by executor, mode and week give one group here", func(t *testing.T) {
		for _, g := range []string{"executor", "mode", "week", "model"} {
			var s StatsJSON
			ts.expect(t, alice, "GET", "/api/stats?group_by="+g, nil, http.StatusOK, &s)
			if len(s.Groups) != 1 || s.Groups[0].Runs != 4 {
				t.Fatalf("group_by=%s: %+v", g, s.Groups)
			}
		}
	})

	t.Run("filters narrow the runs", func(t *testing.T) {
		var s StatsJSON
		ts.expect(t, alice, "GET", "/api/stats?tag=b&executor=script&mode=auto", nil, http.StatusOK, &s)
		if s.Runs != 2 || s.Filters["tag"] != "b" {
			t.Fatalf("tag=b: runs %d filters %v", s.Runs, s.Filters)
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		ts.expect(t, alice, "GET", "/api/stats?since="+future, nil, http.StatusOK, &s)
		if s.Runs != 0 || s.CompletionRate != 0 || s.EscalationRate != 0 || s.FalseCompletionRate != 0 || s.Iterations.P50 != 0 {
			t.Fatalf("empty window: %+v", s)
		}
		ts.expect(t, alice, "GET", "/api/stats?until="+future+"&model=other-model", nil, http.StatusOK, &s)
		if s.Runs != 0 {
			t.Fatalf("model filter: %d runs", s.Runs)
		}
	})

	t.Run("another user's runs never count", func(t *testing.T) {
		var s StatsJSON
		ts.expect(t, bob, "GET", "/api/stats?group_by=tag", nil, http.StatusOK, &s)
		if s.Runs != 1 || s.Completed != 1 || s.FalseCompletionsBlocked != 0 || len(s.Groups) != 1 || s.Groups[0].Key != "a" {
			t.Fatalf("bob's figures = %+v", s)
		}
	})

	t.Run("bad parameters are 400 with the field", func(t *testing.T) {
		for _, c := range []struct{ query, field string }{
			{"since=yesterday", "since"},
			{"until=2026-13-01T00:00:00Z", "until"},
			{"since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z", "until"},
			{"executor=robot", "executor"},
			{"mode=sometimes", "mode"},
			{"tag=a%20b", "tag"},
			{"group_by=color", "group_by"},
			{"model=" + strings.Repeat("m", 201), "model"},
			{"sinse=2026-11-01T00:00:00Z", "sinse"},
		} {
			ts.expectError(t, alice, "GET", "/api/stats?"+c.query, nil, http.StatusBadRequest, "invalid", c.field)
		}
		ts.expectError(t, nil, "GET", "/api/stats", nil, http.StatusUnauthorized, "unauthorized", "")
	})

	t.Run("the per-run rows export as JSON and CSV", func(t *testing.T) {
		var rows StatsRowsJSON
		ts.expect(t, alice, "GET", "/api/stats/runs?format=json", nil, http.StatusOK, &rows)
		if len(rows.Runs) != 4 {
			t.Fatalf("json export has %d rows, want 4", len(rows.Runs))
		}
		resp, body := ts.request(t, alice, "GET", "/api/stats/runs?format=csv&tag=a", nil)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
			t.Fatalf("csv export: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		recs, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
		if err != nil || len(recs) != 3 || recs[0][0] != "run_id" {
			t.Fatalf("csv = %q (%v)", body, err)
		}
		ts.expectError(t, alice, "GET", "/api/stats/runs?format=xml", nil, http.StatusBadRequest, "invalid", "format")
	})
}
