package spec

import (
	"encoding/json"
	"time"
)

// Event is one entry of a run's append-only log. Seq is gap-free per run; ID
// is the global order used by the per-user feed.
type Event struct {
	ID        int64           `json:"id"`
	RunID     string          `json:"run_id"`
	UserID    int64           `json:"-"`
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// Event types. Every event a run's log can hold is one of these.
const (
	EventRunCreated          = "run_created"
	EventRunStarted          = "run_started"
	EventRunContinued        = "run_continued" // a stopped run resumed, possibly with raised budgets
	EventRunRecovered        = "run_recovered" // an interrupted iteration was re-enqueued after a crash
	EventIterationStarted    = "iteration_started"
	EventLLMCall             = "llm_call"
	EventIterationCostUpdate = "iteration_cost_update"
	EventToolCall            = "tool_call"
	EventToolResult          = "tool_result"
	EventDocumentCreated     = "document_created"
	EventDocumentUpdated     = "document_updated"
	EventTaskUpdated         = "task_updated"
	EventCheckResult         = "check_result"
	EventGateDecision        = "gate_decision"
	EventIterationCompleted  = "iteration_completed"
	EventAgentOutput         = "agent_output"        // a batch of a command agent's live output
	EventAgentExit           = "agent_exit"          // how a command agent's process ended
	EventAgentOrphanKilled   = "agent_orphan_killed" // an agent left by a killed server was ended first
	EventIterationBackoff    = "iteration_backoff"   // the next iteration waits after an endpoint failure
	EventRunWaitingOnUser    = "run_waiting_on_user"
	EventUserResponse        = "user_response"
	EventMessageQueued       = "message_queued"
	EventRunStalled          = "run_stalled" // stopped by a breaker
	EventRunCompleted        = "run_completed"
	EventRunStopped          = "run_stopped"
	EventRunCanceled         = "run_canceled"
	EventRunFailed           = "run_failed"
	EventNotificationCreated = "notification_created"
)

// IsTerminalEvent reports whether an event of type typ ends its run for
// good: nothing of the run is appended after it.
func IsTerminalEvent(typ string) bool {
	return typ == EventRunCompleted || typ == EventRunCanceled || typ == EventRunFailed
}

// IsTerminal reports whether the event ends its run for good.
func (e *Event) IsTerminal() bool { return IsTerminalEvent(e.Type) }

// StatusEvent returns the event type that records a run's move into status,
// "" for statuses that have none (queued, running).
func StatusEvent(status string) string {
	switch status {
	case StatusWaiting:
		return EventRunWaitingOnUser
	case StatusCompleted:
		return EventRunCompleted
	case StatusStopped:
		return EventRunStopped
	case StatusCanceled:
		return EventRunCanceled
	case StatusFailed:
		return EventRunFailed
	}
	return ""
}
