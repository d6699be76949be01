package handlers

import (
	"encoding/json"
	"time"

	"homework/engine/spec"
)

// The JSON shapes of the API (DESIGN.md section 8). Field names are the
// contract: fields may be added, never renamed. Times are RFC 3339 in UTC,
// or null when not yet set.

// RunJSON is a run as GET /api/runs/{id} returns it.
type RunJSON struct {
	ID          string           `json:"id"`
	Status      string           `json:"status"`
	Objective   string           `json:"objective"`
	Mode        string           `json:"mode"`
	Executor    string           `json:"executor"`
	Iteration   int              `json:"iteration"`
	CreatedAt   *time.Time       `json:"created_at"`
	StartedAt   *time.Time       `json:"started_at"`
	UpdatedAt   *time.Time       `json:"updated_at"`
	CompletedAt *time.Time       `json:"completed_at"`
	StopReason  *spec.StopReason `json:"stop_reason"`
	Waiting     *spec.Waiting    `json:"waiting"`
	Metrics     spec.Metrics     `json:"metrics"`
	Budgets     *spec.Budgets    `json:"budgets"`
	// Forecast is the next iteration's forecast (GET /api/runs/{id} only;
	// null in lists, and when there is nothing to forecast from).
	Forecast    *spec.Forecast `json:"forecast"`
	Report      *spec.Report   `json:"report"`
	ParentRunID *string        `json:"parent_run_id"`
	Tags        []string       `json:"tags"`
	URL         string         `json:"url"`
	// Iterations and Workspace are present only when asked for with
	// ?include=iterations,workspace.
	Iterations *[]IterationJSON `json:"iterations,omitempty"`
	Workspace  *WorkspaceJSON   `json:"workspace,omitempty"`
}

// RunList is one page of GET /api/runs.
type RunList struct {
	Runs       []*RunJSON `json:"runs"`
	NextCursor *string    `json:"next_cursor"`
}

// IterationJSON is one iteration of a run.
type IterationJSON struct {
	Iteration int             `json:"iteration"`
	Attempt   int             `json:"attempt"`
	Status    string          `json:"status"`
	Summary   string          `json:"summary"`
	Error     string          `json:"error"`
	Gate      json.RawMessage `json:"gate"`
	Checks    json.RawMessage `json:"checks"`
	Metrics   spec.Metrics    `json:"metrics"`
	StartedAt *time.Time      `json:"started_at"`
	EndedAt   *time.Time      `json:"ended_at"`
	// Transcript is the iteration's transcript size (paged listing only).
	Transcript *spec.TranscriptInfo `json:"transcript,omitempty"`
}

// WorkspaceJSON is a run's research workspace: its document tree (without
// content) and its task checklist.
type WorkspaceJSON struct {
	RootDocumentID string         `json:"root_document_id"`
	Documents      []DocumentJSON `json:"documents"`
	Tasks          []TaskJSON     `json:"tasks"`
}

// DocumentJSON is a workspace document; Content is set only by
// GET /api/documents/{id}.
type DocumentJSON struct {
	ID          string     `json:"id"`
	RunID       string     `json:"run_id"`
	ParentID    *string    `json:"parent_id"`
	Path        string     `json:"path"`
	Kind        string     `json:"kind"`
	Title       string     `json:"title"`
	Description string     `json:"description"`
	Tags        []string   `json:"tags"`
	Iteration   int        `json:"iteration"`
	Size        int        `json:"size"`
	CreatedAt   *time.Time `json:"created_at"`
	UpdatedAt   *time.Time `json:"updated_at"`
	URL         string     `json:"url"`
	Content     *string    `json:"content,omitempty"`
}

// SearchHitJSON is one search result: the document's metadata and a snippet
// with the matches in [brackets].
type SearchHitJSON struct {
	DocumentJSON
	Snippet string `json:"snippet"`
}

// TaskJSON is one task of a run's checklist.
type TaskJSON struct {
	ID        string     `json:"id"`
	Title     string     `json:"title"`
	Detail    string     `json:"detail"`
	Status    string     `json:"status"`
	Passes    bool       `json:"passes"`
	Position  int        `json:"position"`
	UpdatedAt *time.Time `json:"updated_at"`
}

// NotificationJSON is one notification.
type NotificationJSON struct {
	ID        int64           `json:"id"`
	RunID     string          `json:"run_id"`
	Kind      string          `json:"kind"`
	Title     string          `json:"title"`
	Message   string          `json:"message"`
	ActionURL string          `json:"action_url"`
	Data      json.RawMessage `json:"data"`
	Read      bool            `json:"read"`
	ReadAt    *time.Time      `json:"read_at"`
	// ResolvedAt is set once the run moved on from what the notification
	// asked (answered, continued, canceled).
	ResolvedAt *time.Time `json:"resolved_at"`
	CreatedAt  *time.Time `json:"created_at"`
}

// NotificationList is one page of GET /api/notifications.
type NotificationList struct {
	Notifications []NotificationJSON `json:"notifications"`
	NextCursor    *string            `json:"next_cursor"`
	Unread        int                `json:"unread"`
}

// EventPage is one page of GET /api/runs/{id}/events as JSON.
type EventPage struct {
	Events       []*spec.Event `json:"events"`
	NextSinceSeq int64         `json:"next_since_seq"`
	HasMore      bool          `json:"has_more"`
}

// UserEventPage is one page of GET /api/events as JSON.
type UserEventPage struct {
	Events      []*spec.Event `json:"events"`
	NextSinceID int64         `json:"next_since_id"`
	HasMore     bool          `json:"has_more"`
}

func runJSON(r *spec.Run) *RunJSON {
	out := &RunJSON{
		ID: r.ID, Status: r.Status, Objective: r.Objective, Mode: r.Mode, Executor: r.Executor,
		Iteration: r.Iteration, CreatedAt: timeOrNil(r.CreatedAt), StartedAt: timeOrNil(r.StartedAt),
		UpdatedAt: timeOrNil(r.UpdatedAt), CompletedAt: timeOrNil(r.CompletedAt),
		StopReason: r.StopReason, Waiting: r.Waiting, Metrics: r.Metrics, Budgets: budgetsOf(r),
		Report: r.Report, URL: "/runs/" + r.ID, Tags: tagsOf(r),
	}
	if out.Metrics.ByModel == nil {
		out.Metrics.ByModel = map[string]spec.ModelUsage{}
	}
	if r.ParentRunID != "" {
		p := r.ParentRunID
		out.ParentRunID = &p
	}
	return out
}

func iterationJSON(it *spec.Iteration) IterationJSON {
	out := IterationJSON{
		Iteration: it.Iteration, Attempt: it.Attempt, Status: it.Status, Summary: it.Summary, Error: it.Error,
		Gate: rawOrNull(it.Gate), Checks: rawOrNull(it.Checks), Metrics: it.Metrics,
		StartedAt: timeOrNil(it.StartedAt), EndedAt: timeOrNil(it.EndedAt),
	}
	if out.Metrics.ByModel == nil {
		out.Metrics.ByModel = map[string]spec.ModelUsage{}
	}
	return out
}

func documentJSON(d *spec.Document, content bool) DocumentJSON {
	out := DocumentJSON{
		ID: d.ID, RunID: d.RunID, Path: d.Path, Kind: d.Kind, Title: d.Title, Description: d.Description,
		Tags: d.Tags, Iteration: d.Iteration, Size: len(d.Content), CreatedAt: timeOrNil(d.CreatedAt),
		UpdatedAt: timeOrNil(d.UpdatedAt), URL: "/runs/" + d.RunID + "/documents/" + d.ID,
	}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	if d.ParentID != "" {
		p := d.ParentID
		out.ParentID = &p
	}
	if content {
		c := d.Content
		out.Content = &c
	}
	return out
}

func taskJSON(t *spec.Task) TaskJSON {
	return TaskJSON{ID: t.ID, Title: t.Title, Detail: t.Detail, Status: t.Status, Passes: t.Passes,
		Position: t.Position, UpdatedAt: timeOrNil(t.UpdatedAt)}
}

func notificationJSON(n *spec.Notification) NotificationJSON {
	return NotificationJSON{ID: n.ID, RunID: n.RunID, Kind: n.Kind, Title: n.Title, Message: n.Message,
		ActionURL: n.ActionURL, Data: rawOrNull(n.Data), Read: !n.ReadAt.IsZero(), ReadAt: timeOrNil(n.ReadAt),
		ResolvedAt: timeOrNil(n.ResolvedAt), CreatedAt: timeOrNil(n.CreatedAt)}
}
