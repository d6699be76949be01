package spec

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Event is one entry of a run's append-only log. Seq is gap-free per run; ID
// is the global order used by the per-user feed.
type Event struct {
	ID        int64           `json:"id"`
	RunID     string          `json:"run_id"`
	UserID    int64           `json:"-"`
	Seq       int64           `json:"seq"`
	Type      EventType       `json:"type"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// EventType names what an event records.
type EventType string

// Event types: every event a run's log can hold is one of these. Events
// below lists each with its meaning and its payload type; the browser's
// lists are generated from it (go generate, in this package).
const (
	EventRunCreated          EventType = "run_created"
	EventRunStarted          EventType = "run_started"
	EventRunContinued        EventType = "run_continued"
	EventRunRecovered        EventType = "run_recovered"
	EventIterationStarted    EventType = "iteration_started"
	EventLLMCall             EventType = "llm_call"
	EventIterationCostUpdate EventType = "iteration_cost_update"
	EventToolCall            EventType = "tool_call"
	EventToolResult          EventType = "tool_result"
	EventDocumentCreated     EventType = "document_created"
	EventDocumentUpdated     EventType = "document_updated"
	EventTaskUpdated         EventType = "task_updated"
	EventCheckResult         EventType = "check_result"
	EventGateDecision        EventType = "gate_decision"
	EventIterationCompleted  EventType = "iteration_completed"
	EventTranscript          EventType = "transcript"
	EventAgentOutput         EventType = "agent_output"
	EventAgentExit           EventType = "agent_exit"
	EventAgentOrphanKilled   EventType = "agent_orphan_killed"
	EventAgentOutputWarning  EventType = "agent_output_warning"
	EventIterationBackoff    EventType = "iteration_backoff"
	EventRunWaitingOnUser    EventType = "run_waiting_on_user"
	EventUserResponse        EventType = "user_response"
	EventMessageQueued       EventType = "message_queued"
	EventRunStalled          EventType = "run_stalled"
	EventRunCompleted        EventType = "run_completed"
	EventRunStopped          EventType = "run_stopped"
	EventRunCanceled         EventType = "run_canceled"
	EventRunFailed           EventType = "run_failed"
	EventNotificationCreated EventType = "notification_created"
)

// The parts of the pages that an event refreshes (EventInfo.Views).
const (
	ViewStatus   = "status"   // a run page's status and metrics
	ViewControls = "controls" // a run page's controls (answer, cancel, continue)
	ViewTimeline = "timeline" // a run page's timeline of actions (ActionEventTypes)
	ViewWork     = "work"     // a run page's workspace and checklist
	ViewRunList  = "runs"     // the run list
	ViewUnread   = "unread"   // the unread notifications count
)

// EventInfo describes an event type.
type EventInfo struct {
	Type EventType
	// Meaning says what the event records.
	Meaning string
	// Data is a value of the payload's type: an event's Data is its JSON.
	Data any
	// Views are the page parts the event refreshes.
	Views []string
}

// Events lists every event type, in the order of a run's life.
var Events = []EventInfo{
	{EventRunCreated, "The run was created with its configuration.", RunCreatedData{}, []string{ViewRunList}},
	{EventRunStarted, "The run started or resumed running (it holds a slot).", RunStartedData{}, []string{ViewStatus, ViewControls, ViewRunList}},
	{EventRunContinued, "A stopped run was continued, possibly with raised budgets.", RunContinuedData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewRunList}},
	{EventRunRecovered, "An interrupted iteration was given to a new attempt after a crash, a pause or a lost lease.", AttemptData{}, nil},
	{EventIterationStarted, "An attempt of an iteration began.", IterationStartedData{}, []string{ViewStatus, ViewTimeline}},
	{EventLLMCall, "A model call's usage was recorded.", LLMCallData{}, nil},
	{EventIterationCostUpdate, "The iteration's and the run's usage after a model call.", CostUpdateData{}, []string{ViewStatus, ViewRunList}},
	{EventToolCall, "The agent called a tool.", ToolCallData{}, nil},
	{EventToolResult, "A tool call's result.", ToolResultData{}, nil},
	{EventDocumentCreated, "A workspace document was created.", DocumentData{}, []string{ViewWork}},
	{EventDocumentUpdated, "A workspace document was updated.", DocumentData{}, []string{ViewWork}},
	{EventTaskUpdated, "A checklist task was added or changed.", TaskData{}, []string{ViewWork}},
	{EventCheckResult, "A completion check's result after an iteration.", CheckResultData{}, nil},
	{EventGateDecision, "The gate's decision after an iteration, with its reasons.", GateDecisionData{}, []string{ViewStatus, ViewTimeline}},
	{EventIterationCompleted, "An iteration ended (succeeded, failed, interrupted or canceled).", IterationCompletedData{}, []string{ViewStatus, ViewTimeline, ViewRunList}},
	{EventTranscript, "Lines were added to an iteration's transcript.", TranscriptData{}, nil},
	{EventAgentOutput, "A batch of a command agent's live output.", AgentOutputData{}, nil},
	{EventAgentExit, "How a command agent's process ended.", AgentExitData{}, nil},
	{EventAgentOrphanKilled, "An agent left running by a killed server was ended before the next one started.", OrphanKilledData{}, nil},
	{EventAgentOutputWarning, "A command agent's output did not fully match its declared format.", OutputWarningData{}, nil},
	{EventIterationBackoff, "The next iteration waits after a model endpoint failure.", BackoffData{}, nil},
	{EventRunWaitingOnUser, "The run waits for the person: a question, a plan to approve, a turn, a host.", StatusData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewRunList, ViewUnread}},
	{EventUserResponse, "The person answered the run.", UserResponseData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewRunList}},
	{EventMessageQueued, "The person sent the run a message for its next iteration.", MessageQueuedData{}, []string{ViewStatus, ViewTimeline}},
	{EventRunStalled, "A breaker stopped the run (no progress, stuck); it can be continued.", StatusData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewRunList}},
	{EventRunStopped, "The run stopped (a budget, a breaker, an outage); it can be continued.", StatusData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewRunList, ViewUnread}},
	{EventRunCompleted, "The run completed: the objective was met and its checks passed.", StatusData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewWork, ViewRunList, ViewUnread}},
	{EventRunCanceled, "The run was canceled.", StatusData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewWork, ViewRunList, ViewUnread}},
	{EventRunFailed, "The run failed.", StatusData{}, []string{ViewStatus, ViewControls, ViewTimeline, ViewWork, ViewRunList, ViewUnread}},
	{EventNotificationCreated, "A notification for the person was created.", NotificationData{}, []string{ViewUnread}},
}

// EventsFor returns the event types that refresh view, in Events' order.
func EventsFor(view string) []EventType {
	var out []EventType
	for _, e := range Events {
		for _, v := range e.Views {
			if v == view {
				out = append(out, e.Type)
			}
		}
	}
	return out
}

// AppendJSON appends the event's wire JSON to b, on one line: {"id",
// "run_id", "seq", "type", "data", "created_at"}. It is the one place that
// writes an event's JSON: the API's pages (MarshalJSON) and every SSE
// stream's data lines use it.
func (e *Event) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, e.ID, 10)
	b = append(b, `,"run_id":`...)
	b = appendJSONString(b, e.RunID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, string(e.Type))
	b = append(b, `,"data":`...)
	b = appendOneLineJSON(b, e.Data)
	b = append(b, `,"created_at":"`...)
	b = e.CreatedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

// MarshalJSON is AppendJSON.
func (e *Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendOneLineJSON appends raw JSON without line breaks (null when empty).
func appendOneLineJSON(b []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return append(b, raw...)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		q, _ := json.Marshal(string(raw))
		return append(b, q...)
	}
	return append(b, out.Bytes()...)
}

// IsTerminalEvent reports whether an event of type typ ends its run for
// good: nothing of the run is appended after it.
func IsTerminalEvent(typ EventType) bool {
	return typ == EventRunCompleted || typ == EventRunCanceled || typ == EventRunFailed
}

// IsTerminal reports whether the event ends its run for good.
func (e *Event) IsTerminal() bool { return IsTerminalEvent(e.Type) }

// StatusEvent returns the event type that records a run's move into status,
// "" for statuses that have none (queued, running).
func StatusEvent(status string) EventType {
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
