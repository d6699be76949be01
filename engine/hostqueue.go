package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"homework/engine/spec"
)

// Command runs across machines.
//
// A command run's work directory lives on one host, so on a store shared by
// several processes its iterations may only run on a process of that host
// started with --allow-command-runs for a root holding the directory.
//
//   - Each such process is a command host (Options.CommandHost and
//     CommandRoot): besides River's default queue it works a queue of its
//     own, named from its host id and root (commandQueue), and records host,
//     root and queue with its heartbeat.
//   - A command run is bound, when it is created, to the host of the process
//     that validated its work directory (run_hosts); every iterate job of
//     the run is inserted into that host's queue, so only processes of that
//     host and root take them.
//   - When the run's lease has expired and no live process (heartbeat within
//     a lease TTL) serves the queue, recovery does not requeue it: the
//     interrupted iteration is recorded, its jobs are canceled and the run
//     waits with reason host_unavailable, naming host and root, which frees
//     its slot.
//   - When a process serving the queue heartbeats again, the recovery pass
//     of any process resumes the run by itself (the same iteration, next
//     attempt) as soon as the user has a free slot: the run stopped for the
//     server's sake, not the person's.
//
// On a single-process store (SQLite) every run uses the default queue.

// commandQueue is the River queue of the command host with this id and
// command-run root: "cmd_" and a hash of both, a valid queue name whatever
// characters they hold.
func commandQueue(host, root string) string {
	h := sha256.Sum256([]byte(host + "\x00" + root))
	return "cmd_" + hex.EncodeToString(h[:8])
}

// isCommandHost reports whether this process binds command runs to its host
// and works their queue.
func (o *Options) isCommandHost() bool {
	return o.SharedStore && o.CommandRunsAllowed && o.CommandHost != "" && o.CommandRoot != ""
}

// riverQueues is the River queues this process works: the default one and,
// on a command host, its command queue, each with Workers workers, and the
// webhook queue.
//
// The webhook queue is polled at most every fifth of the first retry's
// backoff (1 s by default) rather than every FetchPollInterval: a new
// delivery's job wakes this process's fetch when its transaction commits,
// so what waits for a poll is a retry, already seconds away, or a delivery
// this process has no free webhook worker for; and every process's idle
// polling of a second queue cost as much as its first.
func riverQueues(o Options) map[string]river.QueueConfig {
	webhooks := river.QueueConfig{MaxWorkers: o.WebhookWorkers, FetchPollInterval: max(o.FetchPollInterval, min(time.Second, o.WebhookBackoffBase/5))}
	q := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Workers}, webhookQueue: webhooks}
	if o.isCommandHost() {
		q[commandQueue(o.CommandHost, o.CommandRoot)] = river.QueueConfig{MaxWorkers: o.Workers}
	}
	return q
}

// cluster returns the store's multi-process side when other engines work
// the same store (Options.SharedStore).
func (e *Engine) cluster() (spec.Cluster, bool) {
	if !e.opts.SharedStore {
		return nil, false
	}
	c, ok := e.store.(spec.Cluster)
	return c, ok
}

// bindHost binds a new command run to this process's host in tx.
func (e *Engine) bindHost(ctx context.Context, tx spec.Tx, run *spec.Run) error {
	if run.Executor != spec.ExecutorCommand || !e.opts.isCommandHost() {
		return nil
	}
	htx, ok := tx.(spec.ClusterTx)
	if !ok {
		return nil
	}
	o := e.opts
	return htx.BindRunHost(ctx, run.ID, o.CommandHost, o.CommandRoot, commandQueue(o.CommandHost, o.CommandRoot))
}

// runHost returns the host, root and queue the run is bound to ("" for the
// default queue). Only a command run is ever bound (bindHost, as it is
// created; a run's executor never changes), so no other is looked up.
func (e *Engine) runHost(ctx context.Context, tx spec.Tx, run *spec.Run) (host, root, queue string, err error) {
	if run.Executor != spec.ExecutorCommand {
		return "", "", "", nil
	}
	if _, ok := e.cluster(); !ok {
		return "", "", "", nil
	}
	htx, ok := tx.(spec.ClusterTx)
	if !ok {
		return "", "", "", nil
	}
	return htx.RunHost(ctx, run.ID)
}

// liveQueues returns the command queues some live process serves.
func (e *Engine) liveQueues(ctx context.Context) (map[string]bool, error) {
	hs, ok := e.cluster()
	if !ok {
		return nil, nil
	}
	live, err := hs.LiveCommandQueues(ctx, e.now().Add(-e.opts.LeaseTTL))
	if err == nil && e.opts.isCommandHost() {
		// This process serves its own queue, whatever its last heartbeat
		// says (one cut off from the store could not record it).
		live[commandQueue(e.opts.CommandHost, e.opts.CommandRoot)] = true
	}
	return live, err
}

// hostWaiting is the Waiting of a run whose host no live process serves.
func hostWaiting(host, root string) *spec.Waiting {
	return &spec.Waiting{Reason: spec.WaitHostUnavailable, Detail: fmt.Sprintf(
		"No homework process is running on host %q with command-run root %s, which holds this run's work directory; "+
			"the run resumes by itself when one starts there.", host, root)}
}

// parkOnHost moves a running run whose host is gone to waiting, in tx: its
// jobs are canceled, its interrupted iteration recorded, its slot freed.
func (e *Engine) parkOnHost(ctx context.Context, tx spec.Tx, run *spec.Run, jobs []IterateJob, host, root string) error {
	for _, j := range jobs {
		if err := e.queue.JobCancelTx(ctx, tx, j.ID); err != nil {
			return err
		}
	}
	if err := e.interruptIteration(ctx, tx, run,
		fmt.Sprintf("interrupted: no process serves host %q (root %s) any more", host, root)); err != nil {
		return err
	}
	if err := e.setStatus(ctx, tx, run, spec.StatusWaiting, nil, hostWaiting(host, root)); err != nil {
		return err
	}
	return e.promote(ctx, tx, run.UserID)
}

// resumeHostRuns resumes the runs waiting for a host that a live process
// serves again, while their users have free slots. A run whose user has
// none is tried again at the next pass.
func (e *Engine) resumeHostRuns(ctx context.Context) error {
	hs, ok := e.cluster()
	if !ok {
		return nil
	}
	waiting, err := hs.HostWaitingRuns(ctx)
	if err != nil || len(waiting) == 0 {
		return err
	}
	live, err := e.liveQueues(ctx)
	if err != nil {
		return err
	}
	for runID, queue := range waiting {
		if !live[queue] {
			continue
		}
		resumed := false
		err := e.inTx(ctx, func(tx spec.Tx) error {
			run, err := tx.FindRun(ctx, runID)
			if err != nil {
				return err
			}
			if run.Status != spec.StatusWaiting || run.Waiting == nil || run.Waiting.Reason != spec.WaitHostUnavailable {
				return nil // moved on meanwhile
			}
			running, err := tx.LockedRunningCount(ctx, run.UserID)
			if err != nil || running >= e.opts.MaxConcurrentPerUser {
				return err
			}
			run.Status = spec.StatusRunning
			run.Waiting = nil
			run.RunningSince = tx.Now()
			run.Attempt++ // the interrupted iteration again; its old job may be stuck "running"
			run.LeaseOwner = ""
			run.LeaseUntil = tx.Now().Add(e.opts.LeaseTTL)
			if err := tx.UpdateRun(ctx, run); err != nil {
				return err
			}
			if err := tx.ResolveRunNotifications(ctx, run.ID, "run_"+spec.StatusWaiting); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(ctx, run.ID, spec.EventRunStarted, spec.RunStartedData{
				Iteration: run.Iteration, Resumed: true, Reason: "host_available",
			}); err != nil {
				return err
			}
			resumed = true
			return e.insertJob(ctx, tx, run, 0, nil)
		})
		if err != nil {
			return err
		}
		if resumed {
			e.log.Info("resumed run on its host", "run", runID)
		}
	}
	return nil
}
