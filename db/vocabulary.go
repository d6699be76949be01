package db

import "homework/engine/spec"

// The domain vocabulary lives in package spec, which imports only the
// standard library. The names below keep code written against db.X
// compiling; db's own files use them unqualified. New code uses spec.X.

// Deprecated: use spec.Run.
type Run = spec.Run

// Deprecated: use spec.StopReason.
type StopReason = spec.StopReason

// Deprecated: use spec.Waiting.
type Waiting = spec.Waiting

// Deprecated: use spec.Metrics.
type Metrics = spec.Metrics

// Deprecated: use spec.ModelUsage.
type ModelUsage = spec.ModelUsage

// Deprecated: use spec.Iteration.
type Iteration = spec.Iteration

// Deprecated: use spec.Event.
type Event = spec.Event

// Deprecated: use spec.RunFilter.
type RunFilter = spec.RunFilter

// Deprecated: use spec.RunPage.
type RunPage = spec.RunPage

// Deprecated: use spec.Document.
type Document = spec.Document

// Deprecated: use spec.SearchHit.
type SearchHit = spec.SearchHit

// Deprecated: use spec.Task.
type Task = spec.Task

// Deprecated: use spec.Notification.
type Notification = spec.Notification

// Deprecated: use spec.InboxItem.
type InboxItem = spec.InboxItem

// Deprecated: use spec.LLMCall.
type LLMCall = spec.LLMCall

// Deprecated: use spec.User.
type User = spec.User

// Deprecated: use spec.APIToken.
type APIToken = spec.APIToken

// Deprecated: use spec.Session.
type Session = spec.Session

// Deprecated: use spec.Error.
type Error = spec.Error

// Run statuses. Deprecated: use spec.StatusQueued and its siblings.
const (
	StatusQueued    = spec.StatusQueued
	StatusRunning   = spec.StatusRunning
	StatusWaiting   = spec.StatusWaiting
	StatusStopped   = spec.StatusStopped
	StatusCompleted = spec.StatusCompleted
	StatusCanceled  = spec.StatusCanceled
	StatusFailed    = spec.StatusFailed
)

// Deprecated: use spec.Statuses.
var Statuses = spec.Statuses

// Deprecated: use spec.IsTerminalStatus.
func IsTerminalStatus(s string) bool { return spec.IsTerminalStatus(s) }

// Iteration statuses. Deprecated: use spec.IterRunning and its siblings.
const (
	IterRunning     = spec.IterRunning
	IterSucceeded   = spec.IterSucceeded
	IterFailed      = spec.IterFailed
	IterInterrupted = spec.IterInterrupted
	IterCanceled    = spec.IterCanceled
)

// Document kinds. Deprecated: use spec.DocWorkspace and its siblings.
const (
	DocWorkspace  = spec.DocWorkspace
	DocScratchpad = spec.DocScratchpad
	DocNote       = spec.DocNote
	DocSummary    = spec.DocSummary
	DocBranch     = spec.DocBranch
	DocPlan       = spec.DocPlan
	DocFolder     = spec.DocFolder
)

// Task statuses. Deprecated: use spec.TaskTodo and its siblings.
const (
	TaskTodo    = spec.TaskTodo
	TaskDoing   = spec.TaskDoing
	TaskDone    = spec.TaskDone
	TaskBlocked = spec.TaskBlocked
)

// Inbox kinds. Deprecated: use spec.InboxAnswer and spec.InboxMessage.
const (
	InboxAnswer  = spec.InboxAnswer
	InboxMessage = spec.InboxMessage
)

// Error codes. Deprecated: use spec.EINVALID and its siblings.
const (
	EINVALID      = spec.EINVALID
	ENOTFOUND     = spec.ENOTFOUND
	ECONFLICT     = spec.ECONFLICT
	EUNAUTHORIZED = spec.EUNAUTHORIZED
	EFORBIDDEN    = spec.EFORBIDDEN
	ELIMIT        = spec.ELIMIT
	EUNAVAILABLE  = spec.EUNAVAILABLE
	EINTERNAL     = spec.EINTERNAL
	ETOOLARGE     = spec.ETOOLARGE
	EUNSUPPORTED  = spec.EUNSUPPORTED
)

// Deprecated: use spec.Errorf.
func Errorf(code, format string, args ...any) *Error { return spec.Errorf(code, format, args...) }

// Deprecated: use spec.FieldError.
func FieldError(field, format string, args ...any) *Error {
	return spec.FieldError(field, format, args...)
}

// Deprecated: use spec.ErrorCode.
func ErrorCode(err error) string { return spec.ErrorCode(err) }

// Deprecated: use spec.ErrorMessage.
func ErrorMessage(err error) string { return spec.ErrorMessage(err) }

// Deprecated: use spec.ErrorField.
func ErrorField(err error) string { return spec.ErrorField(err) }

// Effectiveness report vocabulary, kept here for older callers.
type (
	// Deprecated: use spec.StatsFilter.
	StatsFilter = spec.StatsFilter
	// Deprecated: use spec.StatsRow.
	StatsRow = spec.StatsRow
	// Deprecated: use spec.TagCount.
	TagCount = spec.TagCount
)
