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

// WhatIf replays rules over the user's runs selected by f (at most
// spec.MaxWhatIfRuns, oldest first) or, when ids is not empty, over exactly
// those runs (another user's run is ENOTFOUND). Invalid rules are EINVALID.
func (e *Engine) WhatIf(ctx context.Context, userID int64, ids []string, f spec.StatsFilter, rules spec.WhatIfRules) (*spec.WhatIfResult, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	if len(ids) > spec.MaxWhatIfRuns {
		return nil, spec.FieldError("run_ids", "At most %d runs.", spec.MaxWhatIfRuns)
	}
	if len(ids) == 0 {
		f.Limit = spec.MaxWhatIfRuns
		rows, err := e.store.StatsRows(ctx, userID, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			ids = append(ids, r.RunID)
		}
	}
	out := &spec.WhatIfResult{Rules: rules, Runs: []spec.WhatIfRun{}}
	for _, id := range ids {
		run, err := e.store.FindRun(ctx, userID, id)
		if err != nil {
			if spec.ErrorCode(err) == spec.ENOTFOUND {
				return nil, spec.FieldError("run_ids", "Run %q not found.", id)
			}
			return nil, err
		}
		iters, err := e.store.ListIterations(ctx, userID, id)
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
		case spec.WhatIfEarlier:
			t.StoppedEarlier++
		case spec.WhatIfContinues:
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
	spec.StopMaxIterations: true, spec.StopBudgetTime: true, spec.StopBudgetTokens: true, spec.StopBudgetCost: true,
	spec.StopBudgetToolCalls: true, spec.StopNoProgress: true, spec.StopRepeatedError: true, spec.StopQualityRegression: true,
}

// ReplayRun replays rules over one run's recorded iterations (in order).
// Each iteration's gate record holds the decision and the signals the gate
// saw; the replay walks them as the worker did — run totals summed from the
// iteration metrics, breaker history reset after every wait or stop (as
// historySinceResume does) — and, where the recorded gate continued or
// stopped for a budget or breaker, asks budgetExceeded and then breakers,
// exactly as decide does, with the new rules (and, as decide does, names
// the stop by an outage the iteration failed on). Completions and waits are
// decided before budgets in decide, so they stand as recorded.
func ReplayRun(run *spec.Run, cfg *spec.Config, iters []*spec.Iteration, rules spec.WhatIfRules) spec.WhatIfRun {
	alt := rules.Apply(*cfg)
	r := &replay{run: run, steps: replaySteps(iters)}
	r.w = spec.WhatIfRun{RunID: run.ID, Objective: run.Objective, Status: run.Status, RecordedIterations: len(r.steps)}
	if run.StopReason != nil {
		r.w.RecordedStop = run.StopReason.Type
	}
	var total spec.Metrics
	var history []spec.Signals // newest first, since the last wait or stop
	for i, s := range r.steps {
		total.Add(s.metrics)
		d := s.gate.Decision
		rule := d.Decision == spec.DecisionContinue || d.Decision == spec.DecisionStop && ruleStops[d.StopReason]
		if rule {
			in := gateInput{Config: &alt, Iteration: s.n, Result: &spec.Result{Error: s.gate.Signals.Failure}, Metrics: total,
				Signals: s.gate.Signals, History: history}
			if b := budgetExceeded(alt.Budgets, total); b != nil {
				r.stopWith(i, stopFor(in, b.stop, nil, b.detail, nil, false))
				return r.w
			}
			if stop, detail, _ := breakers(in); stop != "" {
				r.stopWith(i, stopFor(in, stop, nil, detail, nil, false))
				return r.w
			}
		}
		switch d.Decision {
		case spec.DecisionContinue:
			history = append([]spec.Signals{s.gate.Signals}, history...)
		case spec.DecisionWait:
			history = nil
		case spec.DecisionComplete, spec.DecisionFail:
			r.stopAt(i, cmp.Or(d.StopReason, d.Decision), joinReasons(d.Reasons))
			return r.w
		case spec.DecisionStop:
			if !rule {
				r.stopAt(i, d.StopReason, joinReasons(d.Reasons))
				return r.w
			}
			// The new rules let this iteration continue. When the person
			// continued the run, its later iterations are history again,
			// with the breakers started afresh as they were.
			history = nil
		}
	}
	r.ranOn()
	return r.w
}

// replayStep is one decided iteration of a replayed run.
type replayStep struct {
	n       int
	metrics spec.Metrics
	gate    spec.GateRecord
}

// replaySteps returns the iterations that have a gate decision to replay.
func replaySteps(iters []*spec.Iteration) []replayStep {
	var steps []replayStep
	for _, it := range iters {
		var g spec.GateRecord
		if len(it.Gate) == 0 || json.Unmarshal(it.Gate, &g) != nil || g.Decision.Decision == "" {
			continue // running or interrupted: no decision to replay
		}
		steps = append(steps, replayStep{it.Iteration, it.Metrics, g})
	}
	return steps
}

// replay is one run's replay in progress: w is its outcome so far.
type replay struct {
	run   *spec.Run
	steps []replayStep
	w     spec.WhatIfRun
}

// stopWith ends the replay at step i with the gate's stop d.
func (r *replay) stopWith(i int, d spec.Decision) { r.stopAt(i, d.StopReason, joinReasons(d.Reasons)) }

// stopAt ends the replay at step i and counts what the steps after it cost.
func (r *replay) stopAt(i int, reason, detail string) {
	w := &r.w
	w.StopsAt, w.Reason, w.Detail = r.steps[i].n, reason, detail
	for _, s := range r.steps[i+1:] {
		w.IterationsSaved++
		w.CostSavedUSD += s.metrics.CostTotalUSD
		w.TokensSaved += s.metrics.TokensTotal
	}
	if w.IterationsSaved > 0 {
		w.Outcome = spec.WhatIfEarlier
		w.LostCompletion = r.run.Status == spec.StatusCompleted
	} else {
		w.Outcome = spec.WhatIfSame
	}
}

// ranOn ends a replay whose rules stopped none of the recorded steps.
func (r *replay) ranOn() {
	w, run := &r.w, r.run
	switch {
	case run.StopReason != nil && ruleStops[run.StopReason.Type]:
		w.Outcome = spec.WhatIfContinues
		w.Detail = fmt.Sprintf("the new rules would not have stopped it at iteration %d (%s); it would have run on", w.RecordedIterations, run.StopReason.Type)
	case spec.IsTerminalStatus(run.Status) || run.Status == spec.StatusStopped:
		w.Outcome = spec.WhatIfSame
		w.Reason = w.RecordedStop
	default:
		w.Outcome = spec.WhatIfUnfinished
	}
}
