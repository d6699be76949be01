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
			if _, err := e.recoverOnce(ctx, false, nil); err != nil && ctx.Err() == nil {
				e.log.Warn("lease recovery", "err", err)
			}
			if err := e.resumeHostRuns(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("resume runs waiting for their host", "err", err)
			}
		}
	}
}

// holdLiveness ties this process's liveness to the store when it can
// (spec.Cluster); it reports whether it does.
func (e *Engine) holdLiveness(ctx context.Context) (bool, error) {
	lv, ok := e.cluster()
	if !ok {
		return false, nil
	}
	return true, lv.HoldLiveness(ctx, e.id, e.livenessChanged)
}

// livenessChanged is told when this process's liveness session is lost or
// held again. Once lost, the others may take this process for dead and
// recover its runs at any moment, so the processes of every attempt stop at
// once, no attempt renews its lease and no new one begins until the
// liveness is held again. Then each attempt's next renewal tells whether
// its run is still its own (its processes go on) or was taken (they are
// killed).
func (e *Engine) livenessChanged(held bool, err error) {
	e.noLiveness.Store(!held)
	if held {
		e.log.Info("liveness held again")
		return
	}
	e.log.Warn("liveness lost: the runs in progress are held still until it is held again", "err", err)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.inflight {
		f.leash.Freeze()
	}
}

// deathWatch recovers the runs of processes whose liveness is gone, every
// DeathWatchInterval until ctx ends.
func (e *Engine) deathWatch(ctx context.Context) {
	lv, _ := e.cluster()
	t := time.NewTicker(e.opts.DeathWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e.noLiveness.Load() {
			continue // cut off ourselves: not the one to judge others
		}
		dead, err := lv.DeadProcesses(ctx, e.id)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("watch for dead processes", "err", err)
			}
			continue
		}
		if len(dead) == 0 {
			continue
		}
		if _, err := e.recoverOnce(ctx, false, dead); err != nil && ctx.Err() == nil {
			e.log.Warn("recover the runs of dead processes", "err", err)
		}
	}
}

func (e *Engine) heartbeat(ctx context.Context) {
	if hs, ok := e.cluster(); ok && e.opts.isCommandHost() {
		o := e.opts
		if err := hs.CommandHeartbeat(ctx, e.id, e.now(), o.CommandHost, o.CommandRoot, commandQueue(o.CommandHost, o.CommandRoot)); err != nil && ctx.Err() == nil {
			e.log.Warn("heartbeat", "err", err)
		}
		return
	}
	if hb, ok := e.cluster(); ok {
		if err := hb.Heartbeat(ctx, e.id, e.now()); err != nil && ctx.Err() == nil {
			e.log.Warn("heartbeat", "err", err)
		}
	}
}

// recoverAtStart recovers every running run whose iteration was being worked
// by a previous process. Only one server uses the database (the lock), so any
// lease not ours is stale.
func (e *Engine) recoverAtStart(ctx context.Context) (int, error) {
	return e.recoverOnce(ctx, true, nil)
}

// recoverOnce recovers stale runs. At start every lease held by another
// owner is stale; later only expired leases are, and every lease of a
// process in dead (its liveness is gone: spec.Cluster). A run this process
// is executing right now is never stale to it, however late its renewal (a
// pause past the lease): its attempt renews and goes on, or learns that
// another process took the run. It returns how many runs it recovered.
func (e *Engine) recoverOnce(ctx context.Context, atStart bool, dead map[string]bool) (int, error) {
	leases, err := e.store.RunningRuns(ctx)
	if err != nil {
		return 0, err
	}
	now := e.now()
	var live map[string]bool
	if hb, ok := e.cluster(); ok && len(leases) > 0 {
		if live, err = hb.LiveProcesses(ctx, now.Add(-e.opts.LeaseTTL)); err != nil {
			return 0, err
		}
	}
	var queues map[string]bool // command queues a live process serves, read once when needed
	n := 0
	for _, l := range leases {
		if l.Owner != "" && l.Owner != e.id && live[l.Owner] && !dead[l.Owner] {
			continue // its process is alive and renews, or recovers, it itself
		}
		if l.Owner == e.id && e.executing(l.RunID) {
			continue
		}
		stale := false
		switch {
		case dead[l.Owner]:
			stale = true
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
		ok, err := e.recoverRun(ctx, l.RunID, l.Owner, atStart, atStart || dead[l.Owner], queues)
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
// Unless force (at start, or its owner is dead), the lease must still be
// expired in that transaction, which locks the run: an owner that renewed
// meanwhile (it woke from a pause) keeps its run. A command run bound to a
// host whose queue no live process serves (not in liveQueues) waits
// instead (parkOnHost).
func (e *Engine) recoverRun(ctx context.Context, runID, owner string, atStart, force bool, liveQueues map[string]bool) (bool, error) {
	recovered, parked := false, false
	err := e.inTx(ctx, func(tx spec.Tx) error {
		run, err := tx.FindRun(ctx, runID)
		if err != nil {
			return err
		}
		if run.Status != spec.StatusRunning || run.LeaseOwner != owner {
			return nil // moved on meanwhile
		}
		if !force && !tx.Now().After(run.LeaseUntil) {
			return nil // renewed meanwhile
		}
		if force && !atStart {
			// Its owner was found dead outside this transaction; one that
			// holds its liveness again (it was cut off, not dead) may have
			// renewed since, before the run was locked here.
			if lt, ok := tx.(spec.ClusterTx); ok {
				if live, err := lt.ProcessLive(ctx, owner); err != nil {
					return err
				} else if live {
					return nil
				}
			}
		}
		if owner == e.id && e.executing(runID) {
			return nil // our attempt is at work: it renews, or learns it lost the run
		}
		if !atStart && owner == e.id {
			// Our own attempt was abandoned by its watchdog: make sure it
			// and its processes are gone before the run is worked again.
			e.mu.Lock()
			if f := e.inflight[runID]; f != nil {
				f.giveUp()
			}
			e.mu.Unlock()
		}
		jobs, err := e.queue.IterateJobs(ctx, tx, runID)
		if err != nil {
			return err
		}
		if host, root, queue, err := e.runHost(ctx, tx, run); err != nil {
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
		if _, err := tx.AppendEvent(ctx, runID, spec.EventRunRecovered, spec.AttemptData{
			Iteration: run.Iteration, Attempt: run.Attempt,
		}); err != nil {
			return err
		}
		recovered = true
		return e.insertJob(ctx, tx, run, 0, nil)
	})
	if recovered {
		e.log.Info("recovered run", "run", runID, "at_start", atStart)
	}
	if parked && err == nil {
		e.log.Info("run waits for its host", "run", runID)
	}
	return recovered, err
}

// executing reports whether this process is working the run right now with
// an attempt its watchdog has not abandoned.
func (e *Engine) executing(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.inflight[runID]
	return f != nil && !f.abandoned.Load()
}

// interruptIteration records the run's running iteration, if any, as
// interrupted with reason, counting its running time up to the last lease
// renewal and the model calls its attempt made, and sums the run's
// metrics, in tx: the run's totals keep the attempt's spend while its next
// attempt runs.
func (e *Engine) interruptIteration(ctx context.Context, tx spec.Tx, run *spec.Run, reason string) error {
	row, err := tx.FindIteration(ctx, run.ID, run.Iteration)
	if err != nil || row.Status != spec.IterRunning {
		return endIteration(ctx, tx, run, nil)
	}
	usage, err := tx.SumLLMCalls(ctx, run.ID, row.Iteration)
	if err != nil {
		return err
	}
	row.Metrics.SetUsage(usage)
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
func endIteration(ctx context.Context, tx spec.Tx, run *spec.Run, row *spec.Iteration) error {
	if row != nil {
		if err := tx.UpsertIteration(ctx, row); err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventIterationCompleted, spec.IterationCompletedData{
			Iteration: row.Iteration, Attempt: row.Attempt, Status: row.Status, Error: row.Error, Metrics: row.Metrics,
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
