package engine

import (
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// A long run's total is added up from its newest iterations on top of the
// settled ones: it must still be the sum over every iteration row, by
// model too, on both stores.
func TestALongRunsMetricsStillAddUp(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("long@example.com")
		r := h.create(u, spec.Config{
			Budgets: spec.Budgets{MaxIterations: 40},
			Script: script(scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}}, Tools: 2,
				LLM: []spec.LLMCall{
					{Role: "planner", Model: "m1", PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.01, Priced: true, LatencyMS: 7},
					{Role: "planner", Model: "m2", PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.002, Priced: true, LatencyMS: 3},
				}}),
		})
		r = h.waitStatus(u, r.ID, spec.StatusStopped)
		if r.Metrics.Iterations != 40 || r.Metrics.ToolCallsTotal != 80 || r.Metrics.TokensTotal != 40*135 || r.Metrics.LLMCalls != 80 || r.Metrics.ModelMS != 400 {
			t.Fatalf("metrics after 40 iterations = %+v", r.Metrics)
		}
		if m1, m2 := r.Metrics.ByModel["m1"], r.Metrics.ByModel["m2"]; m1.Calls != 40 || m2.Calls != 40 || !closeEnough(m1.CostUSD, 0.4) || !closeEnough(m2.CostUSD, 0.08) {
			t.Fatalf("by model after 40 iterations = %+v", r.Metrics.ByModel)
		}
		h.checkMetricsAddUp(u, r.ID)
	})
}

// The cache's sums are the store's full sums whatever it holds: nothing,
// a sum from an earlier iteration, or one from a later iteration than the
// one recorded (another process worked the run since); and a total handed
// out shares no map with what is kept.
func TestSettledSumsEqualTheFullSum(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("sums@example.com")
	r := h.create(u, spec.Config{Script: script(scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}}, Approve: "go on?"})})
	h.waitStatus(u, r.ID, spec.StatusWaiting)
	put := func(n int, cost float64) {
		m := spec.Metrics{Iterations: 1, RunningMS: int64(10 * n), TokensTotal: int64(n), CostTotalUSD: cost,
			ByModel: map[string]spec.ModelUsage{"m": {Calls: 1, CostUSD: cost}}}
		if err := h.db.WriteTx(h.ctx, func(tx spec.Tx) error {
			return tx.UpsertIteration(h.ctx, &spec.Iteration{RunID: r.ID, Iteration: n, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(), Metrics: m})
		}); err != nil {
			t.Fatal(err)
		}
	}
	var s settledSums
	check := func(current int) spec.Metrics {
		t.Helper()
		var got, want spec.Metrics
		if err := h.db.WriteTx(h.ctx, func(tx spec.Tx) error {
			var err error
			if got, err = s.sum(h.ctx, tx, r.ID, current); err != nil {
				return err
			}
			want, err = tx.SumIterationMetrics(h.ctx, r.ID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got.Iterations != want.Iterations || got.RunningMS != want.RunningMS || got.TokensTotal != want.TokensTotal ||
			!closeEnough(got.CostTotalUSD, want.CostTotalUSD) || got.ByModel["m"].Calls != want.ByModel["m"].Calls {
			t.Fatalf("at iteration %d: cached sum %+v, full sum %+v", current, got, want)
		}
		return got
	}
	for n := 2; n <= 6; n++ {
		put(n, 0.5)
		check(n)
	}
	// Iteration 6 recorded again (a new attempt) with other numbers.
	put(6, 2)
	check(6)
	// A process that recorded iteration 9 elsewhere left a later cache.
	put(7, 1)
	put(8, 1)
	s.mu.Lock()
	s.runs[r.ID] = settledSum{below: 9, sum: spec.Metrics{Iterations: 999}}
	s.mu.Unlock()
	check(8)
	total := check(8)
	total.ByModel["m"] = spec.ModelUsage{Calls: 12345}
	total.Add(spec.Metrics{Iterations: 100})
	check(8)
}
