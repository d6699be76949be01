package spec

import (
	"encoding/json"
	"time"
)

// The payload of each event type: an event's Data is the JSON of one of
// these (Events lists which goes with which). Fields without omitempty are
// always present.

// RunCreatedData is run_created's payload.
type RunCreatedData struct {
	Objective string          `json:"objective"`
	Mode      string          `json:"mode"`
	Executor  string          `json:"executor"`
	Config    json.RawMessage `json:"config"`
}

// RunStartedData is run_started's payload: the iteration the run starts
// with, and whether it resumes (a queued run promoted, an answered or
// continued one, one whose host came back).
type RunStartedData struct {
	Iteration int    `json:"iteration"`
	Resumed   bool   `json:"resumed"`
	Reason    string `json:"reason,omitempty"` // host_available when its host came back
}

// RunContinuedData is run_continued's payload: the budgets it goes on with.
type RunContinuedData struct {
	Budgets Budgets `json:"budgets"`
}

// AttemptData is the payload of run_recovered: the iteration and the
// attempt that will run it.
type AttemptData struct {
	Iteration int `json:"iteration"`
	Attempt   int `json:"attempt"`
}

// IterationStartedData is iteration_started's payload.
type IterationStartedData struct {
	Iteration int `json:"iteration"`
	Attempt   int `json:"attempt"`
	Inbox     int `json:"inbox"` // the person's answers and messages it is given
}

// LLMCallData is llm_call's payload: one model call's usage.
type LLMCallData struct {
	Iteration        int     `json:"iteration"`
	Role             string  `json:"role"`
	Model            string  `json:"model"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens,omitempty"`
	CacheWriteTokens int64   `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64   `json:"reasoning_tokens,omitempty"`
	CostUSD          float64 `json:"cost_usd"`
	Priced           bool    `json:"priced"`
	CostSource       string  `json:"cost_source,omitempty"`
	TableCostUSD     float64 `json:"table_cost_usd,omitempty"`
	LatencyMS        int64   `json:"latency_ms"`
	Error            string  `json:"error"`
}

// CostUpdateData is iteration_cost_update's payload: the iteration's and
// the run's totals after a model call.
type CostUpdateData struct {
	Iteration        int                   `json:"iteration"`
	IterationTokens  int64                 `json:"iteration_tokens"`
	IterationCostUSD float64               `json:"iteration_cost_usd"`
	TokensTotal      int64                 `json:"tokens_total"`
	CostTotalUSD     float64               `json:"cost_total_usd"`
	UnpricedCalls    int                   `json:"unpriced_calls"`
	ByModel          map[string]ModelUsage `json:"by_model"`
}

// ToolCallData is tool_call's payload.
type ToolCallData struct {
	Iteration int    `json:"iteration,omitempty"`
	Tool      string `json:"tool"`
	CallID    string `json:"call_id,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Branch    string `json:"branch,omitempty"` // the delegated branch that called it
	Role      string `json:"role,omitempty"`
	N         int    `json:"n,omitempty"` // a script step's call number
}

// ToolResultData is tool_result's payload.
type ToolResultData struct {
	Iteration int    `json:"iteration,omitempty"`
	Tool      string `json:"tool"`
	CallID    string `json:"call_id,omitempty"`
	OK        bool   `json:"ok"`
	Repaired  bool   `json:"repaired,omitempty"`
	Result    string `json:"result"`
	Branch    string `json:"branch,omitempty"`
	Role      string `json:"role,omitempty"`
}

// DocumentData is the payload of document_created and document_updated.
type DocumentData struct {
	DocumentID string `json:"document_id"`
	Path       string `json:"path"`
	Kind       string `json:"kind,omitempty"`
	Title      string `json:"title"`
	ParentID   string `json:"parent_id,omitempty"`
	Iteration  int    `json:"iteration,omitempty"`
	Size       int    `json:"size,omitempty"`
}

// TaskData is task_updated's payload.
type TaskData struct {
	TaskID  string `json:"task_id"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Passes  bool   `json:"passes"`
	Created bool   `json:"created"`
}

// CheckResultData is check_result's payload.
type CheckResultData struct {
	Iteration int         `json:"iteration"`
	Check     CheckResult `json:"check"`
}

// GateDecisionData is gate_decision's payload: what the gate decided after
// an iteration, and why.
type GateDecisionData struct {
	Iteration       int             `json:"iteration"`
	Decision        string          `json:"decision"`
	Reasons         []string        `json:"reasons"`
	StopReason      string          `json:"stop_reason"`
	WaitReason      string          `json:"wait_reason"`
	Questions       []string        `json:"questions"`
	FalseCompletion bool            `json:"false_completion"`
	Evidence        json.RawMessage `json:"evidence"`
	CheckScore      float64         `json:"check_score"`
}

// IterationCompletedData is iteration_completed's payload.
type IterationCompletedData struct {
	Iteration  int           `json:"iteration"`
	Attempt    int           `json:"attempt"`
	Status     string        `json:"status"`
	Summary    string        `json:"summary,omitempty"`
	Error      string        `json:"error"`
	Metrics    Metrics       `json:"metrics"`
	Decision   string        `json:"decision,omitempty"`
	RunMetrics *RunSoFarData `json:"run_metrics,omitempty"`
}

// RunSoFarData is the run's totals in an iteration_completed event.
type RunSoFarData struct {
	Iterations   int     `json:"iterations"`
	TokensTotal  int64   `json:"tokens_total"`
	CostTotalUSD float64 `json:"cost_total_usd"`
}

// AgentOutputData is agent_output's payload: a batch of a command agent's
// live output.
type AgentOutputData struct {
	Iteration int    `json:"iteration"`
	Seq       int    `json:"seq"`
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"` // the last batch, cut at the output cap
}

// AgentExitData is agent_exit's payload: how a command agent's process
// ended.
type AgentExitData struct {
	Iteration    int    `json:"iteration"`
	Status       string `json:"status"`
	ExitCode     int    `json:"exit_code"`
	TimedOut     bool   `json:"timed_out"`
	DurationMS   int64  `json:"duration_ms"`
	OutputBytes  int64  `json:"output_bytes"`
	DroppedBytes int64  `json:"dropped_bytes"`
}

// OrphanKilledData is agent_orphan_killed's payload.
type OrphanKilledData struct {
	Iteration int `json:"iteration"`
	PGID      int `json:"pgid"`
}

// OutputWarningData is agent_output_warning's payload: the agent's output
// did not fully match its declared format.
type OutputWarningData struct {
	Iteration    int      `json:"iteration"`
	Format       string   `json:"format"`
	Warnings     []string `json:"warnings"`
	Degraded     bool     `json:"degraded,omitempty"`
	LikelyFormat string   `json:"likely_format,omitempty"`
}

// BackoffData is iteration_backoff's payload.
type BackoffData struct {
	Iteration int       `json:"iteration"`
	DelayMS   int64     `json:"delay_ms"`
	NotBefore time.Time `json:"not_before"`
}

// TranscriptData is transcript's payload: lines stored for an iteration.
type TranscriptData struct {
	Iteration    int   `json:"iteration"`
	Attempt      int   `json:"attempt"`
	FromSeq      int64 `json:"from_seq"`
	ToSeq        int64 `json:"to_seq"`
	Lines        int64 `json:"lines"`
	Bytes        int64 `json:"bytes"`
	DroppedBytes int64 `json:"dropped_bytes"`
}

// StatusData is the payload of the events that move a run out of running:
// run_waiting_on_user, run_stalled, run_stopped, run_completed,
// run_canceled and run_failed.
type StatusData struct {
	Status     string      `json:"status"`
	Iteration  int         `json:"iteration"`
	Metrics    Metrics     `json:"metrics"`
	StopReason *StopReason `json:"stop_reason,omitempty"`
	Reason     string      `json:"reason,omitempty"`    // a wait's reason
	Questions  []string    `json:"questions,omitempty"` // a wait's questions
	Detail     string      `json:"detail,omitempty"`    // a host_unavailable wait's host
}

// UserResponseData is user_response's payload.
type UserResponseData struct {
	InboxID int64    `json:"inbox_id"`
	Answers []string `json:"answers"`
}

// MessageQueuedData is message_queued's payload.
type MessageQueuedData struct {
	InboxID int64  `json:"inbox_id"`
	Body    string `json:"body"`
}

// NotificationData is notification_created's payload.
type NotificationData struct {
	ID        int64  `json:"id"`
	Kind      string `json:"kind"`
	Title     string `json:"title"`
	Message   string `json:"message"`
	ActionURL string `json:"action_url"`
}
