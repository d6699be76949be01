package spec

import (
	"encoding/json"
	"time"
)

// Document kinds.
const (
	DocWorkspace  = "workspace"
	DocScratchpad = "scratchpad"
	DocNote       = "note"
	DocSummary    = "summary"
	DocBranch     = "branch"
	DocPlan       = "plan"
	DocFolder     = "folder"
)

// Document is a node of a run's research workspace tree.
type Document struct {
	ID          string
	RunID       string
	UserID      int64
	ParentID    string
	Path        string // relative to the run's root, such as "branches/b1/findings.md"; "" for the root
	Kind        string
	Title       string
	Description string
	Content     string
	Tags        []string
	Iteration   int
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// SearchHit is one full-text search result.
type SearchHit struct {
	Document *Document
	Snippet  string
}

// Task statuses.
const (
	TaskTodo    = "todo"
	TaskDoing   = "doing"
	TaskDone    = "done"
	TaskBlocked = "blocked"
)

// Task is one item of a run's checklist.
type Task struct {
	ID        string
	RunID     string
	Title     string
	Detail    string
	Status    string
	Passes    bool
	Position  int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Notification tells a user something happened to one of their runs.
type Notification struct {
	ID        int64           `json:"id"`
	UserID    int64           `json:"-"`
	RunID     string          `json:"run_id"`
	Kind      string          `json:"kind"`
	Title     string          `json:"title"`
	Message   string          `json:"message"`
	ActionURL string          `json:"action_url"`
	Data      json.RawMessage `json:"data"`
	ReadAt    time.Time       `json:"-"`
	// ResolvedAt is when the run moved on from what this notification
	// asked of the person (answered, continued, canceled); zero if not.
	ResolvedAt time.Time `json:"-"`
	CreatedAt  time.Time `json:"created_at"`
}

// User is an account.
type User struct {
	ID           int64
	Email        string
	PasswordHash string
	IsAdmin      bool
	CreatedAt    time.Time
}

// APIToken is a bearer token's metadata; the secret is stored hashed only.
type APIToken struct {
	ID         int64
	UserID     int64
	Name       string
	CreatedAt  time.Time
	LastUsedAt time.Time
	RevokedAt  time.Time
}

// Session is a signed-in browser session.
type Session struct {
	UserID    int64
	CSRFToken string
	ExpiresAt time.Time
}

// Inbox kinds.
const (
	InboxAnswer  = "answer"
	InboxMessage = "message"
)
