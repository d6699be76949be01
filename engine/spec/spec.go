// Package spec holds the contract between the engine and its executors and
// checks: a run's configuration as submitted and stored, what an executor is
// given for one iteration, and what it returns. It has no behaviour beyond
// defaults and small helpers, so every engine sub-package can import it.
package spec

import (
	"context"
	"encoding/json"
	"time"
)

// Modes.
const (
	ModeAuto        = "auto"        // the platform re-prompts itself until done
	ModeInteractive = "interactive" // after each iteration the run waits for the person
)

// Executors.
const (
	ExecutorLLM     = "llm"
	ExecutorCommand = "command"
	ExecutorScript  = "script" // the scripted executor used by tests; enabled by server option only
)

// Write modes.
const (
	WriteAutopilot   = "autopilot"
	WriteApprovePlan = "approve_plan"
	WriteReadOnly    = "read_only"
)

// Check types.
const (
	CheckCommand        = "command"
	CheckContentPattern = "content_pattern"
	CheckTasksAllDone   = "tasks_all_done"
	CheckPRDAllPass     = "prd_all_pass"
	CheckDocumentExists = "document_exists"
)

// Config is a run's configuration: the body of POST /api/runs, stored on the
// run as JSON.
type Config struct {
	Objective   string          `json:"objective"`
	Mode        string          `json:"mode"`
	Executor    string          `json:"executor"`
	Model       string          `json:"model,omitempty"`
	Models      *Models         `json:"models,omitempty"`
	Budgets     Budgets         `json:"budgets"`
	Permissions Permissions     `json:"permissions"`
	Completion  Completion      `json:"completion"`
	Breakers    Breakers        `json:"breakers"`
	Agent       *Agent          `json:"agent,omitempty"`
	ParentRunID string          `json:"parent_run_id,omitempty"`
	Tags        []string        `json:"tags,omitempty"`   // short labels for the effectiveness report
	Script      json.RawMessage `json:"script,omitempty"` // ExecutorScript only

	// MCPServers names the operator's MCP servers whose tools an LLM run
	// is offered (as mcp__{server}__{tool}).
	MCPServers []string `json:"mcp_servers,omitempty"`
}

// Models picks a model per role; empty fields fall back to Config.Model,
// then to the server default.
type Models struct {
	Planner    string `json:"planner,omitempty"`
	Executor   string `json:"executor,omitempty"`
	Summarizer string `json:"summarizer,omitempty"`
}

// Budgets bound a run (checked after each iteration) and each iteration.
// Zero means "not set" (server defaults apply where the engine has them).
type Budgets struct {
	MaxIterations      int     `json:"max_iterations,omitempty"`
	MaxRunningMS       int64   `json:"max_running_ms,omitempty"`
	MaxTotalTokens     int64   `json:"max_total_tokens,omitempty"`
	MaxCostUSD         float64 `json:"max_cost_usd,omitempty"`
	MaxToolCalls       int     `json:"max_tool_calls,omitempty"`
	IterationTimeoutMS int64   `json:"iteration_timeout_ms,omitempty"`
	IterationToolCalls int     `json:"iteration_tool_calls,omitempty"`
	// OnForecast is what happens when the next iteration, at the run's
	// forecast, would pass the cost or token budget: ForecastStop,
	// ForecastAsk or ForecastOff; "" is ask for interactive runs and stop
	// for auto runs (see OnForecastOf).
	OnForecast string `json:"on_forecast,omitempty"`
}

// What a run does when its next iteration would not fit its budgets.
const (
	ForecastStop = "stop" // stop before it, as budget_cost or budget_tokens
	ForecastAsk  = "ask"  // wait on the person (budget_forecast)
	ForecastOff  = "off"  // start it; the budgets stop the run once passed
)

// OnForecasts lists the values of Budgets.OnForecast.
var OnForecasts = []string{ForecastStop, ForecastAsk, ForecastOff}

// OnForecastOf is the on_forecast a run of mode with budgets b follows.
func OnForecastOf(b Budgets, mode string) string {
	if b.OnForecast != "" {
		return b.OnForecast
	}
	if mode == ModeInteractive {
		return ForecastAsk
	}
	return ForecastStop
}

// Permissions say what the run may write.
type Permissions struct {
	WriteMode string `json:"write_mode"`
}

// Completion is the completion contract: an optional promise token and the
// objective checks that must all pass.
type Completion struct {
	Token  string      `json:"token,omitempty"`
	Checks []CheckSpec `json:"checks,omitempty"`
}

// CheckSpec configures one objective check.
type CheckSpec struct {
	Type      string   `json:"type"`
	Name      string   `json:"name,omitempty"`
	Argv      []string `json:"argv,omitempty"`       // command
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // command
	Pattern   string   `json:"pattern,omitempty"`    // content_pattern (RE2)
	Target    string   `json:"target,omitempty"`     // content_pattern: "output" or "document:<path>"
	Path      string   `json:"path,omitempty"`       // document_exists, prd_all_pass
}

// DisplayName returns the check's name, or its type when unnamed.
func (c CheckSpec) DisplayName() string {
	if c.Name != "" {
		return c.Name
	}
	return c.Type
}

// Breakers holds per-run breaker thresholds; zero means the default.
type Breakers struct {
	NoProgress        int   `json:"no_progress,omitempty"`        // same progress fingerprint N iterations (default 3)
	RepeatedError     int   `json:"repeated_error,omitempty"`     // same error fingerprint N iterations (default 5)
	StallRepeats      int   `json:"stall_repeats,omitempty"`      // command: same output/diff/failing-check hash N times (default 3)
	QualityRegression *bool `json:"quality_regression,omitempty"` // check score falling 3 iterations by >10 points (default on)
	Cycles            int   `json:"cycles,omitempty"`             // progress fingerprints cycling with period 2..4 this many times (default 3, -1 off)
}

// Agent configures a command run's agent process.
type Agent struct {
	Argv           []string `json:"argv"`
	Workdir        string   `json:"workdir"`
	TimeoutMS      int64    `json:"timeout_ms,omitempty"`
	PromptTemplate string   `json:"prompt_template,omitempty"`
	Env            []string `json:"env,omitempty"` // names of server environment variables passed through
	OutputCapBytes int64    `json:"output_cap_bytes,omitempty"`
	CommitEach     bool     `json:"commit_each_iteration,omitempty"`
	// OutputFormat says how to read the agent's output: text (the
	// default), claude-json, claude-stream-json or codex-json.
	OutputFormat string `json:"output_format,omitempty"`
	// Preset names the CLI the argv was filled in for: claude, codex,
	// gemini, aider or custom.
	Preset string `json:"preset,omitempty"`
	// Resume continues the previous iteration's agent session (claude
	// --resume, codex exec resume) when the output format reports one.
	Resume bool `json:"resume,omitempty"`
}

// InboxItem is an answer or message the person sent to a run; the store
// keeps it until an iteration consumes it, and an executor gets the ones new
// for its iteration.
type InboxItem struct {
	ID                int64     `json:"-"`
	RunID             string    `json:"-"`
	Kind              string    `json:"kind"` // InboxAnswer | InboxMessage
	Body              string    `json:"body"`
	CreatedAt         time.Time `json:"created_at"`
	ConsumedAt        time.Time `json:"-"`
	ConsumedIteration int       `json:"-"`
}

// Feedback is what the gate said after the previous iteration, fed into the
// next one ("why we continued").
type Feedback struct {
	Decision      string        `json:"decision"`
	Reasons       []string      `json:"reasons"`
	FailingChecks []CheckResult `json:"failing_checks,omitempty"`
	RemainingWork []string      `json:"remaining_work,omitempty"`
	Questions     []string      `json:"questions,omitempty"` // what was asked before a wait
}

// Input is everything an executor gets for one iteration.
type Input struct {
	RunID     string
	UserID    int64
	Iteration int
	Attempt   int
	Config    *Config
	// WorkspaceDocID is the run's root document (LLM runs).
	WorkspaceDocID string
	// Inbox holds answers and messages not yet seen by an iteration.
	Inbox []InboxItem
	// Feedback is the gate's decision after the previous iteration; nil on
	// the first.
	Feedback *Feedback
	// Summaries are the last few iteration summaries, newest last.
	Summaries []string
	// Host gives the executor the engine services it may use.
	Host Host
}

// Host is what the engine offers an executor during an iteration.
type Host interface {
	// Emit appends a non-state event (tool_call, tool_result, output, ...)
	// to the run's log. It is group-committed and published live.
	Emit(ctx context.Context, typ EventType, data any) error
	// RecordLLMCall stores a model call's usage and cost, updates the run's
	// live totals and emits llm_call and iteration_cost_update.
	RecordLLMCall(ctx context.Context, c LLMCall) error
	// Now is the engine's clock.
	Now() time.Time
}

// OutcomeWriter is implemented by a Host that can commit an executor's last
// writes of an iteration with the iteration's outcome, in the transaction
// that finishes it, instead of in a write transaction each. Executors reach
// it through WithOutcome, so that a Host without one (a test's) has the
// write made at once.
type OutcomeWriter interface {
	// WithOutcome queues write for the transaction that commits the
	// iteration's outcome, where it runs before the iteration's own events
	// (and again if that transaction is retried). When the attempt ends
	// without an outcome while its run still runs it (a shutdown), write
	// runs in a transaction of its own; when the run was canceled, moved
	// on or taken over, it is not made. write must fail only with the
	// store's errors, which fail the transaction: a write it cannot make
	// for another reason it leaves out and returns nil. Only writes that
	// nothing in the iteration reads again belong here (the iteration's
	// checks do not see them).
	WithOutcome(write func(ctx context.Context, tx Tx) error)
}

// CallEventWriter is implemented by a Host that can append an event in the
// transaction that records a model call, so that the event the reply leads
// to at once (the tool_call of its first call) needs no commit of its own.
// An executor whose Host has none records the call and emits the event.
type CallEventWriter interface {
	// RecordLLMCallWith records c as RecordLLMCall does, with an event of
	// typ and data appended after the call's own events in its
	// transaction, then counts the event as Emit does (a tool_call counts
	// against the run's tool-call budget). On an error neither is stored.
	RecordLLMCallWith(ctx context.Context, c LLMCall, typ EventType, data any) error
}

// WithOutcome queues write with the iteration's outcome when h can
// (OutcomeWriter), and otherwise makes it now in a transaction of its own
// through inTx.
func WithOutcome(ctx context.Context, h Host, inTx func(context.Context, func(Tx) error) error, write func(ctx context.Context, tx Tx) error) error {
	if ow, ok := h.(OutcomeWriter); ok {
		ow.WithOutcome(write)
		return nil
	}
	return inTx(ctx, func(tx Tx) error { return write(ctx, tx) })
}

// LLMCall is one model call's usage and cost. An executor reports it through
// Host.RecordLLMCall; the store records it with its run, iteration and time.
type LLMCall struct {
	ID               int64     `json:"-"`
	RunID            string    `json:"-"`
	Iteration        int       `json:"-"`
	CreatedAt        time.Time `json:"-"`
	Role             string    // planner | executor | repair | summarizer | agent
	Model            string
	PromptTokens     int64 // every prompt token, cached or not
	CompletionTokens int64 // every output token, reasoning included
	// CachedTokens and CacheWriteTokens are the parts of PromptTokens read
	// from and written to the provider's prompt cache; ReasoningTokens the
	// part of CompletionTokens spent reasoning.
	CachedTokens     int64
	CacheWriteTokens int64
	ReasoningTokens  int64
	CostUSD          float64
	Priced           bool
	// CostSource says where CostUSD comes from: CostSourceCLI (the agent
	// CLI's own figure) or CostSourceTable (the price table); "" when
	// unpriced.
	CostSource string
	// TableCostUSD is the price table's figure for a CLI-reported cost
	// that differs from it by more than 5%; 0 otherwise.
	TableCostUSD float64
	LatencyMS    int64
	Error        string
}

// Cost sources of an LLMCall.
const (
	CostSourceCLI   = "cli"
	CostSourceTable = "table"
)

// Status is the model's report_status (seed 001 §5.2).
type Status struct {
	ExitSignal         bool     `json:"exit_signal"`
	NeedsUserInput     bool     `json:"needs_user_input"`
	BlockingQuestions  []string `json:"blocking_questions,omitempty"`
	ProgressSummary    string   `json:"progress_summary"`
	RemainingWork      []string `json:"remaining_work,omitempty"`
	CompletionEvidence []string `json:"completion_evidence,omitempty"`
	NextActionHint     string   `json:"next_action_hint,omitempty"`
	Confidence         string   `json:"confidence,omitempty"`
}

// Promise kinds a command agent can print.
const (
	PromiseComplete = "COMPLETE"
	PromiseBlocked  = "BLOCKED"
)

// Promise is a command agent's <promise>…</promise> signal.
type Promise struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason,omitempty"` // the text after BLOCKED (or COMPLETE's summary)
}

// Ref names an object an iteration created or updated.
type Ref struct {
	Type  string `json:"type"` // document | task | file | commit
	ID    string `json:"id"`
	Title string `json:"title,omitempty"`
	Path  string `json:"path,omitempty"`
}

// Artifacts are what an iteration actually did, as seen by its tools.
type Artifacts struct {
	Created []Ref `json:"created,omitempty"`
	Updated []Ref `json:"updated,omitempty"`
}

// Fatal is an error that must stop the run instead of retrying it, such as
// an invalid API key.
type Fatal struct {
	Type   string `json:"type"` // a stop reason, usually "error"
	Detail string `json:"detail"`
	// Evidence is recorded with the stop, when there is some.
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// Result is what an executor returns for one iteration. A non-nil error from
// Iterate means the iteration failed; Result may still carry partial data.
type Result struct {
	Summary string
	// Output is the iteration's final agent output: the model's last text,
	// or a command agent's captured output.
	Output string
	// Status is the model's report_status; nil when it ended without one.
	Status *Status
	// Promise is a command agent's signal; nil when none.
	Promise *Promise
	// ToolCalls is how many tool calls (or agent runs) the iteration made.
	ToolCalls int
	// Error and ErrorFingerprint describe an iteration error (a failed tool,
	// a non-zero exit, a model error). The fingerprint feeds the breaker.
	Error            string
	ErrorFingerprint string
	// Fatal stops the run at once with its reason.
	Fatal *Fatal
	// Progress is the executor's progress fingerprint material (workspace
	// and task state); the engine adds check results and remaining work.
	Progress string
	// OutputHash and DiffHash are command-agent stall fingerprints.
	OutputHash string
	DiffHash   string
	// Stuck names a stuck tool-loop pattern, if one was seen.
	Stuck string
	// WaitForApproval asks the engine to wait for the person after this
	// iteration (approve_plan's plan iteration), with this explanation.
	WaitForApproval string
	// Artifacts are the documents, tasks and files created or updated.
	Artifacts Artifacts
	// RetryAfter is how long the model endpoint asked to be left alone
	// (its Retry-After) when the iteration ended on its failure.
	RetryAfter time.Duration
	// UsageUnknown says why the iteration's tokens could not be read (no
	// usage in the agent's output, output of another format); CostUnknown
	// why its cost could not be (a model without a price). A run with a
	// token or cost budget (cost only, for CostUnknown) then waits on the
	// person (WaitUsageUnknown) rather than going on blind.
	UsageUnknown string
	CostUnknown  string
}

// CheckResult is the outcome of one objective check.
type CheckResult struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Passed     bool   `json:"passed"`
	Errored    bool   `json:"errored,omitempty"` // could not be evaluated (bad config, crash)
	Message    string `json:"message"`
	OutputTail string `json:"output_tail,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// Score returns the check score of a set of results, 0..100 (seed 002
// appendix B): the share passed minus the share errored.
func Score(results []CheckResult) float64 {
	if len(results) == 0 {
		return 100
	}
	var passed, errored float64
	for _, r := range results {
		if r.Passed {
			passed++
		} else if r.Errored {
			errored++
		}
	}
	n := float64(len(results))
	return max(0, passed/n*100-errored/n*100)
}

// Gate decisions.
const (
	DecisionContinue = "continue"
	DecisionComplete = "complete"
	DecisionWait     = "wait"
	DecisionStop     = "stop"
	DecisionFail     = "fail"
)

// Decision is the gate's verdict after an iteration.
type Decision struct {
	Decision   string   `json:"decision"`
	Reasons    []string `json:"reasons"`
	StopReason string   `json:"stop_reason,omitempty"` // for stop, complete and fail
	// WaitReason is needs_input, blocked, turn_ended, approve_plan or
	// usage_unknown.
	WaitReason string   `json:"wait_reason,omitempty"`
	Questions  []string `json:"questions,omitempty"`
	// FalseCompletion is set when the agent claimed completion that the
	// gate refused.
	FalseCompletion bool            `json:"false_completion,omitempty"`
	Evidence        json.RawMessage `json:"evidence,omitempty"`
}

// Report is a finished run's report (seed 001 §4.1.1). WhatChanged and
// Artifacts are derived from what the tools actually did; Summary is the
// summarizer's narrative and may be empty when that call failed.
type Report struct {
	Title          string         `json:"title"`
	Objective      string         `json:"objective"`
	Status         string         `json:"status"`
	Summary        string         `json:"summary"`
	WhatChanged    WhatChanged    `json:"what_changed"`
	Artifacts      ReportArtifact `json:"artifacts"`
	Metrics        ReportMetrics  `json:"metrics"`
	StoppingReason StoppingReason `json:"stopping_reason"`
	NarrativeError string         `json:"narrative_error,omitempty"`
	// Forecasts says how close the forecasts of the run's iterations came
	// to what they spent; nil when none was forecast.
	Forecasts *ForecastAccuracy `json:"forecasts,omitempty"`
}

// ForecastAccuracy compares each forecast iteration's forecast with what
// it spent.
type ForecastAccuracy struct {
	Iterations         []ForecastVsActual `json:"iterations"`
	MeanAbsErrorUSD    float64            `json:"mean_abs_error_usd"`
	MeanAbsErrorTokens float64            `json:"mean_abs_error_tokens"`
}

// ForecastVsActual is one iteration's forecast and spend.
type ForecastVsActual struct {
	Iteration      int     `json:"iteration"`
	Basis          string  `json:"basis"`
	ForecastUSD    float64 `json:"forecast_usd"`
	ActualUSD      float64 `json:"actual_usd"`
	ForecastTokens int64   `json:"forecast_tokens"`
	ActualTokens   int64   `json:"actual_tokens"`
}

// WhatChanged lists what the run created and updated.
type WhatChanged struct {
	Created []Ref  `json:"created"`
	Updated []Ref  `json:"updated"`
	Linked  []Link `json:"linked"`
}

// Link relates two objects.
type Link struct {
	FromID       string `json:"from_id"`
	ToID         string `json:"to_id"`
	Relationship string `json:"relationship"`
}

// ReportArtifact lists the run's documents and tasks.
type ReportArtifact struct {
	Documents []Ref `json:"documents"`
	Tasks     []Ref `json:"tasks"`
}

// ReportMetrics is the report's metrics block.
type ReportMetrics struct {
	Iterations              int     `json:"iterations"`
	DurationMS              int64   `json:"duration_ms"`
	RunningMS               int64   `json:"running_ms"`
	TotalTokens             int64   `json:"total_tokens"`
	TotalCostUSD            float64 `json:"total_cost_usd"`
	UnpricedCalls           int     `json:"unpriced_calls"`
	ToolCalls               int     `json:"tool_calls"`
	FalseCompletionsBlocked int     `json:"false_completions_blocked"`
}

// StoppingReason is the report's stop reason.
type StoppingReason struct {
	Type   string `json:"type"`
	Detail string `json:"detail"`
}
