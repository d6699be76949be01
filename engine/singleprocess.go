package engine

import "context"

// The engine's single-process assumptions, each a strategy with a seam for
// running several server processes on one store:
//
//   - Event seqs: the SQLite store caches each run's next seq while it is
//     the database's only writer (db.Options.Lock); db.Options.SharedWriters
//     reads it in every transaction instead. See db's seqCache.
//   - The file lock: db.Options.Lock makes a second server on the same file
//     refuse to start. Several processes leave it off and set SharedWriters.
//   - Start-up recovery: with one process, every lease not this engine's is
//     stale at start, so Start recovers all of them at once. With
//     Options.SharedStore, Start leaves leases to the periodic pass, which
//     recovers only expired ones (their owner stopped renewing).
//   - Cancel delivery: Cancel interrupts a running iteration through the
//     in-process map of in-flight iterations. A spec.Cluster store replaces
//     that with a delivery to whichever process works the run; that process
//     calls InterruptLocal. Answers and messages need no such path: they go
//     through the inbox table and the next job.
//   - Slot promotion: promote counts a user's running runs and starts the
//     oldest queued ones in one transaction. SQLite serialises writers, so
//     two promotions cannot both see a free slot; spec.Tx.LockedStartable
//     and LockedRunningCount are where a store with concurrent writers
//     takes a per-user lock first. On such a store a run's creation may
//     start the run on a slot it found free without the lock, and check
//     the slot under the lock in its commit (spec.SlotChecker).

// On PostgreSQL (package db/pg) each of these takes its
// multi-process strategy: seqs come from a per-run counter row locked by the
// appending transaction; there is no lock file; SharedStore is set and
// processes heartbeat and hold their liveness (spec.Cluster), so recovery
// takes the leases of dead processes at once and otherwise only expired
// ones; interrupts go through the store's NOTIFY channel; and slot
// promotion takes a per-user advisory lock.

// interrupt stops the run's in-flight iteration, wherever it runs.
func (e *Engine) interrupt(ctx context.Context, runID string, cause error) {
	c, ok := e.cluster()
	if !ok {
		e.InterruptLocal(runID, cause)
		return
	}
	if err := c.Interrupt(ctx, runID, cause); err != nil {
		// The run's state already changed; its worker sees that at its next
		// lease renewal or when the iteration ends.
		e.log.Warn("deliver interrupt", "run", runID, "err", err)
	}
}

// CancelLocal stops the run's iteration if this process is working it, as
// a cancellation of the run. The receiving side of a Cluster's Interrupt whose
// only cause is cancellation (PostgreSQL's NOTIFY) calls it.
func (e *Engine) CancelLocal(runID string) { e.InterruptLocal(runID, errRunCanceled) }

// InterruptLocal cancels the run's iteration if this process is working it,
// with cause. A Cluster's receiving side of Interrupt calls it.
func (e *Engine) InterruptLocal(runID string, cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.inflight[runID]; f != nil {
		f.cancel(cause)
	}
}
