package spec

// What-if replay (the effectiveness report): alternative stop rules and what
// they would have done to recorded runs. The replay itself is engine.ReplayRun.

// MaxWhatIfRuns caps the runs one what-if replays.
const MaxWhatIfRuns = 500

// WhatIfRules are alternative stop rules. A zero field keeps the run's own
// setting; a set one replaces it, looser or stricter.
type WhatIfRules struct {
	Budgets  WhatIfBudgets `json:"budgets"`
	Breakers Breakers      `json:"breakers"`
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
		return FieldError("budgets.max_iterations", "Must be between 1 and 100000.")
	case b.MaxRunningMS < 0:
		return FieldError("budgets.max_running_ms", "Must be positive.")
	case b.MaxTotalTokens < 0:
		return FieldError("budgets.max_total_tokens", "Must be positive.")
	case b.MaxCostUSD < 0 || b.MaxCostUSD != b.MaxCostUSD || b.MaxCostUSD > 1e9:
		return FieldError("budgets.max_cost_usd", "Must be a positive amount.")
	case b.MaxToolCalls < 0:
		return FieldError("budgets.max_tool_calls", "Must be positive.")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"breakers.no_progress", k.NoProgress}, {"breakers.repeated_error", k.RepeatedError}, {"breakers.stall_repeats", k.StallRepeats}} {
		if f.v < 0 || f.v > 100 {
			return FieldError(f.name, "Must be between 1 and 100.")
		}
	}
	return nil
}

// Apply returns cfg with the rules laid over it.
func (r WhatIfRules) Apply(cfg Config) Config {
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
