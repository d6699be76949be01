package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

func TestUSDShowsThreeSignificantDigits(t *testing.T) {
	for v, want := range map[float64]string{0: "$0.00", 0.9: "$0.900", 0.0123: "$0.0123", 0.004: "$0.00400", 1: "$1.00", 13.4: "$13.40"} {
		if got := usd(v); got != want {
			t.Errorf("usd(%v) = %q, want %q", v, got, want)
		}
	}
}

// costStep is a script step that spends usd and tokens in one model call.
func costStep(usd float64, tokens int64) scripted.Step {
	return scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}},
		LLM: []spec.LLMCall{{Model: "m", PromptTokens: tokens, CostUSD: usd, Priced: true}}}
}

func forecastEvidence(t *testing.T, r *spec.Run) *spec.Evidence {
	t.Helper()
	if r.StopReason == nil {
		t.Fatalf("run %s has no stop reason", r.Status)
	}
	var ev spec.Evidence
	if err := json.Unmarshal(r.StopReason.Evidence, &ev); err != nil || ev.Breaker != spec.BreakerForecast || ev.Forecast == nil {
		t.Fatalf("stop %+v: no forecast evidence (%v)", r.StopReason, err)
	}
	return &ev
}

func TestTheForecastKeepsSpendWithinTheBudget(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		steps := []scripted.Step{costStep(0.2, 100), costStep(0.3, 100), costStep(0.25, 100), costStep(0.3, 100), done("5")}

		t.Run("stop: the run stops before the iteration that would pass the limit", func(t *testing.T) {
			u := h.user("stop@example.com")
			r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxCostUSD: 1}, Script: script(steps...)})
			r = h.waitStatus(u, r.ID, spec.StatusStopped)
			// $0.75 after three iterations; the largest of the last three is
			// $0.30, and $1.05 would pass $1.00.
			if r.StopReason.Type != spec.StopBudgetCost || r.Metrics.Iterations != 3 || !closeEnough(r.Metrics.CostTotalUSD, 0.75) {
				t.Fatalf("stop %+v metrics %+v", r.StopReason, r.Metrics)
			}
			ev := forecastEvidence(t, r)
			if !closeEnough(ev.Forecast.Spent, 0.75) || !closeEnough(ev.Forecast.Forecast, 0.3) || ev.Forecast.Limit != 1 || ev.Forecast.Basis != spec.BasisLastThree {
				t.Fatalf("evidence %+v", ev.Forecast)
			}
			for _, want := range []string{"spent $0.750", "forecast $0.300", "limit $1.00", "not started"} {
				if !strings.Contains(r.StopReason.Detail, want) {
					t.Errorf("detail %q lacks %q", r.StopReason.Detail, want)
				}
			}
			// The iteration that was not started left no row, and the
			// report compares the forecasts with what was spent.
			its, err := h.db.ListIterations(h.ctx, u.ID, r.ID)
			if err != nil || len(its) != 3 {
				t.Fatalf("%d iterations, %v", len(its), err)
			}
			fc := r.Report.Forecasts
			if fc == nil || len(fc.Iterations) != 2 || fc.Iterations[0].Iteration != 2 || !closeEnough(fc.Iterations[0].ForecastUSD, 0.2) ||
				!closeEnough(fc.Iterations[0].ActualUSD, 0.3) || !closeEnough(fc.MeanAbsErrorUSD, (0.1+0.05)/2) {
				t.Fatalf("report forecasts %+v", fc)
			}
			h.events(u, r.ID)
		})

		t.Run("ask: the run waits, Continue with a raised budget resumes it", func(t *testing.T) {
			u := h.user("ask@example.com")
			r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxCostUSD: 1, OnForecast: spec.ForecastAsk}, Script: script(steps...)})
			r = h.waitStatus(u, r.ID, spec.StatusWaiting)
			if r.Waiting.Reason != spec.WaitBudgetForecast || len(r.Waiting.Questions) != 1 || !strings.Contains(r.Waiting.Questions[0], "forecast $0.300") ||
				r.Metrics.Iterations != 3 {
				t.Fatalf("waiting %+v metrics %+v", r.Waiting, r.Metrics)
			}
			// A raise that the next iteration would still not fit is refused
			// with what would.
			_, err := h.e.Continue(h.ctx, u.ID, r.ID, &spec.Budgets{MaxCostUSD: 1.02})
			if spec.ErrorField(err) != "budgets.max_cost_usd" || !strings.Contains(spec.ErrorMessage(err), "at least $1.05") {
				t.Fatalf("continue with too small a raise: %v", err)
			}
			if _, err := h.e.Continue(h.ctx, u.ID, r.ID, &spec.Budgets{MaxCostUSD: 5}); err != nil {
				t.Fatal(err)
			}
			r = h.waitStatus(u, r.ID, spec.StatusCompleted)
			if r.Metrics.Iterations != 5 {
				t.Fatalf("metrics %+v", r.Metrics)
			}
			h.events(u, r.ID)
		})

		t.Run("off: the budget stops the run once passed", func(t *testing.T) {
			u := h.user("off@example.com")
			r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxCostUSD: 1, OnForecast: spec.ForecastOff}, Script: script(steps...)})
			r = h.waitStatus(u, r.ID, spec.StatusStopped)
			if r.StopReason.Type != spec.StopBudgetCost || r.Metrics.Iterations != 4 || !closeEnough(r.Metrics.CostTotalUSD, 1.05) {
				t.Fatalf("stop %+v metrics %+v", r.StopReason, r.Metrics)
			}
		})

		t.Run("tokens: the token budget is forecast alike", func(t *testing.T) {
			u := h.user("tokens@example.com")
			r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxTotalTokens: 250}, Script: script(steps...)})
			r = h.waitStatus(u, r.ID, spec.StatusStopped)
			if r.StopReason.Type != spec.StopBudgetTokens || r.Metrics.Iterations != 2 || r.Metrics.TokensTotal != 200 {
				t.Fatalf("stop %+v metrics %+v", r.StopReason, r.Metrics)
			}
			if ev := forecastEvidence(t, r); ev.Forecast.Budget != "max_total_tokens" || ev.Forecast.Forecast != 100 {
				t.Fatalf("evidence %+v", ev.Forecast)
			}
		})

		t.Run("first iteration: forecast from the user's past runs", func(t *testing.T) {
			u := h.user("first@example.com")
			for _, c := range []float64{0.4, 0.6} {
				past := h.create(u, spec.Config{Script: script(costStep(c, 10), done("2"))})
				h.waitStatus(u, past.ID, spec.StatusCompleted)
			}
			r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxCostUSD: 0.5}, Script: script(steps...)})
			r = h.waitStatus(u, r.ID, spec.StatusStopped)
			ev := forecastEvidence(t, r)
			if r.Metrics.Iterations != 0 || ev.Forecast.Basis != spec.BasisPastRuns || !closeEnough(ev.Forecast.Forecast, 0.6) {
				t.Fatalf("metrics %+v evidence %+v", r.Metrics, ev.Forecast)
			}
			// Another user's runs are not its history.
			v := h.user("other@example.com")
			r = h.create(v, spec.Config{Budgets: spec.Budgets{MaxCostUSD: 0.5}, Script: script(costStep(0.1, 10), done("2"))})
			h.waitStatus(v, r.ID, spec.StatusCompleted)
		})
	})
}

func TestForecastBases(t *testing.T) {
	b := spec.Budgets{MaxCostUSD: 10, MaxIterations: 100}
	var costs []spec.IterationUsage
	for i := 1; i <= 12; i++ {
		costs = append([]spec.IterationUsage{{CostUSD: float64(i) / 10, Tokens: int64(i)}}, costs...) // newest first
	}
	f := forecastFrom(costs, b, spec.Metrics{Iterations: 12, CostTotalUSD: 7.8})
	// The 90th percentile of the last ten (0.3 .. 1.2) is 1.1.
	if f.Basis != spec.BasisLastTen || !closeEnough(f.NextIterationUSD, 1.1) || f.NextIterationTokens != 11 || f.IterationsLeft == nil || *f.IterationsLeft != 2 {
		t.Fatalf("forecast %+v left %v", f, *f.IterationsLeft)
	}
	f = forecastFrom(costs[:2], spec.Budgets{}, spec.Metrics{})
	if f.Basis != spec.BasisLastThree || !closeEnough(f.NextIterationUSD, 1.2) || f.IterationsLeft != nil {
		t.Fatalf("forecast %+v", f)
	}
}
