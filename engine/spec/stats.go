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
	// Detail fills StatsRow.Model and StatsRow.Objective. The model is
	// read from each run's configuration, the costliest part of the query,
	// so this is off unless asked for (the model grouping and the exports
	// need it).
	Detail bool
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
	// MaxCostUSD and MaxTotalTokens are the run's budgets (0: none).
	MaxCostUSD     float64 `json:"max_cost_usd"`
	MaxTotalTokens int64   `json:"max_total_tokens"`
	// StoppedByForecast: the run stopped before an iteration its forecast
	// said would pass a budget.
	StoppedByForecast bool `json:"stopped_by_forecast"`
}

// OvershootUSD is the run's spend beyond its cost budget (0 within it).
func (r *StatsRow) OvershootUSD() float64 {
	if r.MaxCostUSD <= 0 {
		return 0
	}
	return max(0, r.CostUSD-r.MaxCostUSD)
}

// OvershootTokens is the run's tokens beyond its token budget.
func (r *StatsRow) OvershootTokens() int64 {
	if r.MaxTotalTokens <= 0 {
		return 0
	}
	return max(0, r.TokensTotal-r.MaxTotalTokens)
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

// Finish completes a row read from a store once its tags are in: tags
// sorted (none is an empty list, not null), and an ended run without a stop
// reason takes its status as the reason.
func (r *StatsRow) Finish() {
	if r.Tags == nil {
		r.Tags = []string{}
	}
	sort.Strings(r.Tags)
	if r.StopReason == "" && r.Ended() {
		r.StopReason = r.Status
	}
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
	// BudgetOvershoot is spend beyond the runs' budgets (the goal is 0).
	BudgetOvershoot Overshoot `json:"budget_overshoot"`
	// StoppedByForecast counts runs stopped before an iteration that
	// would have passed a budget.
	StoppedByForecast int `json:"stopped_by_forecast"`
	// StopReasons counts ended runs by stop reason type.
	StopReasons map[string]int `json:"stop_reasons"`
	// Outcomes counts every run by status.
	Outcomes map[string]int `json:"outcomes"`
}

// Overshoot is spend beyond budgets: in USD over the runs with a cost
// budget, in tokens over those with a token budget, and the runs that went
// over either.
type Overshoot struct {
	CostUSD float64 `json:"cost_usd"`
	Tokens  int64   `json:"tokens"`
	Runs    int     `json:"runs"`
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
	a := newAccumulator()
	for i := range rows {
		a.add(&rows[i])
	}
	return a.figures()
}

// accumulator sums the figures of rows added one at a time.
type accumulator struct {
	f              Figures
	iters, running []float64
}

func newAccumulator() *accumulator {
	return &accumulator{f: Figures{StopReasons: map[string]int{}, Outcomes: map[string]int{}}}
}

func (a *accumulator) add(r *StatsRow) {
	f := &a.f
	f.Runs++
	f.Outcomes[r.Status]++
	if r.Status == StatusCompleted {
		f.Completed++
	}
	if r.Ended() {
		f.Ended++
		f.StopReasons[r.StopReason]++
		a.iters = append(a.iters, float64(r.Iterations))
		a.running = append(a.running, float64(r.RunningMS))
	}
	f.FalseCompletionsBlocked += r.FalseCompletionsBlocked
	if r.Escalated {
		f.Escalated++
	}
	if o, ot := r.OvershootUSD(), r.OvershootTokens(); o > 0 || ot > 0 {
		f.BudgetOvershoot.CostUSD += o
		f.BudgetOvershoot.Tokens += ot
		f.BudgetOvershoot.Runs++
	}
	if r.StoppedByForecast {
		f.StoppedByForecast++
	}
	f.CostUSD.Total += r.CostUSD
	f.TokensTotal += r.TokensTotal
	f.ToolCalls.Total += r.ToolCalls
}

func (a *accumulator) figures() Figures {
	f := a.f
	f.CompletionClaims = f.Completed + f.FalseCompletionsBlocked
	f.CompletionRate = ratio(float64(f.Completed), float64(f.Ended))
	f.FalseCompletionRate = ratio(float64(f.FalseCompletionsBlocked), float64(f.CompletionClaims))
	f.EscalationRate = ratio(float64(f.Escalated), float64(f.Runs))
	f.CostUSD.PerCompletedRun = ratio(f.CostUSD.Total, float64(f.Completed))
	f.ToolCalls.PerRun = ratio(float64(f.ToolCalls.Total), float64(f.Runs))
	f.Iterations = Percentiles{P50: Percentile(a.iters, 50), P95: Percentile(a.iters, 95)}
	f.RunningMS = Percentiles{P50: Percentile(a.running, 50), P95: Percentile(a.running, 95)}
	f.CostUSD.Total = roundMicros(f.CostUSD.Total)
	f.CostUSD.PerCompletedRun = roundMicros(f.CostUSD.PerCompletedRun)
	f.BudgetOvershoot.CostUSD = roundMicros(f.BudgetOvershoot.CostUSD)
	return f
}

// groupKeys returns the keys of r's groups by groupBy (one of GroupBys).
// With group_by=tag a run with several tags is in each of their groups, and
// a run without tags in the "" group.
func groupKeys(r *StatsRow, groupBy string, buf []string, weeks *weekKeys) []string {
	switch groupBy {
	case GroupByExecutor:
		return append(buf, r.Executor)
	case GroupByModel:
		return append(buf, r.Model)
	case GroupByMode:
		return append(buf, r.Mode)
	case GroupByWeek:
		return append(buf, weeks.key(r.CreatedAt))
	case GroupByTag:
		if len(r.Tags) == 0 {
			return append(buf, "")
		}
		return append(buf, r.Tags...)
	}
	return buf
}

// GroupRows splits rows by groupBy (see groupKeys), keys in ascending
// order.
func GroupRows(rows []StatsRow, groupBy string) ([]string, map[string][]StatsRow) {
	groups := map[string][]StatsRow{}
	var buf []string
	var weeks weekKeys
	for i := range rows {
		buf = groupKeys(&rows[i], groupBy, buf[:0], &weeks)
		for _, k := range buf {
			groups[k] = append(groups[k], rows[i])
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, groups
}

// SummarizeGroups returns the figures of every group of rows by groupBy,
// keys in ascending order.
func SummarizeGroups(rows []StatsRow, groupBy string) []StatsGroup {
	groups := map[string]*accumulator{}
	var buf []string
	var weeks weekKeys
	for i := range rows {
		buf = groupKeys(&rows[i], groupBy, buf[:0], &weeks)
		for _, k := range buf {
			a := groups[k]
			if a == nil {
				a = newAccumulator()
				groups[k] = a
			}
			a.add(&rows[i])
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]StatsGroup, 0, len(keys))
	for _, k := range keys {
		out = append(out, StatsGroup{Key: k, Figures: groups[k].figures()})
	}
	return out
}

// WeekKey is the ISO week of t in UTC, such as "2026-W47".
func WeekKey(t time.Time) string {
	y, w := t.UTC().ISOWeek()
	return fmt.Sprintf("%04d-W%02d", y, w)
}

// weekKeys is WeekKey remembering the last week it formatted: rows come
// oldest first, so most are in the week of the row before, and formatting
// the key for each of ten thousand rows was half of the grouping's time.
type weekKeys struct {
	year, week int
	last       string
}

func (c *weekKeys) key(t time.Time) string {
	y, w := t.UTC().ISOWeek()
	if c.last == "" || y != c.year || w != c.week {
		c.year, c.week, c.last = y, w, WeekKey(t)
	}
	return c.last
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
