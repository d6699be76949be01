package handlers

import (
	"net/http"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

func TestWhatIf(t *testing.T) {
	ts := newTestServer(t, nil)
	alice, bob := ts.user(t, "alice@example.com"), ts.user(t, "bob@example.com")

	// A recorded no-progress run: the same progress every iteration, a
	// breaker at 4, each iteration costing $0.10 and 150 tokens.
	stall := scripted.Step{Summary: "same again", Progress: "same", LLM: llmCall(0.1)}
	stalled := ts.createRunWith(t, alice, map[string]any{"breakers": map[string]any{"no_progress": 4}}, stall)
	ts.waitStatus(t, alice, stalled, "stopped")
	// A run that completes at its third iteration.
	work := scripted.Step{Summary: "work", LLM: llmCall(0.2)}
	completed := ts.createRunWith(t, alice, nil, work, work, doneStep("done"))
	ts.waitStatus(t, alice, completed, "completed")

	before, err := ts.DB.FindRun(ts.ctx, alice.ID, stalled)
	if err != nil {
		t.Fatal(err)
	}
	if before.Iteration != 4 || before.StopReason == nil || before.StopReason.Type != "no_progress" {
		t.Fatalf("recorded run: iteration %d stop %+v, want a no_progress stop after 4", before.Iteration, before.StopReason)
	}

	whatIf := func(body map[string]any) spec.WhatIfResult {
		t.Helper()
		var out spec.WhatIfResult
		ts.expect(t, alice, "POST", "/api/whatif", body, http.StatusOK, &out)
		return out
	}

	t.Run("a stricter no-progress threshold stops the run earlier and saves the rest", func(t *testing.T) {
		out := whatIf(map[string]any{"run_ids": []string{stalled}, "breakers": map[string]any{"no_progress": 2}})
		r := out.Runs[0]
		if r.Outcome != spec.WhatIfEarlier || r.StopsAt != 2 || r.Reason != "no_progress" || r.IterationsSaved != 2 {
			t.Fatalf("replay = %+v, want stopped_earlier at 2 for no_progress saving 2", r)
		}
		if !near(r.CostSavedUSD, 0.2) || r.TokensSaved != 300 || r.LostCompletion {
			t.Fatalf("savings = $%g, %d tokens, lost %v; want $0.2, 300, false", r.CostSavedUSD, r.TokensSaved, r.LostCompletion)
		}
		if out.Totals.Runs != 1 || out.Totals.StoppedEarlier != 1 || out.Totals.IterationsSaved != 2 || !near(out.Totals.CostSavedUSD, 0.2) {
			t.Fatalf("totals = %+v", out.Totals)
		}
	})

	t.Run("the recorded threshold replays to the recorded stop", func(t *testing.T) {
		r := whatIf(map[string]any{"run_ids": []string{stalled}}).Runs[0]
		if r.Outcome != spec.WhatIfSame || r.StopsAt != 4 || r.Reason != "no_progress" || r.IterationsSaved != 0 {
			t.Fatalf("replay = %+v, want the same stop at 4", r)
		}
	})

	t.Run("a looser threshold would have let the run go on", func(t *testing.T) {
		out := whatIf(map[string]any{"run_ids": []string{stalled}, "breakers": map[string]any{"no_progress": 6}})
		r := out.Runs[0]
		if r.Outcome != spec.WhatIfContinues || r.StopsAt != 0 || r.IterationsSaved != 0 || out.Totals.Continues != 1 {
			t.Fatalf("replay = %+v, want continues", r)
		}
	})

	t.Run("a tighter budget stops a run before the iteration that completed it", func(t *testing.T) {
		out := whatIf(map[string]any{"budgets": map[string]any{"max_iterations": 2}})
		if out.Totals.Runs != 2 {
			t.Fatalf("selection by window replayed %d runs, want 2", out.Totals.Runs)
		}
		var c spec.WhatIfRun
		for _, r := range out.Runs {
			if r.RunID == completed {
				c = r
			}
		}
		if c.Outcome != spec.WhatIfEarlier || c.StopsAt != 2 || c.Reason != "max_iterations" || !c.LostCompletion || c.IterationsSaved != 1 {
			t.Fatalf("completed run replay = %+v, want a lost completion at 2", c)
		}
		if out.Totals.LostCompletions != 1 || out.Totals.StoppedEarlier != 2 || out.Totals.IterationsSaved != 3 {
			t.Fatalf("totals = %+v, want 1 lost completion, 2 stopped earlier, 3 iterations saved", out.Totals)
		}
	})

	t.Run("replay never changes a run", func(t *testing.T) {
		after, err := ts.DB.FindRun(ts.ctx, alice.ID, stalled)
		if err != nil {
			t.Fatal(err)
		}
		if !after.UpdatedAt.Equal(before.UpdatedAt) || after.Status != before.Status || after.Iteration != before.Iteration {
			t.Fatalf("run changed: %+v → %+v", before, after)
		}
	})

	t.Run("bad rules and other users' runs are refused", func(t *testing.T) {
		ts.expectError(t, alice, "POST", "/api/whatif", map[string]any{"breakers": map[string]any{"no_progress": 101}}, http.StatusBadRequest, "invalid", "breakers.no_progress")
		ts.expectError(t, alice, "POST", "/api/whatif", map[string]any{"budgets": map[string]any{"max_cost_usd": -1}}, http.StatusBadRequest, "invalid", "budgets.max_cost_usd")
		ts.expectError(t, alice, "POST", "/api/whatif", map[string]any{"since": "soon"}, http.StatusBadRequest, "invalid", "since")
		ts.expectError(t, alice, "POST", "/api/whatif", map[string]any{"budget": map[string]any{}}, http.StatusBadRequest, "invalid", "")
		ts.expectError(t, bob, "POST", "/api/whatif", map[string]any{"run_ids": []string{stalled}}, http.StatusBadRequest, "invalid", "run_ids")
		var out spec.WhatIfResult
		ts.expect(t, bob, "POST", "/api/whatif", map[string]any{}, http.StatusOK, &out)
		if out.Totals.Runs != 0 || out.Runs == nil {
			t.Fatalf("bob's what-if = %+v, want no runs", out)
		}
	})
}
