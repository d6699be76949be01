package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"homework/engine/spec"
)

// Store is what the engine reads and writes outside a transaction. The
// SQLite store (db) and the PostgreSQL store (db/pg) implement it. Methods taking a user id return
// only that user's objects (another user's run is ENOTFOUND).
type Store interface {
	// AppendEvent appends a non-state event (tool calls, output) outside
	// any other transaction; concurrent appends may be group-committed.
	AppendEvent(ctx context.Context, runID, typ string, data any) (*spec.Event, error)
	FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error)
	CountAllRunsByStatus(ctx context.Context) (map[string]int, error)
	// QueueDepth is how many iterate jobs wait to be worked.
	QueueDepth(ctx context.Context) (int, error)

	// RunningRuns lists every running run's lease, for recovery.
	RunningRuns(ctx context.Context) ([]spec.RunLease, error)
	// RenewLease extends owner's lease on a running run; false when the
	// run is no longer running under owner.
	RenewLease(ctx context.Context, runID, owner string, until time.Time) (bool, error)
	// RenewAttemptLease extends owner's lease only while (iteration,
	// attempt) is still the run's current attempt; false otherwise.
	RenewAttemptLease(ctx context.Context, runID, owner string, iteration, attempt int, until time.Time) (bool, error)
	// StatsRows and ListIterations feed the what-if replay.
	StatsRows(ctx context.Context, userID int64, f spec.StatsFilter) ([]spec.StatsRow, error)
	ListIterations(ctx context.Context, userID int64, runID string) ([]*spec.Iteration, error)
	SumLLMCalls(ctx context.Context, runID string, iteration int) (spec.Metrics, error)
	FindRunDocumentByPath(ctx context.Context, userID int64, runID, path string) (*spec.Document, error)
	ListTasks(ctx context.Context, userID int64, runID string) ([]*spec.Task, error)
}

// StoreTx is one write transaction of the store: every state change of a
// run happens in one, together with the events that record it and the job
// that works its next iteration. *db.Tx implements it. Events appended in a
// transaction are published on the bus after it commits, never before.
type StoreTx interface {
	// Now is the transaction's time, stamped once.
	Now() time.Time

	AppendEvent(ctx context.Context, runID, typ string, data any) (*spec.Event, error)

	InsertRun(ctx context.Context, r *spec.Run) error
	// InsertRunTags records a new run's tags (already normalized).
	InsertRunTags(ctx context.Context, runID string, userID int64, tags []string) error
	FindRun(ctx context.Context, id string) (*spec.Run, error)
	UpdateRun(ctx context.Context, r *spec.Run) error
	SetRunMetrics(ctx context.Context, r *spec.Run) error
	// LockUserSlots, CountRunning and OldestQueued serve slot promotion:
	// lock the user's slots for the rest of the transaction, count the runs
	// holding one, and read the user's oldest queued runs.
	LockUserSlots(ctx context.Context, userID int64) error
	CountRunning(ctx context.Context, userID int64) (int, error)
	OldestQueued(ctx context.Context, userID int64, n int) ([]*spec.Run, error)

	FindIteration(ctx context.Context, runID string, iteration int) (*spec.Iteration, error)
	UpsertIteration(ctx context.Context, it *spec.Iteration) error
	RecentIterations(ctx context.Context, runID string, n int) ([]*spec.Iteration, error)
	// PastIterations returns the run's last n finished iterations numbered
	// below before, newest first, as an iteration starting is given them:
	// summaries and gate records, and the check results of the newest only,
	// as stored JSON. It is on every iteration's path, inside the writer's
	// transaction, so it reads no more and decodes nothing.
	PastIterations(ctx context.Context, runID string, before, n int) ([]*spec.PastIteration, error)
	// SumIterationMetrics adds up the recorded iterations' metrics of a run.
	SumIterationMetrics(ctx context.Context, runID string) (spec.Metrics, error)
	InsertInbox(ctx context.Context, it *spec.InboxItem) error
	InsertLLMCall(ctx context.Context, c *spec.LLMCall) error
	SumLLMCalls(ctx context.Context, runID string, iteration int) (spec.Metrics, error)
	InsertNotification(ctx context.Context, n *spec.Notification) error
	// ResolveRunNotifications marks the run's open notifications of kind
	// resolved: the run moved on from what they asked of the person.
	ResolveRunNotifications(ctx context.Context, runID, kind string) error
	ListRunDocuments(ctx context.Context, runID string) ([]*spec.Document, error)
	ListTasks(ctx context.Context, runID string) ([]*spec.Task, error)

	// FindDocumentByPath, PutDocument, InsertTask and UpdateTask are what a
	// RunStarter (the LLM executor's workspace) writes in the transaction
	// that starts a run.
	FindDocumentByPath(ctx context.Context, runID, path string) (*spec.Document, error)
	PutDocument(ctx context.Context, doc *spec.Document) (created bool, err error)
	InsertTask(ctx context.Context, t *spec.Task) error
	UpdateTask(ctx context.Context, t *spec.Task) error

	// AppendTranscript appends lines to an iteration's transcript under its
	// cap (spec.CapTranscript) and returns the kept lines and the new info.
	AppendTranscript(ctx context.Context, runID string, iteration int, capBytes int64, lines []*spec.TranscriptLine, dropped int64) ([]*spec.TranscriptLine, *spec.TranscriptInfo, error)

	// Leases and the inbox, for the worker and recovery.
	SetLease(ctx context.Context, r *spec.Run, owner string, until time.Time) error
	PendingInbox(ctx context.Context, runID string) ([]*spec.InboxItem, error)
	ConsumeInbox(ctx context.Context, runID string, maxID int64, iteration int) error
}

// TxStore is a store whose write transactions have the concrete type T. The
// engine never names T: txRunner turns a TxStore into a function that hands
// the engine a StoreTx.
type TxStore[T StoreTx] interface {
	Store
	// WriteTx runs fn in one write transaction and commits when fn returns
	// nil; it rolls back otherwise.
	WriteTx(ctx context.Context, fn func(tx T) error) error
}

// inTxFunc runs fn in one write transaction of the store.
type inTxFunc func(ctx context.Context, fn func(tx StoreTx) error) error

func txRunner[T StoreTx](s TxStore[T]) inTxFunc {
	return func(ctx context.Context, fn func(tx StoreTx) error) error {
		return s.WriteTx(ctx, func(tx T) error { return fn(tx) })
	}
}

// jobQueue inserts iterate jobs inside the store's transaction, so a state
// change and the job that follows from it commit together or not at all.
type jobQueue interface {
	// InsertTx enqueues the job in tx, to be worked at scheduledAt (the zero
	// time: at once). duplicate is true when a job with the same args
	// already exists and nothing was inserted.
	// queue is the River queue ("" for the default one).
	InsertTx(ctx context.Context, tx StoreTx, args IterateArgs, queue string, scheduledAt time.Time) (duplicate bool, err error)
	// IterateJobs lists the run's unfinished iterate jobs in tx, oldest
	// first, so recovery can cancel a stale one.
	IterateJobs(ctx context.Context, tx StoreTx, runID string) ([]IterateJob, error)
	// JobCancelTx cancels a job in tx.
	JobCancelTx(ctx context.Context, tx StoreTx, id int64) error
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	StopAndCancel(ctx context.Context) error
}

// riverQueue is a jobQueue over a River client whose driver works with
// transactions of type TTx: *sql.Tx with riversqlite, pgx.Tx with
// riverpgxv5. driverTx maps the store's transaction to the driver's; it is
// the only place that knows both.
type riverQueue[TTx any] struct {
	client   *river.Client[TTx]
	driverTx func(StoreTx) TTx
}

func (q *riverQueue[TTx]) InsertTx(ctx context.Context, tx StoreTx, args IterateArgs, queue string, scheduledAt time.Time) (bool, error) {
	var opts *river.InsertOpts
	if !scheduledAt.IsZero() || queue != "" {
		opts = &river.InsertOpts{ScheduledAt: scheduledAt, Queue: queue}
	}
	res, err := q.client.InsertTx(ctx, q.driverTx(tx), args, opts)
	if err != nil {
		return false, err
	}
	return res.UniqueSkippedAsDuplicate, nil
}

// IterateJob is one unfinished iterate job, as recovery needs it.
type IterateJob struct {
	ID                 int64
	State              string
	Iteration, Attempt int
}

// IterateJobs lists the run's unfinished iterate jobs through River's own
// JobListTx. The one predicate River has no filter for, the run id in the
// job's args, is written with ->>, which SQLite and PostgreSQL both read.
func (q *riverQueue[TTx]) IterateJobs(ctx context.Context, tx StoreTx, runID string) ([]IterateJob, error) {
	params := river.NewJobListParams().Kinds(IterateArgs{}.Kind()).
		States(rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled).
		Where("args ->> 'run_id' = @run_id", river.NamedArgs{"run_id": runID}).
		OrderBy(river.JobListOrderByID, river.SortOrderAsc).First(1000)
	res, err := q.client.JobListTx(ctx, q.driverTx(tx), params)
	if err != nil {
		return nil, fmt.Errorf("list iterate jobs: %w", err)
	}
	out := make([]IterateJob, 0, len(res.Jobs))
	for _, j := range res.Jobs {
		var args IterateArgs
		if err := json.Unmarshal(j.EncodedArgs, &args); err != nil {
			return nil, fmt.Errorf("iterate job %d args: %w", j.ID, err)
		}
		out = append(out, IterateJob{ID: j.ID, State: string(j.State), Iteration: args.Iteration, Attempt: args.Attempt})
	}
	return out, nil
}

func (q *riverQueue[TTx]) JobCancelTx(ctx context.Context, tx StoreTx, id int64) error {
	_, err := q.client.JobCancelTx(ctx, q.driverTx(tx), id)
	return err
}

func (q *riverQueue[TTx]) Start(ctx context.Context) error { return q.client.Start(ctx) }
func (q *riverQueue[TTx]) Stop(ctx context.Context) error  { return q.client.Stop(ctx) }
func (q *riverQueue[TTx]) StopAndCancel(ctx context.Context) error {
	return q.client.StopAndCancel(ctx)
}
