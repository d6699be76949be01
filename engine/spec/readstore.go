package spec

import (
	"context"
	"time"
)

// ReadStore is what one page view reads: the store's read methods, all
// answered from one snapshot when it is the argument of a ReadTx. Every
// method that takes a user id returns only that user's objects.
//
// Both stores take the snapshot at the transaction's first read (SQLite's
// deferred BEGIN and PostgreSQL's REPEATABLE READ alike): what any later
// read sees is the database as of that moment, whatever is committed
// meanwhile.
type ReadStore interface {
	FindRun(ctx context.Context, userID int64, id string) (*Run, error)
	ListRuns(ctx context.Context, userID int64, f RunFilter) (*RunPage, error)
	ListReports(ctx context.Context, userID int64, cursor string, limit int) (*RunPage, error)
	ListChildRuns(ctx context.Context, userID int64, parentID string) ([]*Run, error)
	CountRunsByStatus(ctx context.Context, userID int64) (map[string]int, error)
	ListIterations(ctx context.Context, userID int64, runID string) ([]*Iteration, error)
	PageIterations(ctx context.Context, userID int64, runID, cursor string, limit int, desc bool) (*IterationPage, error)
	FindTranscript(ctx context.Context, userID int64, runID string, iteration int, afterSeq int64, limit int) (*Transcript, error)
	ListRunActions(ctx context.Context, runID string, since time.Time) ([]*Event, error)
	ListRunEvents(ctx context.Context, userID int64, runID string, afterSeq int64, limit int) ([]*Event, error)
	// ListRunEventsBefore returns up to limit of the run's events with seq
	// below beforeSeq (any when beforeSeq <= 0), newest first, only of type
	// typ when typ is not "".
	ListRunEventsBefore(ctx context.Context, userID int64, runID, typ string, beforeSeq int64, limit int) ([]*Event, error)
	// ListRunEventTypes returns the types of the run's events, each once,
	// in name order.
	ListRunEventTypes(ctx context.Context, userID int64, runID string) ([]string, error)
	LastSeq(ctx context.Context, runID string) (int64, error)
	LastUserEventID(ctx context.Context, userID int64) (int64, error)
	FindDocument(ctx context.Context, userID int64, id string) (*Document, error)
	ListRunDocuments(ctx context.Context, userID int64, runID string) ([]*Document, error)
	// ListRunDocumentsOutside is ListRunDocuments without the documents
	// inside any of folders (paths starting with the folder and "/"); the
	// folder documents themselves are listed.
	ListRunDocumentsOutside(ctx context.Context, userID int64, runID string, folders ...string) ([]*Document, error)
	ListTasks(ctx context.Context, userID int64, runID string) ([]*Task, error)
	ListNotifications(ctx context.Context, userID int64, beforeID int64, limit int) ([]*Notification, error)
	CountUnread(ctx context.Context, userID int64) (int, error)
	// CountRunUnread counts the unread notifications of one of the user's
	// runs.
	CountRunUnread(ctx context.Context, userID int64, runID string) (int, error)
	ListAPITokens(ctx context.Context, userID int64) ([]*APIToken, error)
	// ListWebhooks returns the user's endpoints, newest first.
	ListWebhooks(ctx context.Context, userID int64) ([]*WebhookEndpoint, error)
	// ListWebhookDeliveries returns up to limit of the deliveries of one of
	// the user's endpoints, newest first; another user's endpoint is
	// ENOTFOUND.
	ListWebhookDeliveries(ctx context.Context, userID, endpointID int64, limit int) ([]*WebhookDelivery, error)
	ListUserTags(ctx context.Context, userID int64) ([]TagCount, error)
	StatsRows(ctx context.Context, userID int64, f StatsFilter) ([]StatsRow, error)
	UsageReads
}

// ReadTxer runs fn with a ReadStore whose reads all see one snapshot of
// the database. fn must not write, and must read only through its
// argument (the snapshot holds a connection of its own).
type ReadTxer interface {
	ReadTx(ctx context.Context, fn func(r ReadStore) error) error
}
