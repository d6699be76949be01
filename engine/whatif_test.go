package engine

import (
	"encoding/json"
	"testing"

	"homework/engine/spec"
)

// recorded builds a run's iteration rows from (decision, stop reason,
// progress fingerprint) triples, each costing $0.10.
func recorded(t *testing.T, steps ...[3]string) []*spec.Iteration {
	t.Helper()
	var out []*spec.Iteration
	for i, s := range steps {
		g := spec.GateRecord{Decision: spec.Decision{Decision: s[0], StopReason: s[1], Reasons: []string{"recorded " + s[0]}},
			Signals: spec.Signals{Progress: s[2]}}
		raw, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &spec.Iteration{Iteration: i + 1, Gate: raw,
			Metrics: spec.Metrics{Iterations: 1, CostTotalUSD: 0.1, TokensTotal: 10}})
	}
	return out
}

func TestReplayRun(t *testing.T) {
	cfg := &spec.Config{Executor: spec.ExecutorLLM, Mode: spec.ModeAuto}
	stopped := func(reason string) *spec.Run {
		return &spec.Run{ID: "r", Status: spec.StatusStopped, StopReason: &spec.StopReason{Type: reason}}
	}

	t.Run("a wait resets the breaker history, as the worker does", func(t *testing.T) {
		// The same progress throughout, with a wait after the third
		// iteration. no_progress 3 trips only if the history runs across the
		// wait; no_progress 2 trips at the second iteration.
		iters := recorded(t, [3]string{"continue", "", "p"}, [3]string{"continue", "", "p"}, [3]string{"wait", "", "p"},
			[3]string{"continue", "", "p"}, [3]string{"continue", "", "p"}, [3]string{"complete", "completed", "p"})
		run := &spec.Run{ID: "r", Status: spec.StatusCompleted, StopReason: &spec.StopReason{Type: "completed"}}
		w := ReplayRun(run, cfg, iters, spec.WhatIfRules{Breakers: spec.Breakers{NoProgress: 3}})
		if w.Outcome != spec.WhatIfSame || w.StopsAt != 6 || w.Reason != "completed" || w.LostCompletion {
			t.Fatalf("replay = %+v, want the recorded completion", w)
		}
		w = ReplayRun(run, cfg, iters, spec.WhatIfRules{Breakers: spec.Breakers{NoProgress: 2}})
		if w.Outcome != spec.WhatIfEarlier || w.StopsAt != 2 || w.Reason != spec.StopNoProgress || !w.LostCompletion || w.IterationsSaved != 4 {
			t.Fatalf("replay = %+v, want a no_progress stop at 2 losing the completion", w)
		}
	})

	t.Run("stops the rules do not govern stand as recorded", func(t *testing.T) {
		iters := recorded(t, [3]string{"continue", "", "a"}, [3]string{"stop", spec.StopStuck, "b"})
		w := ReplayRun(stopped(spec.StopStuck), cfg, iters, spec.WhatIfRules{Breakers: spec.Breakers{NoProgress: 50}})
		if w.Outcome != spec.WhatIfSame || w.StopsAt != 2 || w.Reason != spec.StopStuck {
			t.Fatalf("replay = %+v, want the recorded stuck stop", w)
		}
	})

	t.Run("a looser budget lets a budget-stopped run go on", func(t *testing.T) {
		iters := recorded(t, [3]string{"continue", "", "a"}, [3]string{"stop", spec.StopMaxIterations, "b"})
		c := *cfg
		c.Budgets.MaxIterations = 2
		w := ReplayRun(stopped(spec.StopMaxIterations), &c, iters, spec.WhatIfRules{Budgets: spec.WhatIfBudgets{MaxIterations: 5}})
		if w.Outcome != spec.WhatIfContinues || w.StopsAt != 0 {
			t.Fatalf("replay = %+v, want continues", w)
		}
		w = ReplayRun(stopped(spec.StopMaxIterations), &c, iters, spec.WhatIfRules{Budgets: spec.WhatIfBudgets{MaxCostUSD: 0.1}})
		if w.Outcome != spec.WhatIfEarlier || w.StopsAt != 1 || w.Reason != spec.StopBudgetCost || w.CostSavedUSD != 0.1 {
			t.Fatalf("replay = %+v, want a cost stop at 1", w)
		}
	})

	t.Run("a running run the rules do not stop is unfinished", func(t *testing.T) {
		iters := recorded(t, [3]string{"continue", "", "a"})
		iters = append(iters, &spec.Iteration{Iteration: 2}) // in progress: no gate record yet
		w := ReplayRun(&spec.Run{ID: "r", Status: spec.StatusRunning}, cfg, iters, spec.WhatIfRules{})
		if w.Outcome != spec.WhatIfUnfinished || w.RecordedIterations != 1 {
			t.Fatalf("replay = %+v, want unfinished", w)
		}
	})
}
