package storetest

import (
	"encoding/json"
	"testing"

	"homework/engine/spec"
)

// usage: what a forecast reads, and the report's budget figures.
func (s laterSuite) usage(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("usage@example.com")
	other := f.user("other-usage@example.com")
	iter := func(runID string, n int, status string, cost float64, tokens int64) {
		it := &spec.Iteration{RunID: runID, Iteration: n, Attempt: 1, Status: status, StartedAt: f.s.Now()}
		it.Metrics.CostTotalUSD, it.Metrics.TokensTotal = cost, tokens
		f.tx(func(tx spec.Tx) error { return tx.UpsertIteration(f.ctx, it) })
	}
	withModel := func(r *spec.Run, model string, budgets string) {
		r.Config = json.RawMessage(`{"model":"` + model + `","budgets":` + budgets + `}`)
		f.tx(func(tx spec.Tx) error { return tx.UpdateRun(f.ctx, r) })
	}
	// Runs are created one after another: a's first iteration is the oldest.
	a := f.run(u.ID, "use-a")
	withModel(a, "m1", `{}`)
	iter(a.ID, 1, spec.IterSucceeded, 0.5, 50)
	iter(a.ID, 2, spec.IterFailed, 0.25, 25)
	iter(a.ID, 3, spec.IterSucceeded, 0.75, 75)
	iter(a.ID, 4, spec.IterRunning, 9, 900)     // running: not yet spent
	iter(a.ID, 5, spec.IterInterrupted, 9, 900) // interrupted: replaced by its next attempt
	b := f.run(u.ID, "use-b")
	withModel(b, "m1", `{"max_cost_usd":0.5,"max_total_tokens":100}`)
	iter(b.ID, 1, spec.IterSucceeded, 0.6, 200)
	c := f.run(u.ID, "use-c")
	withModel(c, "m2", `{}`)
	iter(c.ID, 1, spec.IterSucceeded, 7, 700)
	o := f.run(other.ID, "use-o")
	withModel(o, "m1", `{}`)
	iter(o.ID, 1, spec.IterSucceeded, 8, 800)

	check := func(name string, r spec.UsageReads) {
		t.Helper()
		recent, err := r.RecentUsage(f.ctx, a.ID, 2)
		if err != nil || len(recent) != 2 || recent[0] != (spec.IterationUsage{CostUSD: 0.75, Tokens: 75}) || recent[1] != (spec.IterationUsage{CostUSD: 0.25, Tokens: 25}) {
			t.Errorf("%s: recent usage = %+v, %v; want iterations 3 and 2, newest first, finished only", name, recent, err)
		}
		first, err := r.FirstIterationUsage(f.ctx, u.ID, spec.ExecutorScript, "m1", "nope", 10)
		if err != nil || len(first) != 2 || first[0].CostUSD != 0.6 || first[1].CostUSD != 0.5 {
			t.Errorf("%s: first iterations = %+v, %v; want b's then a's (same user, executor and model)", name, first, err)
		}
		first, err = r.FirstIterationUsage(f.ctx, u.ID, spec.ExecutorScript, "m1", b.ID, 10)
		if err != nil || len(first) != 1 || first[0].CostUSD != 0.5 {
			t.Errorf("%s: first iterations except b = %+v, %v", name, first, err)
		}
	}
	check("store", ls)
	f.tx(func(tx spec.Tx) error { check("write transaction", tx); return nil })

	b.Status = spec.StatusStopped
	b.Metrics.CostTotalUSD, b.Metrics.TokensTotal = 0.6, 200
	ev, _ := json.Marshal(spec.Evidence{Breaker: spec.BreakerForecast, Forecast: &spec.ForecastStopEvidence{Budget: "max_cost_usd"}})
	b.StopReason = &spec.StopReason{Type: spec.StopBudgetCost, Detail: "forecast", Evidence: ev}
	f.tx(func(tx spec.Tx) error { return tx.UpdateRun(f.ctx, b) })
	rows, err := ls.StatsRows(f.ctx, u.ID, spec.StatsFilter{})
	if err != nil || len(rows) != 3 {
		t.Fatalf("stats rows = %+v, %v", rows, err)
	}
	if r := rows[1]; r.RunID != b.ID || r.MaxCostUSD != 0.5 || r.MaxTotalTokens != 100 || !r.StoppedByForecast {
		t.Errorf("b's row = %+v; want its budgets and stopped by forecast", r)
	}
	if r := rows[0]; r.MaxCostUSD != 0 || r.MaxTotalTokens != 0 || r.StoppedByForecast {
		t.Errorf("a's row = %+v; want no budgets", r)
	}
	fig := spec.Summarize(rows)
	if fig.StoppedByForecast != 1 || fig.BudgetOvershoot.Runs != 1 || fig.BudgetOvershoot.Tokens != 100 || fig.BudgetOvershoot.CostUSD != 0.1 {
		t.Errorf("figures: stopped by forecast %d, overshoot %+v", fig.StoppedByForecast, fig.BudgetOvershoot)
	}
}
