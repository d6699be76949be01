package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"

	"homework/engine/spec"
)

// RunConfig decodes a run's stored configuration.
func RunConfig(r *spec.Run) (*spec.Config, error) {
	var cfg spec.Config
	if err := json.Unmarshal(r.Config, &cfg); err != nil {
		return nil, fmt.Errorf("run %s config: %w", r.ID, err)
	}
	return &cfg, nil
}

// CreateRun validates cfg, stores the run queued with a run_created event and,
// when the user has a free slot, starts it in the same transaction. Invalid
// input is EINVALID with the field; a missing parent run is ENOTFOUND.
func (e *Engine) CreateRun(ctx context.Context, user *spec.User, cfg spec.Config) (*spec.Run, error) {
	if err := e.validateConfig(ctx, user, &cfg); err != nil {
		return nil, err
	}
	if cfg.ParentRunID != "" {
		if _, err := e.store.FindRun(ctx, user.ID, cfg.ParentRunID); err != nil {
			if spec.ErrorCode(err) == spec.ENOTFOUND {
				return nil, spec.FieldError("parent_run_id", "Parent run not found.")
			}
			return nil, err
		}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	id := uuid.Must(uuid.NewV7()).String()
	// A run started on a slot found free (startIfFree) whose commit found
	// it taken is created again, and promoted under the slot lock; it keeps
	// the creation time of its first try, its place among the queued runs.
	var createdAt time.Time
	for checkAtCommit := true; ; checkAtCommit = false {
		run := &spec.Run{
			CreatedAt:   createdAt,
			ID:          id,
			UserID:      user.ID,
			ParentRunID: cfg.ParentRunID,
			Objective:   cfg.Objective,
			Mode:        cfg.Mode,
			Executor:    cfg.Executor,
			Config:      raw,
			Status:      spec.StatusQueued,
			Metrics:     spec.Metrics{ByModel: map[string]spec.ModelUsage{}},
		}
		err = e.inTx(ctx, func(tx spec.Tx) error {
			if err := tx.InsertRun(ctx, run); err != nil {
				return err
			}
			if err := tx.InsertRunTags(ctx, run.ID, run.UserID, cfg.Tags); err != nil {
				return err
			}
			if err := e.bindHost(ctx, tx, run); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(ctx, run.ID, spec.EventRunCreated, spec.RunCreatedData{
				Objective: cfg.Objective, Mode: cfg.Mode, Executor: cfg.Executor, Config: json.RawMessage(raw),
			}); err != nil {
				return err
			}
			if checkAtCommit {
				if started, err := e.startIfFree(ctx, tx, run); err != nil || started {
					return err
				}
			}
			return e.promote(ctx, tx, user.ID)
		})
		if checkAtCommit && errors.Is(err, spec.ErrNoFreeSlot) {
			createdAt = run.CreatedAt
			continue
		}
		if err != nil {
			return nil, err
		}
		return e.store.FindRun(ctx, user.ID, run.ID)
	}
}

// startIfFree starts run, just queued in tx, when tx can check the user's
// slots in its commit (spec.SlotChecker) and a read without the slot lock
// finds a free slot and no run queued ahead of this one; the commit then
// fails with spec.ErrNoFreeSlot unless that still holds once it has the
// lock. It reports whether it started the run; when it did not, the caller
// promotes (under the lock, as ever).
func (e *Engine) startIfFree(ctx context.Context, tx spec.Tx, run *spec.Run) (bool, error) {
	sc, ok := tx.(spec.SlotChecker)
	if !ok {
		return false, nil
	}
	free, err := sc.FreeSlot(ctx, run.UserID, e.opts.MaxConcurrentPerUser, run.ID)
	if err != nil || !free {
		return false, err
	}
	if err := e.startRun(ctx, tx, run); err != nil {
		return false, err
	}
	return true, sc.CheckSlotAtCommit(ctx, run.UserID, e.opts.MaxConcurrentPerUser)
}

// promote starts the user's oldest queued runs while they have free slots.
// It runs inside the transaction that freed a slot or queued a run.
func (e *Engine) promote(ctx context.Context, tx spec.Tx, userID int64) error {
	queued, err := tx.LockedStartable(ctx, userID, e.opts.MaxConcurrentPerUser)
	if err != nil {
		return err
	}
	for _, run := range queued {
		if err := e.startRun(ctx, tx, run); err != nil {
			return err
		}
	}
	return nil
}

// startRun moves a queued run to running and enqueues its next iteration.
func (e *Engine) startRun(ctx context.Context, tx spec.Tx, run *spec.Run) error {
	cfg, err := RunConfig(run)
	if err != nil {
		return err
	}
	first := run.StartedAt.IsZero()
	if first {
		run.StartedAt = tx.Now()
		if x, ok := e.executor(run.Executor); ok {
			if s, ok := x.(RunStarter); ok {
				if err := s.StartRun(ctx, tx, run, cfg); err != nil {
					return fmt.Errorf("start run: %w", err)
				}
			}
		}
	}
	run.Status = spec.StatusRunning
	run.Waiting = nil
	run.StopReason = nil
	run.Report = nil // a running run has no final report; the next end writes a new one
	run.RunningSince = tx.Now()
	if _, err := tx.AppendEvent(ctx, run.ID, spec.EventRunStarted, spec.RunStartedData{
		Iteration: run.Iteration + 1, Resumed: !first,
	}); err != nil {
		return err
	}
	return e.enqueueNext(ctx, tx, run, nil, 0)
}

// enqueueNext sets the run to its next iteration (attempt 1), inserts that
// iteration's job in tx, to run after delay (0: at once), and writes the run.
// cfg is the run's config when the caller has it decoded (an iteration
// finishing: a config changes only while no iteration runs), else nil.
func (e *Engine) enqueueNext(ctx context.Context, tx spec.Tx, run *spec.Run, cfg *spec.Config, delay time.Duration) error {
	_, err := e.advance(ctx, tx, run, cfg, delay, false)
	return err
}

// advance moves the run to its next iteration (attempt 1), unless the
// forecast says it would not fit the run's budgets (the run then waits or
// stops). With here and no delay the iteration begins in tx, leased to this
// process, and is returned for the caller to work at once; otherwise its
// job is enqueued in tx, to run after delay.
func (e *Engine) advance(ctx context.Context, tx spec.Tx, run *spec.Run, cfg *spec.Config, delay time.Duration, here bool) (*iteration, error) {
	forecast, moved, err := e.forecastGate(ctx, tx, run, cfg)
	if err != nil || moved {
		return nil, err // moved: the next iteration would not fit its budgets
	}
	here = here && delay <= 0
	run.Iteration++
	run.Attempt = 1
	run.LeaseOwner = ""
	if here {
		run.LeaseOwner = e.id
	}
	run.LeaseUntil = tx.Now().Add(e.opts.LeaseTTL)
	if err := tx.UpdateRun(ctx, run); err != nil {
		return nil, err
	}
	if here {
		return e.beginHere(ctx, tx, run, cfg, forecast)
	}
	if delay > 0 {
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventIterationBackoff, spec.BackoffData{
			Iteration: run.Iteration, DelayMS: delay.Milliseconds(), NotBefore: tx.Now().Add(delay),
		}); err != nil {
			return nil, err
		}
	}
	return nil, e.insertJob(ctx, tx, run, delay, forecast)
}

// beginHere begins the run's current iteration (advance set it, and its
// lease to this process) in tx: what beginIteration's transaction does for
// a job, with the inbox read in tx, so that the items the iteration
// consumes are the ones pending as it begins.
func (e *Engine) beginHere(ctx context.Context, tx spec.Tx, run *spec.Run, cfg *spec.Config, forecast *spec.Forecast) (*iteration, error) {
	inbox, err := tx.PendingInbox(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	row := &spec.Iteration{RunID: run.ID, Iteration: run.Iteration, Attempt: run.Attempt, Status: spec.IterRunning, StartedAt: tx.Now()}
	if err := tx.UpsertIteration(ctx, row); err != nil {
		return nil, err
	}
	if _, err := tx.AppendEvent(ctx, run.ID, spec.EventIterationStarted, spec.IterationStartedData{
		Iteration: run.Iteration, Attempt: run.Attempt, Inbox: len(inbox),
	}); err != nil {
		return nil, err
	}
	return &iteration{run: run, cfg: cfg, row: row, forecast: forecast, inbox: inbox, fresh: true}, nil
}

// insertJob enqueues the iterate job of the run's (iteration, attempt), with the
// forecast made for the iteration when there is one.
func (e *Engine) insertJob(ctx context.Context, tx spec.Tx, run *spec.Run, delay time.Duration, forecast *spec.Forecast) error {
	runID, iteration, attempt := run.ID, run.Iteration, run.Attempt
	var at time.Time
	if delay > 0 {
		at = time.Now().Add(delay)
	}
	_, _, queue, err := e.runHost(ctx, tx, run)
	if err != nil {
		return fmt.Errorf("enqueue iteration: %w", err)
	}
	duplicate, err := e.queue.InsertTx(ctx, tx, IterateArgs{RunID: runID, Iteration: iteration, Attempt: attempt, Forecast: forecast}, queue, at)
	if err != nil {
		return fmt.Errorf("enqueue iteration: %w", err)
	}
	if duplicate {
		// (iteration, attempt) only ever grows, so a duplicate means the
		// run's counters went backwards: refuse rather than wait forever.
		return fmt.Errorf("enqueue iteration %d attempt %d of run %s: a job with these args already exists", iteration, attempt, runID)
	}
	return nil
}

// transition loads the user's run in a write transaction and calls fn with
// it. The run is ENOTFOUND when it is another user's.
func (e *Engine) transition(ctx context.Context, userID int64, runID string, fn func(tx spec.Tx, run *spec.Run) error) (*spec.Run, error) {
	var out *spec.Run
	err := e.inTx(ctx, func(tx spec.Tx) error {
		run, err := tx.FindRun(ctx, runID)
		if err != nil {
			return err
		}
		if run.UserID != userID {
			return spec.Errorf(spec.ENOTFOUND, "Run not found.")
		}
		before := run.Status
		if err := fn(tx, run); err != nil {
			return err
		}
		// A run that was waiting for the person (or stopped, asking to be
		// continued) and has moved on no longer needs them: its notification
		// resolves itself.
		if (before == spec.StatusWaiting || before == spec.StatusStopped) && run.Status != before {
			if err := tx.ResolveRunNotifications(ctx, run.ID, "run_"+before); err != nil {
				return err
			}
		}
		out = run
		return nil
	})
	return out, err
}

// Cancel cancels a queued, running, waiting or stopped run: its running
// iteration's context is cancelled at once and no further job runs. A
// finished run is ECONFLICT.
func (e *Engine) Cancel(ctx context.Context, userID int64, runID string) (*spec.Run, error) {
	run, err := e.transition(ctx, userID, runID, func(tx spec.Tx, run *spec.Run) error {
		if spec.IsTerminalStatus(run.Status) {
			return spec.Errorf(spec.ECONFLICT, "The run is already %s.", run.Status)
		}
		wasRunning := run.Status == spec.StatusRunning
		if wasRunning {
			if err := e.closeRunningIteration(ctx, tx, run); err != nil {
				return err
			}
		}
		if err := e.finishRun(ctx, tx, run, spec.StatusCanceled, &spec.StopReason{Type: spec.StopCanceled, Detail: "Canceled by the user."}, nil); err != nil {
			return err
		}
		if wasRunning {
			return e.promote(ctx, tx, run.UserID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.interrupt(ctx, runID, errRunCanceled)
	return run, nil
}

// closeRunningIteration records the run's running iteration as canceled,
// with its usage so far, and sums the run's metrics, in the canceling
// transaction: the attempt still in flight then finds itself stale and adds
// nothing after the run's terminal event.
func (e *Engine) closeRunningIteration(ctx context.Context, tx spec.Tx, run *spec.Run) error {
	row, err := tx.FindIteration(ctx, run.ID, run.Iteration)
	if spec.ErrorCode(err) == spec.ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	if row.Status == spec.IterRunning {
		usage, err := tx.SumLLMCalls(ctx, run.ID, row.Iteration)
		if err != nil {
			return err
		}
		m := row.Metrics
		m.SetUsage(usage)
		m.Iterations = 1
		m.RunningMS += max(tx.Now().Sub(row.StartedAt).Milliseconds(), 0)
		row.Status, row.EndedAt, row.Error, row.Metrics = spec.IterCanceled, tx.Now(), "canceled by the user", m
		return endIteration(ctx, tx, run, row)
	}
	return endIteration(ctx, tx, run, nil)
}

// Continue resumes a stopped run, optionally raising its budgets. Counters
// and spend carry over. A run that is not stopped is ECONFLICT; a budget
// that is still exhausted is EINVALID on that budget.
func (e *Engine) Continue(ctx context.Context, userID int64, runID string, raise *spec.Budgets) (*spec.Run, error) {
	return e.transition(ctx, userID, runID, func(tx spec.Tx, run *spec.Run) error {
		forecastWait := run.Status == spec.StatusWaiting && run.Waiting != nil && run.Waiting.Reason == spec.WaitBudgetForecast
		if run.Status != spec.StatusStopped && !forecastWait {
			return spec.Errorf(spec.ECONFLICT, "Only a stopped run, or one waiting on its budget forecast, can be continued; this run is %s.", run.Status)
		}
		cfg, err := RunConfig(run)
		if err != nil {
			return err
		}
		b, err := e.raiseBudgets(cfg.Budgets, raise)
		if err != nil {
			return err
		}
		cfg.Budgets = b
		if reason := budgetExceeded(b, run.Metrics); reason != nil {
			return spec.FieldError("budgets."+reason.field, "%s Raise budgets.%s to continue.", reason.detail, reason.field)
		}
		if spec.OnForecastOf(b, cfg.Mode) != spec.ForecastOff && (b.MaxCostUSD > 0 || b.MaxTotalTokens > 0) {
			// Resuming into a budget the next iteration would not fit
			// would only stop or ask again: say what would fit.
			f, err := ForecastNext(ctx, tx, run, cfg)
			if err != nil {
				return err
			}
			if k := forecastBlocks(b, run.Metrics, f); k != nil {
				need := k.ev.Spent + k.ev.Forecast
				if k.ev.Budget == "max_cost_usd" {
					return spec.FieldError("budgets.max_cost_usd", "%s Raise budgets.max_cost_usd to at least %s, or set budgets.on_forecast to off.", k.text(f), usd(math.Ceil(need*100)/100))
				}
				return spec.FieldError("budgets.max_total_tokens", "%s Raise budgets.max_total_tokens to at least %.0f, or set budgets.on_forecast to off.", k.text(f), need)
			}
		}
		raw, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		run.Config = raw
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventRunContinued, spec.RunContinuedData{Budgets: b}); err != nil {
			return err
		}
		return e.requeue(ctx, tx, run)
	})
}

// requeue puts a resumed run back: running at once when the user has a free
// slot, else queued (FIFO by creation). It counts the running runs holding
// the user's slot lock, as promote does, so that a promotion in another
// process cannot take the same last slot.
func (e *Engine) requeue(ctx context.Context, tx spec.Tx, run *spec.Run) error {
	running, err := tx.LockedRunningCount(ctx, run.UserID)
	if err != nil {
		return err
	}
	if running < e.opts.MaxConcurrentPerUser {
		return e.startRun(ctx, tx, run)
	}
	run.Status = spec.StatusQueued
	run.Waiting = nil
	return tx.UpdateRun(ctx, run)
}

// Respond answers a waiting run: the answers land in the inbox, the next
// iteration sees them, and the run resumes. A run that is not waiting is
// ECONFLICT.
func (e *Engine) Respond(ctx context.Context, userID int64, runID string, answers []string) (*spec.Run, error) {
	var body []string
	for _, a := range answers {
		if a = strings.TrimSpace(a); a != "" {
			body = append(body, a)
		}
	}
	if len(body) == 0 {
		return nil, spec.FieldError("answers", "At least one non-empty answer is required.")
	}
	joined := strings.Join(body, "\n\n")
	if err := checkText("answers", "Answers", joined); err != nil {
		return nil, err
	}
	if len(joined) > 100_000 {
		return nil, spec.FieldError("answers", "Answers are too long (limit 100,000 bytes).")
	}
	return e.transition(ctx, userID, runID, func(tx spec.Tx, run *spec.Run) error {
		if run.Status != spec.StatusWaiting {
			return spec.Errorf(spec.ECONFLICT, "Only a run waiting for you can be answered; this run is %s.", run.Status)
		}
		item := &spec.InboxItem{RunID: run.ID, Kind: spec.InboxAnswer, Body: joined}
		if err := tx.InsertInbox(ctx, item); err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventUserResponse, spec.UserResponseData{InboxID: item.ID, Answers: body}); err != nil {
			return err
		}
		return e.requeue(ctx, tx, run)
	})
}

// Message queues a message for the next iteration of a queued, running or
// waiting run. A finished or stopped run is ECONFLICT.
func (e *Engine) Message(ctx context.Context, userID int64, runID, body string) (*spec.Run, error) {
	body = strings.TrimSpace(body)
	if body == "" {
		return nil, spec.FieldError("body", "Message is empty.")
	}
	if len(body) > 100_000 {
		return nil, spec.FieldError("body", "Message is too long (limit 100,000 bytes).")
	}
	if err := checkText("body", "Message", body); err != nil {
		return nil, err
	}
	return e.transition(ctx, userID, runID, func(tx spec.Tx, run *spec.Run) error {
		switch run.Status {
		case spec.StatusQueued, spec.StatusRunning, spec.StatusWaiting:
		default:
			return spec.Errorf(spec.ECONFLICT, "Messages can only be queued for an active run; this run is %s.", run.Status)
		}
		item := &spec.InboxItem{RunID: run.ID, Kind: spec.InboxMessage, Body: body}
		if err := tx.InsertInbox(ctx, item); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, run.ID, spec.EventMessageQueued, spec.MessageQueuedData{InboxID: item.ID, Body: body})
		return err
	})
}
