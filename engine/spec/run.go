package spec

import (
	"encoding/json"
	"time"
)

// Run statuses.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusWaiting   = "waiting_on_user"
	StatusStopped   = "stopped"
	StatusCompleted = "completed"
	StatusCanceled  = "canceled"
	StatusFailed    = "failed"
)

// Statuses lists every run status in lifecycle order.
var Statuses = []string{StatusQueued, StatusRunning, StatusWaiting, StatusStopped, StatusCompleted, StatusFailed, StatusCanceled}

// IsTerminalStatus reports whether a run in status s can never run again.
func IsTerminalStatus(s string) bool {
	return s == StatusCompleted || s == StatusCanceled || s == StatusFailed
}

// Stop reasons: the Type of a run's StopReason (and of a report's
// StoppingReason).
const (
	StopCompleted         = "completed"          // the completion contract was met
	StopMaxIterations     = "max_iterations"     // budgets.max_iterations ran out
	StopBudgetTime        = "budget_time"        // budgets.max_running_ms ran out, mid-iteration included
	StopBudgetTokens      = "budget_tokens"      // budgets.max_total_tokens ran out
	StopBudgetCost        = "budget_cost"        // budgets.max_cost_usd ran out
	StopBudgetToolCalls   = "budget_tool_calls"  // budgets.max_tool_calls ran out
	StopNoProgress        = "no_progress"        // the same progress (or a cycle of states) for breakers.no_progress iterations
	StopRepeatedError     = "repeated_error"     // the same error for breakers.repeated_error iterations
	StopQualityRegression = "quality_regression" // the check score fell three iterations in a row
	StopStuck             = "stuck"              // a stuck pattern of the tool loop
	StopBlocked           = "blocked"            // the agent reported it cannot go on
	StopCanceled          = "canceled"           // the person canceled the run
	StopError             = "error"              // a failure the run cannot get past (a refused key, a missing executor)
	StopInterrupted       = "interrupted"        // the run's iteration was interrupted and not resumed
	// StopReadOnlyViolation: a read_only (or plan-phase) command run changed
	// its work directory.
	StopReadOnlyViolation = "read_only_violation"
	// StopModelUnavailable and StopRateLimited name a model endpoint that
	// failed the run's last iteration (5xx, network, timeouts; 429) when a
	// budget ran out or a breaker tripped: the outage, not the budget or the
	// breaker, is what stopped the run (raising a budget would not help).
	// The detail has the endpoint's last error.
	StopModelUnavailable = "model_unavailable"
	StopRateLimited      = "rate_limited"
	// StopStoreUnavailable names a database that could not be reached
	// during the run's last iteration, failing it (its outcome was written
	// once the database answered again), when a budget ran out or a breaker
	// tripped. The detail has the database's last error.
	StopStoreUnavailable = "store_unavailable"
	// StopToolUnavailable names an MCP server that could not be started or
	// kept crashing in the run's last iteration, when a budget ran out or
	// a breaker tripped (typically the repeated-error breaker, as every
	// iteration fails on it). The detail has the server's last error.
	StopToolUnavailable = "tool_unavailable"
)

// StopReasons lists every stop reason, for filters and labels.
var StopReasons = []string{StopCompleted, StopMaxIterations, StopBudgetTime, StopBudgetTokens, StopBudgetCost,
	StopBudgetToolCalls, StopNoProgress, StopRepeatedError, StopQualityRegression, StopStuck, StopBlocked,
	StopModelUnavailable, StopRateLimited, StopStoreUnavailable, StopToolUnavailable, StopReadOnlyViolation, StopCanceled,
	StopError, StopInterrupted}

// Wait reasons: the Reason of a waiting_on_user run's Waiting.
const (
	WaitNeedsInput  = "needs_input"  // the agent asked blocking questions
	WaitBlocked     = "blocked"      // a command agent printed <promise>BLOCKED</promise>
	WaitTurnEnded   = "turn_ended"   // interactive mode: every iteration hands the turn back
	WaitApprovePlan = "approve_plan" // approve_plan write mode: the plan waits for approval
	// WaitHostUnavailable: no live process serves the host (and command-run
	// root) holding a command run's work directory; it resumes by itself
	// when one does.
	WaitHostUnavailable = "host_unavailable"
	// WaitUsageUnknown: a run with a cost or token budget had an iteration
	// whose usage (or its cost) could not be read, so the budget could not
	// be kept; the person decides whether it goes on.
	WaitUsageUnknown = "usage_unknown"
	// WaitBudgetForecast: the next iteration, at the run's forecast, would
	// pass its cost or token budget (on_forecast ask); Continue with raised
	// budgets resumes it.
	WaitBudgetForecast = "budget_forecast"
)

// StopReason says why a run stopped, with evidence for breaker trips.
type StopReason struct {
	Type     string          `json:"type"`
	Detail   string          `json:"detail"`
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// Waiting describes what a waiting_on_user run waits for.
type Waiting struct {
	Reason    string   `json:"reason"` // needs_input | blocked | turn_ended | approve_plan | host_unavailable | usage_unknown
	Questions []string `json:"questions,omitempty"`
	Detail    string   `json:"detail,omitempty"`
}

// ModelUsage is one model's share of a run's usage. CachedTokens,
// CacheWriteTokens and ReasoningTokens are parts of PromptTokens and
// CompletionTokens (see Metrics).
type ModelUsage struct {
	Calls            int     `json:"calls"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens,omitempty"`
	CacheWriteTokens int64   `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64   `json:"reasoning_tokens,omitempty"`
	CostUSD          float64 `json:"cost_usd"`
	// CostReportedUSD is the part of CostUSD the agent CLI reported itself
	// (the rest was priced from the price table).
	CostReportedUSD float64 `json:"cost_reported_usd,omitempty"`
	Unpriced        bool    `json:"unpriced,omitempty"`
}

// Metrics are a run's (or one iteration's) counters. A run's metrics always
// equal the sum over its iterations.
type Metrics struct {
	Iterations              int                   `json:"iterations"`
	RunningMS               int64                 `json:"running_ms"`
	PromptTokens            int64                 `json:"prompt_tokens"`
	CompletionTokens        int64                 `json:"completion_tokens"`
	TokensTotal             int64                 `json:"tokens_total"`
	CostTotalUSD            float64               `json:"cost_total_usd"`
	UnpricedCalls           int                   `json:"unpriced_calls"`
	LLMCalls                int                   `json:"llm_calls"`
	ToolCallsTotal          int                   `json:"tool_calls_total"`
	FalseCompletionsBlocked int                   `json:"false_completions_blocked"`
	ByModel                 map[string]ModelUsage `json:"by_model"`

	// CachedTokens (prompt tokens read from the provider's cache) and
	// CacheWriteTokens (written to it) are parts of PromptTokens;
	// ReasoningTokens is the part of CompletionTokens spent reasoning.
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
	// CostReportedUSD is the part of CostTotalUSD the agent CLIs reported
	// themselves; the rest comes from the price table.
	CostReportedUSD float64 `json:"cost_reported_usd"`
	// ModelMS is the time spent waiting on model calls (their latencies
	// added up): the model's part of RunningMS.
	ModelMS int64 `json:"model_ms,omitempty"`
}

// Clone returns a copy of m that shares no map with it.
func (m Metrics) Clone() Metrics {
	if m.ByModel != nil {
		by := make(map[string]ModelUsage, len(m.ByModel))
		for k, v := range m.ByModel {
			by[k] = v
		}
		m.ByModel = by
	}
	return m
}

// Add adds o's counters to m.
func (m *Metrics) Add(o Metrics) {
	m.Iterations += o.Iterations
	m.RunningMS += o.RunningMS
	m.ModelMS += o.ModelMS
	m.PromptTokens += o.PromptTokens
	m.CompletionTokens += o.CompletionTokens
	m.CachedTokens += o.CachedTokens
	m.CacheWriteTokens += o.CacheWriteTokens
	m.ReasoningTokens += o.ReasoningTokens
	m.TokensTotal += o.TokensTotal
	m.CostTotalUSD += o.CostTotalUSD
	m.CostReportedUSD += o.CostReportedUSD
	m.UnpricedCalls += o.UnpricedCalls
	m.LLMCalls += o.LLMCalls
	m.ToolCallsTotal += o.ToolCallsTotal
	m.FalseCompletionsBlocked += o.FalseCompletionsBlocked
	for k, v := range o.ByModel {
		if m.ByModel == nil {
			m.ByModel = map[string]ModelUsage{}
		}
		u := m.ByModel[k]
		u.Calls += v.Calls
		u.PromptTokens += v.PromptTokens
		u.CompletionTokens += v.CompletionTokens
		u.CachedTokens += v.CachedTokens
		u.CacheWriteTokens += v.CacheWriteTokens
		u.ReasoningTokens += v.ReasoningTokens
		u.CostUSD += v.CostUSD
		u.CostReportedUSD += v.CostReportedUSD
		u.Unpriced = u.Unpriced || v.Unpriced
		m.ByModel[k] = u
	}
}

// Sub takes o's counters from m: what Add added, for a total that o was
// part of and is no longer (an interrupted iteration's row, replaced by its
// next attempt's). A model whose calls it takes to none leaves ByModel.
func (m *Metrics) Sub(o Metrics) {
	m.Iterations -= o.Iterations
	m.RunningMS -= o.RunningMS
	m.ModelMS -= o.ModelMS
	m.PromptTokens -= o.PromptTokens
	m.CompletionTokens -= o.CompletionTokens
	m.CachedTokens -= o.CachedTokens
	m.CacheWriteTokens -= o.CacheWriteTokens
	m.ReasoningTokens -= o.ReasoningTokens
	m.TokensTotal -= o.TokensTotal
	m.CostTotalUSD -= o.CostTotalUSD
	m.CostReportedUSD -= o.CostReportedUSD
	m.UnpricedCalls -= o.UnpricedCalls
	m.LLMCalls -= o.LLMCalls
	m.ToolCallsTotal -= o.ToolCallsTotal
	m.FalseCompletionsBlocked -= o.FalseCompletionsBlocked
	for k, v := range o.ByModel {
		u, ok := m.ByModel[k]
		if !ok {
			continue
		}
		u.Calls -= v.Calls
		u.PromptTokens -= v.PromptTokens
		u.CompletionTokens -= v.CompletionTokens
		u.CachedTokens -= v.CachedTokens
		u.CacheWriteTokens -= v.CacheWriteTokens
		u.ReasoningTokens -= v.ReasoningTokens
		u.CostUSD -= v.CostUSD
		u.CostReportedUSD -= v.CostReportedUSD
		if u.Calls <= 0 {
			delete(m.ByModel, k)
			continue
		}
		m.ByModel[k] = u
	}
}

// SetUsage sets m's model usage (tokens, cost, calls, by model, model
// time) to usage's, keeping its other counters.
func (m *Metrics) SetUsage(usage Metrics) {
	m.PromptTokens, m.CompletionTokens, m.TokensTotal = usage.PromptTokens, usage.CompletionTokens, usage.TokensTotal
	m.CachedTokens, m.CacheWriteTokens, m.ReasoningTokens = usage.CachedTokens, usage.CacheWriteTokens, usage.ReasoningTokens
	m.CostTotalUSD, m.CostReportedUSD, m.UnpricedCalls, m.LLMCalls = usage.CostTotalUSD, usage.CostReportedUSD, usage.UnpricedCalls, usage.LLMCalls
	m.ModelMS = usage.ModelMS
	m.ByModel = usage.ByModel
	if m.ByModel == nil {
		m.ByModel = map[string]ModelUsage{}
	}
}

// AddCall adds one LLM call's usage to m.
func (m *Metrics) AddCall(model string, prompt, completion int64, cost float64, priced bool) {
	m.AddLLMCall(LLMCall{Model: model, PromptTokens: prompt, CompletionTokens: completion, CostUSD: cost, Priced: priced})
}

// AddLLMCall adds one LLM call's usage, with its token split and the
// source of its cost, to m.
func (m *Metrics) AddLLMCall(c LLMCall) {
	u := ModelUsage{Calls: 1, PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens,
		CachedTokens: c.CachedTokens, CacheWriteTokens: c.CacheWriteTokens, ReasoningTokens: c.ReasoningTokens,
		CostUSD: c.CostUSD, Unpriced: !c.Priced}
	if c.CostSource == CostSourceCLI {
		u.CostReportedUSD = c.CostUSD
	}
	o := Metrics{PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, TokensTotal: c.PromptTokens + c.CompletionTokens,
		CachedTokens: c.CachedTokens, CacheWriteTokens: c.CacheWriteTokens, ReasoningTokens: c.ReasoningTokens,
		CostTotalUSD: c.CostUSD, CostReportedUSD: u.CostReportedUSD, LLMCalls: 1, ByModel: map[string]ModelUsage{c.Model: u},
		ModelMS: max(c.LatencyMS, 0)}
	if !c.Priced {
		o.UnpricedCalls = 1
	}
	m.Add(o)
}

// Run is one objective worked on in the background.
type Run struct {
	ID             string
	UserID         int64
	ParentRunID    string
	Objective      string
	Mode           string
	Executor       string
	Config         json.RawMessage
	Status         string
	Iteration      int // the current (or last) iteration number, 0 before the first
	Attempt        int // the attempt of the current iteration's job
	StopReason     *StopReason
	Waiting        *Waiting
	Metrics        Metrics
	Report         *Report // a finished (or waiting) run's report; nil while it runs
	WorkspaceDocID string
	LeaseOwner     string
	LeaseUntil     time.Time
	RunningSince   time.Time // when the current running stretch began
	CreatedAt      time.Time
	StartedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
}

// Iteration statuses.
const (
	IterRunning     = "running"
	IterSucceeded   = "succeeded"
	IterFailed      = "failed"
	IterInterrupted = "interrupted"
	IterCanceled    = "canceled"
)

// Iteration is one bounded unit of a run's work.
type Iteration struct {
	RunID            string
	Iteration        int
	Attempt          int
	Status           string
	StartedAt        time.Time
	EndedAt          time.Time
	Summary          string
	Fingerprint      string
	Error            string
	ErrorFingerprint string
	Metrics          Metrics

	// GateRecord, CheckResults and ArtifactRefs are the iteration's gate
	// record, check results and artifacts, decoded once by the store when it
	// reads the row; on write the store encodes them when the raw JSON
	// below is empty.
	GateRecord   *GateRecord
	CheckResults []CheckResult
	ArtifactRefs Artifacts

	// Gate, Checks and Artifacts are the same three as stored JSON; the store
	// fills them on read, and on write they win when set. Readers use the
	// typed fields; a writer that sets a typed field clears the raw one.
	Gate      json.RawMessage
	Checks    json.RawMessage
	Artifacts json.RawMessage
}

// Signals are one iteration's fingerprints, kept in its gate record so the
// breakers of later iterations can compare.
type Signals struct {
	Progress      string  `json:"progress"`
	OutputHash    string  `json:"output_hash,omitempty"`
	DiffHash      string  `json:"diff_hash,omitempty"`
	FailingChecks string  `json:"failing_checks,omitempty"` // hash of the sorted failing check names; "" when none fail
	ErrorFP       string  `json:"error_fingerprint,omitempty"`
	Score         float64 `json:"check_score"`
	HasChecks     bool    `json:"has_checks,omitempty"`
	Summary       string  `json:"summary,omitempty"`
	Failure       string  `json:"failure,omitempty"` // the iteration error or the first failing check's message
}

// GateRecord is what an iteration row stores as its gate JSON.
type GateRecord struct {
	Decision
	Signals       Signals  `json:"signals"`
	RemainingWork []string `json:"remaining_work,omitempty"`
	// Forecast is what the iteration was forecast to spend before it began
	// (nil when the run has no cost or token budget, or no history).
	Forecast *Forecast `json:"forecast,omitempty"`
}

// PastIteration is what a new iteration is given of an earlier, finished
// one: its number, summary and gate record (GateRecord JSON, empty when
// none was recorded) and, for the newest of those read only, its check
// results (CheckResult array JSON, the feedback). Gate and Checks stay raw:
// they are read inside the writer's transaction that starts the iteration,
// and the engine decodes them after it commits, so that no other write
// waits on the decoding. See the stores' PastIterations.
type PastIteration struct {
	Iteration int
	Summary   string
	Gate      json.RawMessage
	Checks    json.RawMessage
}

// RunFilter selects runs for a run list. Every field is optional.
type RunFilter struct {
	Status   string
	Executor string
	StopType string // the stop reason's type, e.g. max_iterations
	Tag      string // only runs carrying this tag
	// Query is free text matched (every word, stemmed) against the
	// objective and the run's documents.
	Query string
	// CreatedFrom and CreatedBefore bound the creation time: from inclusive,
	// before exclusive.
	CreatedFrom, CreatedBefore time.Time
	Sort                       string // one of RunSorts; "" is newest first
	Limit                      int    // 1..200, default 50
	Cursor                     string // opaque, from the previous page's NextCursor with the same Sort
}

// Run list orders.
const (
	SortNewest   = "newest"
	SortOldest   = "oldest"
	SortCostDesc = "cost"
	SortCostAsc  = "cost_asc"
)

// RunSorts lists the orders a run list accepts.
var RunSorts = []string{SortNewest, SortOldest, SortCostDesc, SortCostAsc}

// RunPage is one page of runs, newest first.
type RunPage struct {
	Runs       []*Run
	NextCursor string
}

// Evidence is what a breaker trip records.
type Evidence struct {
	Breaker        string    `json:"breaker"`
	Threshold      int       `json:"threshold"`
	Fingerprints   []string  `json:"fingerprints,omitempty"`
	LastFailures   []string  `json:"last_failures,omitempty"`
	LastSummaries  []string  `json:"last_summaries,omitempty"`
	Scores         []float64 `json:"scores,omitempty"`
	LastOutputHash string    `json:"last_output_hash,omitempty"`
	LastDiffHash   string    `json:"last_diff_hash,omitempty"`
	Pattern        string    `json:"pattern,omitempty"`
	// Forecast holds the numbers of a stop before an iteration that would
	// not have fit the budget (Breaker "forecast").
	Forecast *ForecastStopEvidence `json:"forecast,omitempty"`
}

// BreakerForecast is the Evidence.Breaker of a stop by forecast.
const BreakerForecast = "forecast"

// ForecastStopEvidence is what a stop (or wait) by forecast saw: the
// spend so far, the next iteration's forecast and the limit, in the
// budget's unit (USD or tokens).
type ForecastStopEvidence struct {
	Budget   string  `json:"budget"` // max_cost_usd or max_total_tokens
	Spent    float64 `json:"spent"`
	Forecast float64 `json:"forecast"`
	Limit    float64 `json:"limit"`
	Basis    string  `json:"basis"`
}

// Forecast is the engine's forecast of a run's next iteration, from the
// run's own iterations or, before its first, from the user's past runs of
// the same executor and model. A forecast never counts as spend.
type Forecast struct {
	NextIterationUSD    float64 `json:"next_iteration_usd"`
	NextIterationTokens int64   `json:"next_iteration_tokens"`
	// IterationsLeft is how many more iterations fit in the cost, token
	// and iteration budgets at this pace; nil when no budget bounds them.
	IterationsLeft *int `json:"iterations_left"`
	// Basis is one of the Forecast* bases; Samples how many iterations it
	// was taken from.
	Basis   string `json:"basis"`
	Samples int    `json:"samples"`
}

// Forecast bases.
const (
	// BasisLastThree: the largest of the run's last (up to) three iterations.
	BasisLastThree = "max_last_3"
	// BasisLastTen: the 90th percentile of the run's last ten iterations.
	BasisLastTen = "p90_last_10"
	// BasisPastRuns: the 90th percentile of the first iterations of the
	// user's past runs with the same executor and model.
	BasisPastRuns = "p90_past_first_iterations"
)

// IterationUsage is what one finished iteration spent.
type IterationUsage struct {
	CostUSD float64
	Tokens  int64
}

// RunLease is a running run's lease: the engine (process) working it, and
// until when. Recovery takes over runs whose lease expired or has no owner.
type RunLease struct {
	RunID string
	Owner string
	Until time.Time
}
