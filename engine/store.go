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

// The engine works its store through the contract in engine/spec/store.go
// (spec.Store, spec.Tx); see there.

// inTxFunc runs fn in one write transaction of the store.
type inTxFunc func(ctx context.Context, fn func(tx spec.Tx) error) error

// jobQueue inserts iterate jobs inside the store's transaction, so a state
// change and the job that follows from it commit together or not at all.
type jobQueue interface {
	// InsertTx enqueues the job in tx, to be worked at scheduledAt (the zero
	// time: at once). duplicate is true when a job with the same args
	// already exists and nothing was inserted.
	// queue is the River queue ("" for the default one).
	InsertTx(ctx context.Context, tx spec.Tx, args IterateArgs, queue string, scheduledAt time.Time) (duplicate bool, err error)
	// InsertJobTx enqueues another kind of job (its queue from its
	// InsertOpts) in tx, to be worked at scheduledAt (zero: at once).
	InsertJobTx(ctx context.Context, tx spec.Tx, args river.JobArgs, scheduledAt time.Time) (duplicate bool, err error)
	// IterateJobs lists the run's unfinished iterate jobs in tx, oldest
	// first, so recovery can cancel a stale one.
	IterateJobs(ctx context.Context, tx spec.Tx, runID string) ([]IterateJob, error)
	// JobCancelTx cancels a job in tx.
	JobCancelTx(ctx context.Context, tx spec.Tx, id int64) error
	// RunningArgsTx returns the encoded args of the jobs of kind marked
	// running. For a process that alone works the queue, at its start, a
	// job running then was running in a process that died.
	RunningArgsTx(ctx context.Context, tx spec.Tx, kind string) ([][]byte, error)
	// Ended tells the queue that a write of the engine's ended: txs are
	// the transactions it ran in (a retried write runs in several, the
	// last the one that ended it), and committed whether the last one
	// committed, so that the jobs it inserted may be fetched now.
	Ended(ctx context.Context, txs []spec.Tx, committed bool)
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
	driverTx func(spec.Tx) TTx
	waker    *waker
	// fastInsert inserts iterate jobs without returning their rows, and
	// counts a duplicate by nothing inserted: River's insert that returns
	// the row (to say whether it was a duplicate) decodes every column
	// back, a third of the cost of the finishing transaction's insert.
	fastInsert bool
}

func (q *riverQueue[TTx]) Ended(ctx context.Context, txs []spec.Tx, committed bool) {
	q.waker.ended(ctx, txs, committed)
}

func (q *riverQueue[TTx]) InsertTx(ctx context.Context, tx spec.Tx, args IterateArgs, queue string, scheduledAt time.Time) (bool, error) {
	var opts *river.InsertOpts
	if !scheduledAt.IsZero() || queue != "" {
		opts = &river.InsertOpts{ScheduledAt: scheduledAt, Queue: queue}
	}
	var duplicate bool
	if q.fastInsert {
		n, err := q.client.InsertManyFastTx(ctx, q.driverTx(tx), []river.InsertManyParams{{Args: args, InsertOpts: opts}})
		if err != nil {
			return false, err
		}
		duplicate = n == 0
	} else {
		res, err := q.client.InsertTx(ctx, q.driverTx(tx), args, opts)
		if err != nil {
			return false, err
		}
		duplicate = res.UniqueSkippedAsDuplicate
	}
	if !duplicate && scheduledAt.IsZero() {
		q.waker.inserted(tx, queue)
	}
	return duplicate, nil
}

func (q *riverQueue[TTx]) InsertJobTx(ctx context.Context, tx spec.Tx, args river.JobArgs, scheduledAt time.Time) (bool, error) {
	var opts *river.InsertOpts
	if !scheduledAt.IsZero() {
		opts = &river.InsertOpts{ScheduledAt: scheduledAt}
		if a, ok := args.(river.JobArgsWithInsertOpts); ok {
			*opts = a.InsertOpts()
			opts.ScheduledAt = scheduledAt
		}
	}
	res, err := q.client.InsertTx(ctx, q.driverTx(tx), args, opts)
	if err != nil {
		return false, err
	}
	if !res.UniqueSkippedAsDuplicate && scheduledAt.IsZero() {
		q.waker.inserted(tx, res.Job.Queue)
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
func (q *riverQueue[TTx]) IterateJobs(ctx context.Context, tx spec.Tx, runID string) ([]IterateJob, error) {
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

func (q *riverQueue[TTx]) RunningArgsTx(ctx context.Context, tx spec.Tx, kind string) ([][]byte, error) {
	params := river.NewJobListParams().Kinds(kind).States(rivertype.JobStateRunning).First(10000)
	res, err := q.client.JobListTx(ctx, q.driverTx(tx), params)
	if err != nil {
		return nil, fmt.Errorf("list running %s jobs: %w", kind, err)
	}
	out := make([][]byte, 0, len(res.Jobs))
	for _, j := range res.Jobs {
		out = append(out, j.EncodedArgs)
	}
	return out, nil
}

func (q *riverQueue[TTx]) JobCancelTx(ctx context.Context, tx spec.Tx, id int64) error {
	_, err := q.client.JobCancelTx(ctx, q.driverTx(tx), id)
	return err
}

func (q *riverQueue[TTx]) Start(ctx context.Context) error { return q.client.Start(ctx) }
func (q *riverQueue[TTx]) Stop(ctx context.Context) error  { return q.client.Stop(ctx) }
func (q *riverQueue[TTx]) StopAndCancel(ctx context.Context) error {
	return q.client.StopAndCancel(ctx)
}
