package handlers

import (
	"context"
	"time"

	"homework/engine/spec"
)

// ReadStore is what a page view reads. Inside ReadTx every read sees one
// snapshot of the database, so a page assembled from several reads shows
// one moment: never a run's status from after its terminal event beside a
// timeline from before it.
type ReadStore = spec.ReadStore

// Store is what the handlers read from the database directly; every state
// change goes through the engine. *db.DB implements it, and so will the
// PostgreSQL store. Every method that takes a user id returns only that
// user's objects: another user's run, document or notification is
// ENOTFOUND, never a different error.
type Store interface {
	// Now is the store's clock, the one its rows are stamped with.
	Now() time.Time
	// Ping reports whether the store answers (readiness).
	Ping(ctx context.Context) error

	// ReadStore's methods read from whichever connection is free, each
	// statement its own moment; ReadTx runs fn with reads that all see one
	// snapshot. A page view reads through ReadTx only.
	ReadStore
	ReadTx(ctx context.Context, fn func(r ReadStore) error) error

	// Users, sessions and tokens. Secrets are stored hashed only.
	CountUsers(ctx context.Context) (int, error)
	CreateFirstUser(ctx context.Context, email, passwordHash string) (*spec.User, error)
	FindUserByEmail(ctx context.Context, email string) (*spec.User, error)
	FindUserByToken(ctx context.Context, secret string) (*spec.User, error)
	CreateSession(ctx context.Context, userID int64, ttl time.Duration) (string, *spec.Session, error)
	FindSession(ctx context.Context, secret string) (*spec.Session, *spec.User, error)
	DeleteSession(ctx context.Context, secret string) error
	CreateAPIToken(ctx context.Context, userID int64, name string) (string, *spec.APIToken, error)
	ListAPITokens(ctx context.Context, userID int64) ([]*spec.APIToken, error)
	RevokeAPIToken(ctx context.Context, userID, tokenID int64) error
	// LiveCredentials reports, in one query, which API tokens (by the hash
	// of their secret: present, unrevoked) and sessions (by the hash of
	// theirs: present, unexpired) still authenticate. Open event streams
	// re-check their credentials with it.
	LiveCredentials(ctx context.Context, tokenHashes, sessionHashes []string) (tokens, sessions map[string]bool, err error)

	// Runs and their iterations.
	FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error)
	ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error)
	ListReports(ctx context.Context, userID int64, cursor string, limit int) (*spec.RunPage, error)
	ListChildRuns(ctx context.Context, userID int64, parentID string) ([]*spec.Run, error)
	CountRunsByStatus(ctx context.Context, userID int64) (map[string]int, error)
	ListIterations(ctx context.Context, userID int64, runID string) ([]*spec.Iteration, error)
	// PageIterations pages a run's iterations with their transcript info.
	PageIterations(ctx context.Context, userID int64, runID, cursor string, limit int, desc bool) (*spec.IterationPage, error)

	// Transcripts and the run's action events (the timeline).
	FindTranscript(ctx context.Context, userID int64, runID string, iteration int, afterSeq int64, limit int) (*spec.Transcript, error)
	SearchTranscripts(ctx context.Context, userID int64, runID, q string, limit int) ([]*spec.TranscriptLine, error)
	ListRunActions(ctx context.Context, runID string, since time.Time) ([]*spec.Event, error)

	// The effectiveness report: the rows behind its figures, and the tags
	// in use.
	StatsRows(ctx context.Context, userID int64, f spec.StatsFilter) ([]spec.StatsRow, error)
	ListUserTags(ctx context.Context, userID int64) ([]spec.TagCount, error)

	// Events: a run's log by seq, and the user's feed by global id. A
	// user's event ids become visible in increasing order (a reader that
	// sees an id sees every smaller one of that user that will ever commit),
	// and the bus gets them in that order, so following the feed by id
	// skips nothing.
	ListRunEvents(ctx context.Context, userID int64, runID string, afterSeq int64, limit int) ([]*spec.Event, error)
	LastSeq(ctx context.Context, runID string) (int64, error)
	ListUserEvents(ctx context.Context, userID, afterID int64, limit int) ([]*spec.Event, error)
	LastUserEventID(ctx context.Context, userID int64) (int64, error)

	// A run's workspace: documents, search and tasks.
	FindDocument(ctx context.Context, userID int64, id string) (*spec.Document, error)
	ListRunDocuments(ctx context.Context, userID int64, runID string) ([]*spec.Document, error)
	SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]spec.SearchHit, error)
	ListTasks(ctx context.Context, userID int64, runID string) ([]*spec.Task, error)

	// Notifications.
	ListNotifications(ctx context.Context, userID int64, beforeID int64, limit int) ([]*spec.Notification, error)
	CountUnread(ctx context.Context, userID int64) (int, error)
	MarkNotificationRead(ctx context.Context, userID, id int64) error
	// MarkRunNotificationsRead marks every notification of the run read and
	// returns how many changed.
	MarkRunNotificationsRead(ctx context.Context, userID int64, runID string) (int, error)
}
