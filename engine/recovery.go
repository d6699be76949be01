package engine

import (
	"context"
	"time"

	"homework/engine/spec"
)

// recoveryLoop recovers runs whose lease expired until ctx ends.
func (e *Engine) recoveryLoop(ctx context.Context) {
	t := time.NewTicker(e.opts.RecoveryInterval)
	defer t.Stop()
	e.heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.heartbeat(ctx)
			if _, err := e.recoverOnce(ctx, false); err != nil && ctx.Err() == nil {
				e.log.Warn("lease recovery", "err", err)
			}
			if err := e.resumeHostRuns(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("resume runs waiting for their host", "err", err)
			}
		}
	}
}

// Heartbeats is implemented by stores shared by several processes: each
// process records a heartbeat, and recovery leaves the runs of a process
// whose heartbeat is fresh (within a lease TTL) to that process, even when
// one of their leases lapsed.
type Heartbeats interface {
	Heartbeat(ctx context.Context, id string, now time.Time) error
	LiveProcesses(ctx context.Context, since time.Time) (map[string]bool, error)
}

func (e *Engine) heartbeat(ctx context.Context) {
	if hs, ok := e.hostStore(); ok && e.opts.isCommandHost() {
		o := e.opts
		if err := hs.CommandHeartbeat(ctx, e.id, e.now(), o.CommandHost, o.CommandRoot, commandQueue(o.CommandHost, o.CommandRoot)); err != nil && ctx.Err() == nil {
			e.log.Warn("heartbeat", "err", err)
		}
		return
	}
	if hb, ok := e.store.(Heartbeats); ok && e.opts.SharedStore {
		if err := hb.Heartbeat(ctx, e.id, e.now()); err != nil && ctx.Err() == nil {
			e.log.Warn("heartbeat", "err", err)
		}
	}
}

// recoverAtStart recovers every running run whose iteration was being worked
// by a previous process. Only one server uses the database (the lock), so any
// lease not ours is stale.
func (e *Engine) recoverAtStart(ctx context.Context) (int, error) {
	return e.recoverOnce(ctx, true)
}

// recoverOnce recovers stale runs. At start every lease held by another
// owner is stale; later only expired leases are. It returns how many runs it
// recovered.
func (e *Engine) recoverOnce(ctx context.Context, atStart bool) (int, error) {
	leases, err := e.store.RunningRuns(ctx)
	if err != nil {
		return 0, err
	}
	now := e.now()
	var live map[string]bool
	if hb, ok := e.store.(Heartbeats); ok && e.opts.SharedStore && len(leases) > 0 {
		if live, err = hb.LiveProcesses(ctx, now.Add(-e.opts.LeaseTTL)); err != nil {
			return 0, err
		}
	}
	var queues map[string]bool // command queues a live process serves, read once when needed
	n := 0
	for _, l := range leases {
		if l.Owner != "" && l.Owner != e.id && live[l.Owner] {
			continue // its process is alive and renews, or recovers, it itself
		}
		stale := false
		switch {
		case l.Owner != "" && l.Owner != e.id && atStart:
			stale = true
		case l.Owner != "" && now.After(l.Until):
			stale = true
		case l.Owner == "" && (atStart || (e.opts.SharedStore && now.After(l.Until))):
			// Checked against its job below. With several processes, a
			// job fetched by a process that died before it took the
			// lease is stuck "running" at River; it is stale once the
			// lease its enqueue set has passed.
			stale = true
		}
		if !stale {
			continue
		}
		if queues == nil {
			if queues, err = e.liveQueues(ctx); err != nil {
				return n, err
			}
			if queues == nil {
				queues = map[string]bool{}
			}
		}
		ok, err := e.recoverRun(ctx, l.RunID, l.Owner, atStart, queues)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// recoverRun cancels the run's stale job and enqueues the same iteration
// with attempt+1 in one transaction, recording the interrupted iteration.
// A command run bound to a host whose queue no live process serves (not in
// liveQueues) waits instead (parkOnHost).
func (e *Engine) recoverRun(ctx context.Context, runID, owner string, atStart bool, liveQueues map[string]bool) (bool, error) {
	recovered, parked := false, false
	err := e.inTx(ctx, func(tx StoreTx) error {
		run, err := tx.FindRun(ctx, runID)
		if err != nil {
			return err
		}
		if run.Status != spec.StatusRunning || run.LeaseOwner != owner {
			return nil // moved on meanwhile
		}
		if !atStart && owner == e.id {
			// Our own worker missed its renewals: cancel it before retrying.
			e.mu.Lock()
			if f := e.inflight[runID]; f != nil {
				f.cancel(errLeaseLost)
			}
			e.mu.Unlock()
		}
		jobs, err := e.queue.IterateJobs(ctx, tx, runID)
		if err != nil {
			return err
		}
		if host, root, queue, err := e.runHost(ctx, tx, runID); err != nil {
			return err
		} else if queue != "" && !liveQueues[queue] {
			parked = true
			return e.parkOnHost(ctx, tx, run, jobs, host, root)
		}
		if owner == "" {
			// Not started by any worker: if its job still waits, River will
			// work it; nothing is stale.
			for _, j := range jobs {
				if j.Iteration == run.Iteration && j.Attempt == run.Attempt && j.State != "running" {
					return nil
				}
			}
		}
		for _, j := range jobs {
			if err := e.queue.JobCancelTx(ctx, tx, j.ID); err != nil {
				return err
			}
		}
		if err := e.interruptIteration(ctx, tx, run, "interrupted: the server stopped while this iteration ran"); err != nil {
			return err
		}
		run.Attempt++
		run.LeaseOwner = ""
		run.LeaseUntil = tx.Now().Add(e.opts.LeaseTTL)
		if err := tx.UpdateRun(ctx, run); err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, runID, "run_recovered", map[string]any{
			"iteration": run.Iteration, "attempt": run.Attempt,
		}); err != nil {
			return err
		}
		recovered = true
		return e.insertJob(ctx, tx, runID, run.Iteration, run.Attempt, 0)
	})
	if recovered {
		e.log.Info("recovered run", "run", runID, "at_start", atStart)
	}
	if parked && err == nil {
		e.log.Info("run waits for its host", "run", runID)
	}
	return recovered, err
}

// interruptIteration records the run's running iteration, if any, as
// interrupted with reason, counting its running time up to the last lease
// renewal, and sums the run's metrics, in tx.
func (e *Engine) interruptIteration(ctx context.Context, tx StoreTx, run *spec.Run, reason string) error {
	row, err := tx.FindIteration(ctx, run.ID, run.Iteration)
	if err != nil || row.Status != spec.IterRunning {
		return endIteration(ctx, tx, run, nil)
	}
	row.Status = spec.IterInterrupted
	row.EndedAt = tx.Now()
	row.Error = reason
	if run.LeaseUntil.After(row.StartedAt) {
		row.Metrics.RunningMS += min(run.LeaseUntil.Sub(row.StartedAt), tx.Now().Sub(row.StartedAt)).Milliseconds()
	}
	row.Metrics.Iterations = 1
	return endIteration(ctx, tx, run, row)
}

// endIteration records row, a running iteration that a cancel or a
// recovery ended (nil when there was none), with its iteration_completed
// event, and sums the run's metrics, in tx.
func endIteration(ctx context.Context, tx StoreTx, run *spec.Run, row *spec.Iteration) error {
	if row != nil {
		if err := tx.UpsertIteration(ctx, row); err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventIterationCompleted, map[string]any{
			"iteration": row.Iteration, "attempt": row.Attempt, "status": row.Status, "error": row.Error, "metrics": row.Metrics,
		}); err != nil {
			return err
		}
	}
	total, err := tx.SumIterationMetrics(ctx, run.ID)
	if err != nil {
		return err
	}
	run.Metrics = total
	return nil
}
