package spec

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Report groupings.
const (
	GroupByExecutor = "executor"
	GroupByModel    = "model"
	GroupByMode     = "mode"
	GroupByTag      = "tag"
	GroupByWeek     = "week"
)

// GroupBys lists the groupings GET /api/stats accepts.
var GroupBys = []string{GroupByExecutor, GroupByModel, GroupByMode, GroupByTag, GroupByWeek}

// PercentileMethod names how Percentiles are computed, for the API answer.
const PercentileMethod = "nearest-rank: the smallest value with at least p% of the values at or below it (sorted ascending, 1-based rank ceil(p/100*n)); 0 for no values"

// StatsFilter selects the runs of an effectiveness report: the caller's
// runs created in [Since, Until) matching every non-empty field. A zero
// Since or Until leaves that end open.
type StatsFilter struct {
	Since, Until time.Time
	Executor     string
	Model        string // the configured model; "" matches every run
	Mode         string
	Tag          string
	// Limit caps the rows (0: no cap); used by the what-if selection.
	Limit int
}

// StatsRow is one run behind the report's figures, as the CSV and JSON
// exports list them.
type StatsRow struct {
	RunID                   string    `json:"run_id"`
	CreatedAt               time.Time `json:"created_at"`
	Objective               string    `json:"objective"`
	Executor                string    `json:"executor"`
	Mode                    string    `json:"mode"`
	Model                   string    `json:"model"`
	Tags                    []string  `json:"tags"`
	Status                  string    `json:"status"`
	StopReason              string    `json:"stop_reason"`
	Iterations              int       `json:"iterations"`
	RunningMS               int64     `json:"running_ms"`
	CostUSD                 float64   `json:"cost_usd"`
	TokensTotal             int64     `json:"tokens_total"`
	ToolCalls               int       `json:"tool_calls"`
	FalseCompletionsBlocked int       `json:"false_completions_blocked"`
	Escalated               bool      `json:"escalated"`
}

// Ended reports whether the run has an outcome: completed, stopped,
// canceled or failed.
func (r *StatsRow) Ended() bool {
	switch r.Status {
	case StatusCompleted, StatusStopped, StatusCanceled, StatusFailed:
		return true
	}
	return false
}

// Percentiles are the 50th and 95th percentiles of a set of values, by
// PercentileMethod.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// CostFigures are a report's cost figures in USD.
type CostFigures struct {
	Total float64 `json:"total"`
	// PerCompletedRun is the total cost of every run in the selection
	// divided by the completed runs: what one completion costs.
	PerCompletedRun float64 `json:"per_completed_run"`
}

// ToolCallFigures are a report's tool-call figures.
type ToolCallFigures struct {
	Total  int     `json:"total"`
	PerRun float64 `json:"per_run"`
}

// Figures are the effectiveness figures of a set of runs (issue 14). Rates
// are in 0..1, and 0 when their denominator is 0.
type Figures struct {
	Runs  int `json:"runs"`
	Ended int `json:"ended"`
	// Completed counts runs whose completion the gate accepted.
	Completed      int     `json:"completed"`
	CompletionRate float64 `json:"completion_rate"` // completed / ended
	// CompletionClaims are accepted completions plus blocked false ones.
	CompletionClaims        int     `json:"completion_claims"`
	FalseCompletionsBlocked int     `json:"false_completions_blocked"`
	FalseCompletionRate     float64 `json:"false_completion_rate"` // blocked / claims
	Escalated               int     `json:"escalated"`             // runs that waited on the person at least once
	EscalationRate          float64 `json:"escalation_rate"`       // escalated / runs
	// Iterations and RunningMS are over ended runs.
	Iterations  Percentiles     `json:"iterations"`
	RunningMS   Percentiles     `json:"running_ms"`
	CostUSD     CostFigures     `json:"cost_usd"`
	TokensTotal int64           `json:"tokens_total"`
	ToolCalls   ToolCallFigures `json:"tool_calls"`
	// StopReasons counts ended runs by stop reason type.
	StopReasons map[string]int `json:"stop_reasons"`
	// Outcomes counts every run by status.
	Outcomes map[string]int `json:"outcomes"`
}

// StatsGroup is the figures of one group of a grouped report. Key is ""
// for runs without a tag (group_by=tag) or with the server's default model
// (group_by=model).
type StatsGroup struct {
	Key string `json:"key"`
	Figures
}

// Summarize computes the figures of rows.
func Summarize(rows []StatsRow) Figures {
	f := Figures{StopReasons: map[string]int{}, Outcomes: map[string]int{}}
	var iters, running []float64
	for i := range rows {
		r := &rows[i]
		f.Runs++
		f.Outcomes[r.Status]++
		if r.Status == StatusCompleted {
			f.Completed++
		}
		if r.Ended() {
			f.Ended++
			f.StopReasons[r.StopReason]++
			iters = append(iters, float64(r.Iterations))
			running = append(running, float64(r.RunningMS))
		}
		f.FalseCompletionsBlocked += r.FalseCompletionsBlocked
		if r.Escalated {
			f.Escalated++
		}
		f.CostUSD.Total += r.CostUSD
		f.TokensTotal += r.TokensTotal
		f.ToolCalls.Total += r.ToolCalls
	}
	f.CompletionClaims = f.Completed + f.FalseCompletionsBlocked
	f.CompletionRate = ratio(float64(f.Completed), float64(f.Ended))
	f.FalseCompletionRate = ratio(float64(f.FalseCompletionsBlocked), float64(f.CompletionClaims))
	f.EscalationRate = ratio(float64(f.Escalated), float64(f.Runs))
	f.CostUSD.PerCompletedRun = ratio(f.CostUSD.Total, float64(f.Completed))
	f.ToolCalls.PerRun = ratio(float64(f.ToolCalls.Total), float64(f.Runs))
	f.Iterations = Percentiles{P50: Percentile(iters, 50), P95: Percentile(iters, 95)}
	f.RunningMS = Percentiles{P50: Percentile(running, 50), P95: Percentile(running, 95)}
	f.CostUSD.Total = roundMicros(f.CostUSD.Total)
	f.CostUSD.PerCompletedRun = roundMicros(f.CostUSD.PerCompletedRun)
	return f
}

// GroupRows splits rows by groupBy (one of GroupBys), keys in ascending
// order. With group_by=tag a run with several tags is in each of their
// groups, and a run without tags in the "" group.
func GroupRows(rows []StatsRow, groupBy string) ([]string, map[string][]StatsRow) {
	groups := map[string][]StatsRow{}
	for _, r := range rows {
		switch groupBy {
		case GroupByExecutor:
			groups[r.Executor] = append(groups[r.Executor], r)
		case GroupByModel:
			groups[r.Model] = append(groups[r.Model], r)
		case GroupByMode:
			groups[r.Mode] = append(groups[r.Mode], r)
		case GroupByWeek:
			k := WeekKey(r.CreatedAt)
			groups[k] = append(groups[k], r)
		case GroupByTag:
			if len(r.Tags) == 0 {
				groups[""] = append(groups[""], r)
			}
			for _, t := range r.Tags {
				groups[t] = append(groups[t], r)
			}
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, groups
}

// SummarizeGroups returns the figures of every group of rows by groupBy.
func SummarizeGroups(rows []StatsRow, groupBy string) []StatsGroup {
	keys, groups := GroupRows(rows, groupBy)
	out := make([]StatsGroup, 0, len(keys))
	for _, k := range keys {
		out = append(out, StatsGroup{Key: k, Figures: Summarize(groups[k])})
	}
	return out
}

// WeekKey is the ISO week of t in UTC, such as "2026-W47".
func WeekKey(t time.Time) string {
	y, w := t.UTC().ISOWeek()
	return fmt.Sprintf("%04d-W%02d", y, w)
}

// Percentile returns the p-th percentile (1 <= p <= 100) of values by the
// nearest-rank method: sort ascending and take the value at 1-based rank
// ceil(p/100 × n). It is always one of the values (no interpolation), so
// the p50 of an even-sized set is the lower of its two middle values. It
// returns 0 for no values. values is sorted in place.
func Percentile(values []float64, p int) float64 {
	n := len(values)
	if n == 0 {
		return 0
	}
	if !sort.Float64sAreSorted(values) {
		sort.Float64s(values)
	}
	rank := (p*n + 99) / 100 // ceil(p*n/100) in integers: no float rounding at exact ranks
	rank = max(1, min(n, rank))
	return values[rank-1]
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func roundMicros(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// TagCount is a tag and how many of the user's runs carry it.
type TagCount struct {
	Tag  string
	Runs int
}
