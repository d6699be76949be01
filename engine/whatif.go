package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"homework/engine/spec"
)

// What-if replay (issue 14): alternative stop rules replayed over the
// stored per-iteration signals of past runs through the gate's own budget
// and breaker functions (budgetExceeded and breakers in gate.go, in the
// order decide applies them). It reads history only and never changes a run.

// MaxWhatIfRuns caps the runs one what-if replays.
const MaxWhatIfRuns = 500

// WhatIfRules are alternative stop rules. A zero field keeps the run's own
// setting; a set one replaces it, looser or stricter.
type WhatIfRules struct {
	Budgets  WhatIfBudgets `json:"budgets"`
	Breakers spec.Breakers `json:"breakers"`
}

// WhatIfBudgets are the run budgets a what-if can change (the per-iteration
// bounds shaped the recorded iterations themselves and cannot be replayed).
type WhatIfBudgets struct {
	MaxIterations  int     `json:"max_iterations,omitempty"`
	MaxRunningMS   int64   `json:"max_running_ms,omitempty"`
	MaxTotalTokens int64   `json:"max_total_tokens,omitempty"`
	MaxCostUSD     float64 `json:"max_cost_usd,omitempty"`
	MaxToolCalls   int     `json:"max_tool_calls,omitempty"`
}

// Validate checks the rules' ranges; problems are EINVALID with the field.
func (r WhatIfRules) Validate() error {
	b, k := r.Budgets, r.Breakers
	switch {
	case b.MaxIterations < 0 || b.MaxIterations > 100000:
		return spec.FieldError("budgets.max_iterations", "Must be between 1 and 100000.")
	case b.MaxRunningMS < 0:
		return spec.FieldError("budgets.max_running_ms", "Must be positive.")
	case b.MaxTotalTokens < 0:
		return spec.FieldError("budgets.max_total_tokens", "Must be positive.")
	case b.MaxCostUSD < 0 || b.MaxCostUSD != b.MaxCostUSD || b.MaxCostUSD > 1e9:
		return spec.FieldError("budgets.max_cost_usd", "Must be a positive amount.")
	case b.MaxToolCalls < 0:
		return spec.FieldError("budgets.max_tool_calls", "Must be positive.")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"breakers.no_progress", k.NoProgress}, {"breakers.repeated_error", k.RepeatedError}, {"breakers.stall_repeats", k.StallRepeats}} {
		if f.v < 0 || f.v > 100 {
			return spec.FieldError(f.name, "Must be between 1 and 100.")
		}
	}
	return nil
}

// apply returns cfg with the rules laid over it.
func (r WhatIfRules) apply(cfg spec.Config) spec.Config {
	b := &cfg.Budgets
	if r.Budgets.MaxIterations > 0 {
		b.MaxIterations = r.Budgets.MaxIterations
	}
	if r.Budgets.MaxRunningMS > 0 {
		b.MaxRunningMS = r.Budgets.MaxRunningMS
	}
	if r.Budgets.MaxTotalTokens > 0 {
		b.MaxTotalTokens = r.Budgets.MaxTotalTokens
	}
	if r.Budgets.MaxCostUSD > 0 {
		b.MaxCostUSD = r.Budgets.MaxCostUSD
	}
	if r.Budgets.MaxToolCalls > 0 {
		b.MaxToolCalls = r.Budgets.MaxToolCalls
	}
	k := &cfg.Breakers
	if r.Breakers.NoProgress > 0 {
		k.NoProgress = r.Breakers.NoProgress
	}
	if r.Breakers.RepeatedError > 0 {
		k.RepeatedError = r.Breakers.RepeatedError
	}
	if r.Breakers.StallRepeats > 0 {
		k.StallRepeats = r.Breakers.StallRepeats
	}
	if r.Breakers.QualityRegression != nil {
		q := *r.Breakers.QualityRegression
		k.QualityRegression = &q
	}
	return cfg
}

// What-if outcomes of one run.
const (
	WhatIfSame       = "same"            // the replay ends where the run ended, for the same kind of reason
	WhatIfEarlier    = "stopped_earlier" // the new rules stop the run before its recorded end
	WhatIfContinues  = "continues"       // the new rules would not have stopped it: it runs past its recorded history
	WhatIfUnfinished = "unfinished"      // the run has not ended and the new rules do not stop it
)

// WhatIfRun is one run's replay.
type WhatIfRun struct {
	RunID     string `json:"run_id"`
	Objective string `json:"objective"`
	Status    string `json:"status"`
	// RecordedIterations and RecordedStop are what happened: the iterations
	// with a gate decision and the run's stop reason ("" while it runs).
	RecordedIterations int    `json:"recorded_iterations"`
	RecordedStop       string `json:"recorded_stop"`
	Outcome            string `json:"outcome"`
	// StopsAt is the iteration after which the replay ends (0 when it does
	// not end within the recorded history), with the reason and the gate's
	// explanation.
	StopsAt int    `json:"stops_at"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
	// The savings of an earlier stop: the recorded iterations after StopsAt.
	IterationsSaved int     `json:"iterations_saved"`
	CostSavedUSD    float64 `json:"cost_saved_usd"`
	TokensSaved     int64   `json:"tokens_saved"`
	// LostCompletion is set when the new rules stop a run before the
	// iteration that completed it: the cost of the stricter rule.
	LostCompletion bool `json:"lost_completion"`
}

// WhatIfTotals sum a what-if over its runs.
type WhatIfTotals struct {
	Runs            int     `json:"runs"`
	StoppedEarlier  int     `json:"stopped_earlier"`
	Continues       int     `json:"continues"`
	IterationsSaved int     `json:"iterations_saved"`
	CostSavedUSD    float64 `json:"cost_saved_usd"`
	TokensSaved     int64   `json:"tokens_saved"`
	LostCompletions int     `json:"lost_completions"`
}

// WhatIfResult is a what-if over a selection of runs.
type WhatIfResult struct {
	Rules  WhatIfRules  `json:"rules"`
	Runs   []WhatIfRun  `json:"runs"`
	Totals WhatIfTotals `json:"totals"`
}

// WhatIf replays rules over the user's runs selected by f (at most
// MaxWhatIfRuns, oldest first) or, when ids is not empty, over exactly
// those runs (another user's run is ENOTFOUND). Invalid rules are EINVALID.
func (e *Engine) WhatIf(ctx context.Context, userID int64, ids []string, f spec.StatsFilter, rules WhatIfRules) (*WhatIfResult, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	if len(ids) > MaxWhatIfRuns {
		return nil, spec.FieldError("run_ids", "At most %d runs.", MaxWhatIfRuns)
	}
	if len(ids) == 0 {
		f.Limit = MaxWhatIfRuns
		rows, err := e.db.StatsRows(ctx, userID, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			ids = append(ids, r.RunID)
		}
	}
	out := &WhatIfResult{Rules: rules, Runs: []WhatIfRun{}}
	for _, id := range ids {
		run, err := e.db.FindRun(ctx, userID, id)
		if err != nil {
			if spec.ErrorCode(err) == spec.ENOTFOUND {
				return nil, spec.FieldError("run_ids", "Run %q not found.", id)
			}
			return nil, err
		}
		iters, err := e.db.ListIterations(ctx, userID, id)
		if err != nil {
			return nil, err
		}
		cfg, err := RunConfig(run)
		if err != nil {
			return nil, err
		}
		w := ReplayRun(run, cfg, iters, rules)
		out.Runs = append(out.Runs, w)
		t := &out.Totals
		t.Runs++
		switch w.Outcome {
		case WhatIfEarlier:
			t.StoppedEarlier++
		case WhatIfContinues:
			t.Continues++
		}
		t.IterationsSaved += w.IterationsSaved
		t.CostSavedUSD += w.CostSavedUSD
		t.TokensSaved += w.TokensSaved
		if w.LostCompletion {
			t.LostCompletions++
		}
	}
	return out, nil
}

// ruleStops are the stop reasons that come from the replayable rules
// (budgets and the threshold breakers). Other stops (cancel, stuck tool
// loops, fatal errors) are kept as recorded.
var ruleStops = map[string]bool{
	StopMaxIterations: true, StopBudgetTime: true, StopBudgetTokens: true, StopBudgetCost: true,
	StopBudgetToolCalls: true, StopNoProgress: true, StopRepeatedError: true, StopQualityRegression: true,
}

// ReplayRun replays rules over one run's recorded iterations (in order).
// Each iteration's gate record holds the decision and the signals the gate
// saw; the replay walks them as the worker did — run totals summed from the
// iteration metrics, breaker history reset after every wait or stop (as
// historySinceResume does) — and, where the recorded gate continued or
// stopped for a budget or breaker, asks budgetExceeded and then breakers,
// exactly as decide does, with the new rules. Completions and waits are
// decided before budgets in decide, so they stand as recorded.
func ReplayRun(run *spec.Run, cfg *spec.Config, iters []*spec.Iteration, rules WhatIfRules) WhatIfRun {
	alt := rules.apply(*cfg)
	w := WhatIfRun{RunID: run.ID, Objective: run.Objective, Status: run.Status}
	if run.StopReason != nil {
		w.RecordedStop = run.StopReason.Type
	}
	type step struct {
		n       int
		metrics spec.Metrics
		gate    GateRecord
	}
	var steps []step
	for _, it := range iters {
		var g GateRecord
		if len(it.Gate) == 0 || json.Unmarshal(it.Gate, &g) != nil || g.Decision.Decision == "" {
			continue // running or interrupted: no decision to replay
		}
		steps = append(steps, step{it.Iteration, it.Metrics, g})
	}
	w.RecordedIterations = len(steps)

	var total spec.Metrics
	var history []Signals // newest first, since the last wait or stop
	stopAt := func(i int, reason, detail string) {
		w.StopsAt, w.Reason, w.Detail = steps[i].n, reason, detail
		for _, s := range steps[i+1:] {
			w.IterationsSaved++
			w.CostSavedUSD += s.metrics.CostTotalUSD
			w.TokensSaved += s.metrics.TokensTotal
		}
		if w.IterationsSaved > 0 {
			w.Outcome = WhatIfEarlier
			w.LostCompletion = run.Status == spec.StatusCompleted
		} else {
			w.Outcome = WhatIfSame
		}
	}
	for i, s := range steps {
		total.Add(s.metrics)
		d := s.gate.Decision
		rule := d.Decision == spec.DecisionContinue || d.Decision == spec.DecisionStop && ruleStops[d.StopReason]
		if rule {
			in := gateInput{Config: &alt, Iteration: s.n, Result: &spec.Result{}, Metrics: total,
				Signals: s.gate.Signals, History: history}
			if b := budgetExceeded(alt.Budgets, total); b != nil {
				stopAt(i, b.stop, b.detail)
				return w
			}
			if stop, detail, _ := breakers(in); stop != "" {
				stopAt(i, stop, detail)
				return w
			}
		}
		switch d.Decision {
		case spec.DecisionContinue:
			history = append([]Signals{s.gate.Signals}, history...)
		case spec.DecisionWait:
			history = nil
		case spec.DecisionComplete, spec.DecisionFail:
			stopAt(i, cmp.Or(d.StopReason, d.Decision), joinReasons(d.Reasons))
			return w
		case spec.DecisionStop:
			if !rule {
				stopAt(i, d.StopReason, joinReasons(d.Reasons))
				return w
			}
			// The new rules let this iteration continue. When the person
			// continued the run, its later iterations are history again,
			// with the breakers started afresh as they were.
			history = nil
		}
	}
	switch {
	case run.StopReason != nil && ruleStops[run.StopReason.Type]:
		w.Outcome = WhatIfContinues
		w.Detail = fmt.Sprintf("the new rules would not have stopped it at iteration %d (%s); it would have run on", w.RecordedIterations, run.StopReason.Type)
	case spec.IsTerminalStatus(run.Status) || run.Status == spec.StatusStopped:
		w.Outcome = WhatIfSame
		w.Reason = w.RecordedStop
	default:
		w.Outcome = WhatIfUnfinished
	}
	return w
}
