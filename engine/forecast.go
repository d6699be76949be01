package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"homework/engine/spec"
)

// A budget is a ceiling, not a tripwire: before an iteration starts, the
// engine forecasts what it will spend from what the run's own iterations
// spent (the largest of the last three; the 90th percentile of the last ten
// once there are ten) or, before the first, from the first iterations of
// the user's past runs with the same executor and model (their 90th
// percentile). When spend plus forecast would pass the cost or token
// budget, the iteration does not start: the run stops, or waits on the
// person, by its budgets.on_forecast. The cut during an iteration stays as
// the backstop for an iteration that spends more than forecast.

const (
	forecastWindow   = 10 // the run's iterations a forecast reads
	forecastPastRuns = 50 // past runs' first iterations read for a first forecast
)

// ForecastNext returns the forecast of the run's next iteration, or nil when
// there is nothing to forecast from.
func ForecastNext(ctx context.Context, r spec.UsageReads, run *spec.Run, cfg *spec.Config) (*spec.Forecast, error) {
	recent, err := r.RecentUsage(ctx, run.ID, forecastWindow)
	if err != nil || len(recent) > 0 {
		return forecastFrom(recent, cfg.Budgets, run.Metrics), err
	}
	first, err := r.FirstIterationUsage(ctx, run.UserID, cfg.Executor, cfg.Model, run.ID, forecastPastRuns)
	if err != nil || len(first) == 0 {
		return nil, err
	}
	return forecastOf(first, spec.BasisPastRuns, cfg.Budgets, run.Metrics), nil
}

// forecastFrom forecasts from the run's own iterations, newest first: the
// largest of the last three, or the 90th percentile of the last ten once
// there are ten.
func forecastFrom(recent []spec.IterationUsage, b spec.Budgets, m spec.Metrics) *spec.Forecast {
	if len(recent) >= forecastWindow {
		return forecastOf(recent[:forecastWindow], spec.BasisLastTen, b, m)
	}
	return forecastOf(recent[:min(3, len(recent))], spec.BasisLastThree, b, m)
}

// forecastOf forecasts by basis from samples (the largest for
// BasisLastThree, else the 90th percentile), with the iterations left in
// budgets b after spending m.
func forecastOf(samples []spec.IterationUsage, basis string, b spec.Budgets, m spec.Metrics) *spec.Forecast {
	f := &spec.Forecast{Basis: basis, Samples: len(samples)}
	if basis == spec.BasisLastThree {
		for _, u := range samples {
			f.NextIterationUSD = max(f.NextIterationUSD, u.CostUSD)
			f.NextIterationTokens = max(f.NextIterationTokens, u.Tokens)
		}
	} else {
		costs, tokens := make([]float64, len(samples)), make([]float64, len(samples))
		for i, u := range samples {
			costs[i], tokens[i] = u.CostUSD, float64(u.Tokens)
		}
		f.NextIterationUSD, f.NextIterationTokens = spec.Percentile(costs, 90), int64(spec.Percentile(tokens, 90))
	}
	f.NextIterationUSD = math.Round(f.NextIterationUSD*1e6) / 1e6
	f.IterationsLeft = iterationsLeft(b, m, f)
	return f
}

// iterationsLeft is how many more iterations of forecast f fit in the
// budgets b after spending m, or nil when no budget bounds them.
func iterationsLeft(b spec.Budgets, m spec.Metrics, f *spec.Forecast) *int {
	left := math.MaxInt
	if b.MaxIterations > 0 {
		left = max(0, b.MaxIterations-m.Iterations)
	}
	if b.MaxCostUSD > 0 && f.NextIterationUSD > 0 {
		left = min(left, int(math.Floor((b.MaxCostUSD-m.CostTotalUSD)/f.NextIterationUSD+1e-9)))
	}
	if b.MaxTotalTokens > 0 && f.NextIterationTokens > 0 {
		left = min(left, int((b.MaxTotalTokens-m.TokensTotal)/f.NextIterationTokens))
	}
	if left == math.MaxInt {
		return nil
	}
	left = max(0, left)
	return &left
}

// forecastBlock is a budget the next iteration would pass at its forecast.
type forecastBlock struct {
	stop string // budget_cost or budget_tokens
	ev   spec.ForecastStopEvidence
}

// forecastBlocks returns the budget the next iteration of forecast f would
// pass after spending m, or nil when it fits.
func forecastBlocks(b spec.Budgets, m spec.Metrics, f *spec.Forecast) *forecastBlock {
	if f == nil {
		return nil
	}
	if b.MaxCostUSD > 0 && f.NextIterationUSD > 0 && m.CostTotalUSD+f.NextIterationUSD > b.MaxCostUSD+1e-9 {
		return &forecastBlock{spec.StopBudgetCost, spec.ForecastStopEvidence{Budget: "max_cost_usd",
			Spent: m.CostTotalUSD, Forecast: f.NextIterationUSD, Limit: b.MaxCostUSD, Basis: f.Basis}}
	}
	if b.MaxTotalTokens > 0 && f.NextIterationTokens > 0 && m.TokensTotal+f.NextIterationTokens > b.MaxTotalTokens {
		return &forecastBlock{spec.StopBudgetTokens, spec.ForecastStopEvidence{Budget: "max_total_tokens",
			Spent: float64(m.TokensTotal), Forecast: float64(f.NextIterationTokens), Limit: float64(b.MaxTotalTokens), Basis: f.Basis}}
	}
	return nil
}

// basisText says in words what a forecast was taken from.
func basisText(basis string, samples int) string {
	switch basis {
	case spec.BasisLastTen:
		return "the 90th percentile of the run's last 10 iterations"
	case spec.BasisLastThree:
		if samples == 1 {
			return "the run's last iteration"
		}
		return fmt.Sprintf("the largest of the run's last %d iterations", samples)
	case spec.BasisPastRuns:
		return fmt.Sprintf("the 90th percentile of the first iterations of %d of your earlier runs like it", samples)
	}
	return basis
}

// text says what the block saw, for a stop detail or a question.
func (k *forecastBlock) text(f *spec.Forecast) string {
	ev := k.ev
	if ev.Budget == "max_cost_usd" {
		return fmt.Sprintf("The next iteration would pass the cost budget: spent %s, next iteration forecast %s (%s), limit %s.",
			usd(ev.Spent), usd(ev.Forecast), basisText(f.Basis, f.Samples), usd(ev.Limit))
	}
	return fmt.Sprintf("The next iteration would pass the token budget: spent %.0f tokens, next iteration forecast %.0f (%s), limit %.0f.",
		ev.Spent, ev.Forecast, basisText(f.Basis, f.Samples), ev.Limit)
}

// usd formats an amount in dollars with cents, and at least three
// significant digits below a dollar ($0.900, $0.0120).
func usd(v float64) string {
	if v == 0 || math.Abs(v) >= 1 {
		return fmt.Sprintf("$%.2f", v)
	}
	decimals := max(2, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	return "$" + strconv.FormatFloat(v, 'f', decimals, 64)
}

// forecastGate runs before the run's next iteration is enqueued (run.Metrics
// is its spend so far). It returns the forecast to record with the
// iteration, and whether the run was moved out of running instead (stopped
// or waiting, by on_forecast) because the iteration would not fit. Runs
// without a cost or token budget are not forecast here. cfg is the run's
// config when the caller has it decoded (nil: decoded from run).
func (e *Engine) forecastGate(ctx context.Context, tx spec.Tx, run *spec.Run, cfg *spec.Config) (*spec.Forecast, bool, error) {
	if cfg == nil {
		var err error
		if cfg, err = RunConfig(run); err != nil {
			return nil, false, err
		}
	}
	b := cfg.Budgets
	if b.MaxCostUSD <= 0 && b.MaxTotalTokens <= 0 {
		return nil, false, nil
	}
	f, err := ForecastNext(ctx, tx, run, cfg)
	if err != nil {
		return nil, false, err
	}
	on := spec.OnForecastOf(b, cfg.Mode)
	k := forecastBlocks(b, run.Metrics, f)
	if k == nil || on == spec.ForecastOff {
		return f, false, nil
	}
	detail := k.text(f)
	if on == spec.ForecastAsk {
		q := detail + " Continue with a raised budget to go on, or stop the run."
		return f, true, e.setStatus(ctx, tx, run, spec.StatusWaiting, nil, &spec.Waiting{Reason: spec.WaitBudgetForecast, Questions: []string{q}})
	}
	ev, _ := json.Marshal(spec.Evidence{Breaker: spec.BreakerForecast, Forecast: &k.ev})
	sr := &spec.StopReason{Type: k.stop, Detail: detail + " The iteration was not started.", Evidence: ev}
	return f, true, e.finishRun(ctx, tx, run, spec.StatusStopped, sr, nil)
}

// forecastAccuracy compares the forecasts recorded in the iterations' gate
// records with what they spent; nil when none was forecast.
func forecastAccuracy(rows []*spec.Iteration) *spec.ForecastAccuracy {
	var acc spec.ForecastAccuracy
	var errUSD, errTokens float64
	for i := len(rows) - 1; i >= 0; i-- { // oldest first
		r := rows[i]
		if len(r.Gate) == 0 {
			continue
		}
		var g struct {
			Forecast *spec.Forecast `json:"forecast"`
		}
		if json.Unmarshal(r.Gate, &g) != nil || g.Forecast == nil {
			continue
		}
		f := g.Forecast
		acc.Iterations = append(acc.Iterations, spec.ForecastVsActual{Iteration: r.Iteration, Basis: f.Basis,
			ForecastUSD: f.NextIterationUSD, ActualUSD: r.Metrics.CostTotalUSD,
			ForecastTokens: f.NextIterationTokens, ActualTokens: r.Metrics.TokensTotal})
		errUSD += math.Abs(f.NextIterationUSD - r.Metrics.CostTotalUSD)
		errTokens += math.Abs(float64(f.NextIterationTokens - r.Metrics.TokensTotal))
	}
	if len(acc.Iterations) == 0 {
		return nil
	}
	n := float64(len(acc.Iterations))
	acc.MeanAbsErrorUSD = math.Round(errUSD/n*1e6) / 1e6
	acc.MeanAbsErrorTokens = math.Round(errTokens/n*10) / 10
	return &acc
}
