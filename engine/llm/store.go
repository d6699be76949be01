package llm

import (
	"context"

	"homework/engine/spec"
)

// Store is what the executor reads outside a transaction: the run, its
// workspace and checklist, and the user's documents for search. The SQLite
// store (*db.DB) and the PostgreSQL store (*pg.DB) implement it. Methods
// taking a user id return only that user's objects.
type Store interface {
	// FindRunByID returns the run whoever owns it; ENOTFOUND when missing.
	FindRunByID(ctx context.Context, id string) (*spec.Run, error)
	ListRunDocuments(ctx context.Context, userID int64, runID string) ([]*spec.Document, error)
	FindRunDocumentByPath(ctx context.Context, userID int64, runID, path string) (*spec.Document, error)
	ListTasks(ctx context.Context, userID int64, runID string) ([]*spec.Task, error)
	// SearchDocuments runs a full-text query over the user's documents, all
	// runs when runID is empty.
	SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]spec.SearchHit, error)
}

// StoreTx is what the executor writes in one transaction of the store: the
// workspace documents and checklist tasks it changes, the events that record
// them and the summarizer's model calls. *db.Tx and *pg.Tx implement it, and
// so does the engine's transaction, which StartRun is given.
type StoreTx interface {
	AppendEvent(ctx context.Context, runID, typ string, data any) (*spec.Event, error)
	FindRun(ctx context.Context, id string) (*spec.Run, error)
	FindDocumentByPath(ctx context.Context, runID, path string) (*spec.Document, error)
	ListRunDocuments(ctx context.Context, runID string) ([]*spec.Document, error)
	// PutDocument inserts the document or updates the one at its path;
	// created is true for an insert.
	PutDocument(ctx context.Context, doc *spec.Document) (created bool, err error)
	ListTasks(ctx context.Context, runID string) ([]*spec.Task, error)
	InsertTask(ctx context.Context, t *spec.Task) error
	UpdateTask(ctx context.Context, t *spec.Task) error
	InsertLLMCall(ctx context.Context, c *spec.LLMCall) error
}

// InTxFunc runs fn in one write transaction of the store, committing when
// fn returns nil and rolling back otherwise.
type InTxFunc func(ctx context.Context, fn func(tx StoreTx) error) error

// Over returns the InTxFunc of a store whose write transactions have the
// concrete type T, such as *db.DB (T = *db.Tx) or *pg.DB (T = *pg.Tx).
func Over[T StoreTx](s interface {
	WriteTx(ctx context.Context, fn func(tx T) error) error
}) InTxFunc {
	return func(ctx context.Context, fn func(tx StoreTx) error) error {
		return s.WriteTx(ctx, func(tx T) error { return fn(tx) })
	}
}
