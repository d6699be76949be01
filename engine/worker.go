package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"homework/engine/checks"
	"homework/engine/proc"
	"homework/engine/spec"
	"homework/engine/text"
)

// IterateArgs are the args of an iterate job: one bounded iteration of a run.
// Jobs are unique by all three, and a worker whose (iteration, attempt) is
// not the run's current one completes as a no-op, so a stale job that
// resurfaces can never run an iteration twice.
type IterateArgs struct {
	RunID     string `json:"run_id" river:"unique"`
	Iteration int    `json:"iteration" river:"unique"`
	Attempt   int    `json:"attempt" river:"unique"`
	// Forecast is what the iteration was forecast to spend when it was
	// enqueued (not part of the job's identity); recorded with its outcome.
	Forecast *spec.Forecast `json:"forecast,omitempty"`
}

// Kind implements river.JobArgs.
func (IterateArgs) Kind() string { return "iterate" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (IterateArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type iterateWorker struct {
	river.WorkerDefaults[IterateArgs]
	e *Engine
}

func (w *iterateWorker) Work(ctx context.Context, job *river.Job[IterateArgs]) error {
	return w.e.iterate(ctx, job.Args)
}

// iteration is the state of one iteration being worked.
type iteration struct {
	run      *spec.Run
	cfg      *spec.Config
	row      *spec.Iteration
	input    *spec.Input
	maxInbox int64
	history  []spec.Signals
	forecast *spec.Forecast        // made when the iteration was enqueued
	recent   []*spec.PastIteration // the earlier iterations it read, newest first
	inbox    []*spec.InboxItem     // read as it began in its predecessor's transaction (beginHere)
	// fresh says that no attempt of the iteration began before this one,
	// so none of its model calls is recorded yet (its host counts them).
	fresh bool
	// goOn says whether the finishing transaction may begin the next
	// iteration itself, for this worker to work at once (iterate); nil:
	// never.
	goOn func() bool
	held *attemptHold // this process's hold on the attempt, while it is worked
}

// outcome is what one attempt of an iteration came to: what the executor
// returned, the checks, the gate's decision, the metrics and the narrative.
type outcome struct {
	res          *spec.Result
	checks       []spec.CheckResult
	sig          spec.Signals
	decision     spec.Decision
	metrics      spec.Metrics
	status       string
	narrate      bool // the decision ends the run and wants the report's narrative
	narrative    string
	narrativeErr string
	cut          *budgetReason // a budget used up during the iteration, which it ended
}

// errLeaseLost is the cancel cause of an attempt that is no longer the
// run's current one (recovered elsewhere, or the run moved on).
var errLeaseLost = errors.New("lease lost: the attempt is no longer current")

// iterate works the job's iteration: begin (lease, row, inbox), execute,
// check, decide, and commit the outcome with the next job or the new
// status. The lease is held from begin until the outcome commits.
//
// When the run goes on, the worker goes on with it: the finishing
// transaction begins the next iteration itself, leased to this process,
// and the worker works it at once, with no job in between, while
// ContinueFor has not passed since the job's first iteration began; after
// that the next iteration is enqueued, so that the worker is free for
// other runs' jobs. An iteration begun that way is an attempt like any
// other: if this process dies, its lease expires and recovery works it
// again.
func (e *Engine) iterate(ctx context.Context, args IterateArgs) error {
	if e.noLiveness.Load() {
		// Cut off from the store's liveness, this process may be taken
		// for dead: it begins nothing until it is held again.
		return river.JobSnooze(time.Second)
	}
	it, err := e.beginIteration(ctx, args)
	if err != nil || it == nil {
		return err
	}
	until := time.Now().Add(e.opts.ContinueFor)
	it.held = e.hold(ctx, it)
	e.mu.Lock()
	e.trackLocked(it.run.ID, it.held.fl)
	e.mu.Unlock()
	for it != nil {
		if it, err = e.attempt(ctx, it, until); err != nil {
			return err
		}
	}
	return nil
}

// attemptHold is an attempt's hold on its run in this process: its
// contexts, the leash of the processes it starts, and its entry in the
// engine's inflight (by which a cancel, a lost lease or shutdown reaches
// it).
type attemptHold struct {
	fl      *inflight
	iterCtx context.Context // canceled when the attempt is interrupted or gives the run up
	workCtx context.Context // also cut when a budget is used up during the work
}

// hold makes the attempt's hold on its run, not yet tracked (trackLocked). The
// processes the attempt starts (agent, checks) live under its lease: the
// leash stops them when a renewal is overdue and kills them when the
// attempt gives the run up or ends.
func (e *Engine) hold(ctx context.Context, it *iteration) *attemptHold {
	leash := proc.NewLeash(e.leaseGrace())
	iterCtx, cancel := context.WithCancelCause(proc.WithLeash(ctx, leash))
	workCtx, cut := context.WithCancelCause(iterCtx)
	fl := &inflight{cancel: cancel, cut: cut, leash: leash, iteration: it.row.Iteration, attempt: it.row.Attempt, done: make(chan struct{})}
	return &attemptHold{fl: fl, iterCtx: iterCtx, workCtx: workCtx}
}

// release ends the hold's contexts and its processes.
func (h *attemptHold) release() {
	h.fl.cut(nil)
	h.fl.cancel(nil)
	h.fl.leash.Close()
}

// attempt works a begun and held iteration to its committed outcome. It
// returns the next iteration, held, when the finishing transaction began
// it here (before until, see iterate).
func (e *Engine) attempt(ctx context.Context, it *iteration, until time.Time) (*iteration, error) {
	start := e.now()
	e.metrics.iterationsStarted.Inc()

	h := it.held
	defer h.release()
	fl, iterCtx, workCtx := h.fl, h.iterCtx, h.workCtx
	defer e.untrack(it.run.ID, fl)
	// Whatever of the transcript the finishing transaction did not store,
	// before the attempt counts as returned (untrack).
	defer hostOf(it).flushTranscript(ctx)

	timeout := e.iterationTimeout(it.cfg)
	stopRenew := e.holdLease(iterCtx, fl, it, start.Add(e.attemptBound(it.cfg, timeout)))
	defer stopRenew()

	out, err := e.work(ctx, iterCtx, workCtx, it, start, timeout)
	if err != nil || out == nil {
		return nil, err
	}
	// The executor's own memory of the iteration (progress.txt, a git
	// commit) is written before the outcome commits: committing enqueues
	// (or begins) the next iteration, which must see it and must not race
	// the commit. Only an observer needs to know the attempt is still
	// current first, so only it pays the read.
	if obs, ok := e.executorFor(it.cfg).(GateObserver); ok {
		current := false
		err := e.finalWrite(ctx, it, func(wctx context.Context) error {
			var err error
			current, err = e.isCurrentAttempt(wctx, it)
			return err
		})
		if err != nil {
			return nil, err
		}
		if current {
			wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := obs.AfterGate(wctx, it.input, out.res, out.checks, out.decision); err != nil {
				e.log.Warn("after-gate hook failed", "run", it.run.ID, "iteration", it.row.Iteration, "err", err)
			}
			wcancel()
		}
	}
	// The next iteration begins here only while the job's time lasts and
	// this process works on: not stopping (its jobs are let finish, and
	// none begins another), not cut off from its liveness. Asked in the
	// finishing transaction, as late as can be, on each try.
	it.goOn = func() bool {
		e.mu.Lock()
		stopping := e.stopping
		e.mu.Unlock()
		return time.Now().Before(until) && ctx.Err() == nil && !stopping && !e.noLiveness.Load()
	}
	committed := false
	var next *iteration
	err = e.finalWrite(ctx, it, func(wctx context.Context) error {
		var err error
		committed, next, err = e.finishIteration(wctx, it, out)
		return err
	})
	stopRenew()
	if err != nil {
		return nil, err
	}
	if committed {
		e.metrics.iterationDuration.Observe(e.now().Sub(start).Seconds())
	}
	if next != nil {
		e.handOver(ctx, h, next)
	}
	return next, nil
}

// handOver holds next, the iteration the finishing transaction of prev's
// attempt began here, in prev's place in inflight, at once, so that
// nothing sent to the run's attempt in between is lost: an interrupt (a
// cancel, shutdown) that reached prev after its outcome committed is
// next's. A lost lease is not: a renewal of prev's lease that ran after
// the commit found the run at the next iteration.
func (e *Engine) handOver(ctx context.Context, prev *attemptHold, next *iteration) {
	next.held = e.hold(ctx, next)
	e.mu.Lock()
	defer e.mu.Unlock()
	if cause := context.Cause(prev.iterCtx); cause != nil && !errors.Is(cause, errLeaseLost) {
		next.held.fl.cancel(cause)
	}
	e.trackLocked(next.run.ID, next.held.fl)
}

// work executes the iteration, runs its checks, asks the gate and, when the
// run ends, the summarizer. It returns nil, nil when the attempt must leave
// no trace (the run was recovered or moved on) and an error when the server
// is shutting down (the run stays leased and is recovered at the next start).
//
// The iteration's deadline bounds every model call in it, the summarizer's
// included: the iteration timeout from the executor's start, not counting
// the completion checks (which have timeouts of their own), and never past
// the end of the run's running-time budget, which ends the executor, a
// check or the summarizer at once and stops the run as budget_time.
//
// ctx is the job's, iterCtx the attempt's (canceled when the run is canceled
// or its lease lost), and workCtx, under it, is cut when a spending budget
// is used up during the iteration.
func (e *Engine) work(ctx, iterCtx, workCtx context.Context, it *iteration, start time.Time, timeout time.Duration) (*outcome, error) {
	budgetEnd, budgetCause := e.runningBudget(it, start)
	runCtx, cancelRun := context.WithDeadlineCause(workCtx, budgetEnd, budgetCause)
	defer cancelRun()
	deadline := time.Now().Add(timeout)
	execCtx, cancelExec := context.WithDeadline(runCtx, deadline)
	res, execErr := e.execute(execCtx, it)
	hostOf(it).closeTranscript()
	timedOut := errors.Is(execCtx.Err(), context.DeadlineExceeded) && runCtx.Err() == nil
	ended := execCtx.Err() != nil
	cancelExec()

	if stop, err := interrupted(ctx, iterCtx); stop {
		return nil, err
	}
	out := &outcome{res: res}
	if out.res == nil {
		out.res = &spec.Result{}
	}
	out.res.Error, out.res.ErrorFingerprint = resultError(out, execErr, timedOut, timeout)
	if ended {
		execErr = nil // its error is the end of its time, whatever it wraps
	}
	e.nameStoreOutage(it, out.res, execErr)
	if len(it.cfg.Completion.Checks) > 0 && budgetCutOf(runCtx) == nil {
		began := time.Now()
		out.checks = e.runChecks(runCtx, it, out.res)
		hostOf(it).transcribeChecks(out.checks)
		deadline = deadline.Add(time.Since(began))
		if stop, err := interrupted(ctx, iterCtx); stop {
			return nil, err
		}
	}
	if out.cut = budgetCutOf(runCtx); out.cut != nil && outageFailure(out.res.ErrorFingerprint) == "" {
		out.res.Error, out.res.ErrorFingerprint = "ended early: "+out.cut.detail, "budget:"+out.cut.stop
	}
	// What the executor did is done: a store briefly unreachable must not
	// throw it away (the iteration would run again).
	if err := e.finalWrite(ctx, it, func(wctx context.Context) error {
		return e.decideOutcome(wctx, it, out, start)
	}); err != nil {
		return nil, err
	}
	if out.narrate {
		// Not under runCtx: a tool-call budget used up during the
		// iteration ended its work, but allows a summary.
		var cause error // the iteration's deadline
		if budgetEnd.Before(deadline) {
			deadline, cause = budgetEnd, budgetCause
		}
		nctx, cancel := context.WithDeadlineCause(iterCtx, deadline, cause)
		out.narrative, out.narrativeErr = e.narrate(nctx, it, out.decision, out.res, out.metrics)
		cancel()
		// The summary is part of the iteration: its time counts.
		out.metrics.RunningMS = it.row.Metrics.RunningMS + e.now().Sub(start).Milliseconds()
	}
	return out, nil
}

// runningBudget returns when the run's running-time budget runs out for
// the attempt that began at start — after what its earlier iterations (and
// an interrupted earlier attempt of this one) left of it — and the cause a
// context ended then carries: a budgetCut naming budget_time. Without a
// budget the end is a century away.
func (e *Engine) runningBudget(it *iteration, start time.Time) (time.Time, error) {
	b := it.cfg.Budgets.MaxRunningMS
	if b <= 0 {
		return time.Now().AddDate(100, 0, 0), nil
	}
	left := time.Duration(b-it.run.Metrics.RunningMS-it.row.Metrics.RunningMS) * time.Millisecond
	r := &budgetReason{spec.StopBudgetTime, "max_running_ms", fmt.Sprintf("Used the running-time budget (%s of %s).", fmtMS(b), fmtMS(b))}
	return time.Now().Add(left - e.now().Sub(start)), &budgetCut{reason: r}
}

// budgetCutOf returns the budget used up during the iteration whose context
// is ctx, which ended it, or nil.
func budgetCutOf(ctx context.Context) *budgetReason {
	var cut *budgetCut
	if errors.As(context.Cause(ctx), &cut) {
		return cut.reason
	}
	return nil
}

// nameStoreOutage names an iteration that failed while the database could
// not be reached: when the executor's error, or a store call made for the
// iteration (an event, a model call's usage), found it unreachable, and the
// iteration failed on something other than the model endpoint, its error
// becomes the database's, fingerprinted storeUnavailableFP, so the gate
// names the outage. Its outcome is written once the database answers again
// (finalWrite). An iteration that did its work although some of its events
// were lost did not fail and is left as it is.
func (e *Engine) nameStoreOutage(it *iteration, res *spec.Result, execErr error) {
	cause := hostOf(it).storeError()
	if e.storeUnavailable(execErr) {
		cause = execErr
	}
	if cause == nil || res.Error == "" || endpointFailure(res.ErrorFingerprint) != "" {
		return
	}
	res.Error = "could not reach the database: " + text.OneLine(cause.Error(), 500) + " (the iteration's error: " + truncate(res.Error, 1000) + ")"
	res.ErrorFingerprint = storeUnavailableFP
}

// interrupted reports whether the attempt must end without an outcome: the
// run was canceled (Cancel recorded the iteration with the run's end) or
// moved on (nil error), or the server is shutting down (an error: the run
// stays leased and is recovered at the next start).
func interrupted(ctx, iterCtx context.Context) (bool, error) {
	cause := context.Cause(iterCtx)
	switch {
	case errors.Is(cause, errLeaseLost), errors.Is(cause, errRunCanceled):
		return true, nil
	case errors.Is(cause, errShutdown) || ctx.Err() != nil:
		return true, fmt.Errorf("iteration interrupted by shutdown: %w", ctx.Err())
	}
	return false, nil
}

// resultError returns the iteration's error text and fingerprint.
func resultError(out *outcome, execErr error, timedOut bool, timeout time.Duration) (string, string) {
	res := out.res
	switch {
	case timedOut:
		return fmt.Sprintf("iteration timed out after %s", timeout), "timeout"
	case execErr != nil:
		msg, fp := res.Error, res.ErrorFingerprint
		if msg == "" {
			msg = execErr.Error()
		}
		if fp == "" {
			fp = hashStrings("error", normalizeError(execErr.Error()))
		}
		return msg, fp
	}
	return res.Error, res.ErrorFingerprint
}

// runChecks runs the completion checks under the attempt's context: a
// cancel of the run, the loss of the lease or the end of the shutdown grace
// kills a running command check at once (and the caller records nothing).
func (e *Engine) runChecks(iterCtx context.Context, it *iteration, res *spec.Result) []spec.CheckResult {
	return checks.Run(iterCtx, it.cfg.Completion.Checks, e.checkEnv(it, res))
}

// decideOutcome computes the signals, metrics and the gate's decision, and
// whether the decision, which ends the run, wants the report's narrative
// (then written by work, under the iteration's deadline).
func (e *Engine) decideOutcome(ctx context.Context, it *iteration, out *outcome, start time.Time) error {
	res := out.res
	out.sig = computeSignals(res, out.checks)
	m, err := e.iterationMetrics(ctx, it, res, start)
	if err != nil {
		return err
	}
	total := it.run.Metrics
	total.Add(m)
	out.decision = decide(gateInput{Config: it.cfg, Iteration: it.row.Iteration, Result: res, Checks: out.checks,
		Metrics: total, Signals: out.sig, History: it.history, Cut: out.cut})
	if out.decision.FalseCompletion {
		m.FalseCompletionsBlocked = 1
	}
	out.metrics = m
	out.status = spec.IterSucceeded
	if res.Error != "" {
		out.status = spec.IterFailed
	}
	out.narrate, out.narrativeErr = false, ""
	switch {
	case !ending(out.decision):
	case res.Fatal != nil:
		// The endpoint refused the run; asking it for a summary would fail too.
		out.narrativeErr = "No summary was written: " + res.Fatal.Detail
	case out.cut != nil && out.cut.stop != spec.StopBudgetToolCalls:
		// Asking the model for a summary would spend past the budget.
		out.narrativeErr = "No summary was written: the run's budget was used up during its last iteration."
	case endpointFailure(res.ErrorFingerprint) != "":
		// The endpoint just failed; it is not asked again for a summary.
		out.narrativeErr = "No summary was written: the model endpoint had just failed (" + truncate(res.Error, 300) + ")."
	default:
		out.narrate = true
	}
	return nil
}

// iterationTimeout is the executor's bound for one iteration.
func (e *Engine) iterationTimeout(cfg *spec.Config) time.Duration {
	timeout := time.Duration(cfg.Budgets.IterationTimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = e.opts.DefaultIterationTime
	}
	return timeout
}

// attemptBound is the longest a well-behaved attempt can take: the
// executor's timeout, every command check's timeout, the summarizer and the
// final write, plus slack. Past it the attempt stops renewing its lease (the
// watchdog), so an executor that ignores its context cannot hold a run.
func (e *Engine) attemptBound(cfg *spec.Config, timeout time.Duration) time.Duration {
	d := timeout + e.opts.NarrateTimeout + 30*time.Second + e.opts.LeaseTTL
	for _, c := range cfg.Completion.Checks {
		if c.Type != spec.CheckCommand {
			continue
		}
		ct := checks.DefaultTimeout
		if c.TimeoutMS > 0 {
			ct = time.Duration(c.TimeoutMS) * time.Millisecond
		}
		d += ct + 5*time.Second
	}
	return d
}

// track registers an attempt in flight; untrack removes it unless a newer
// attempt of the run replaced it.
// trackLocked makes f the run's attempt in this process; e.mu is held. An
// attempt tracked while the process is cut off from its liveness has its
// processes held still at once, as livenessChanged did to the others.
func (e *Engine) trackLocked(runID string, f *inflight) {
	e.inflight[runID] = f
	if e.noLiveness.Load() {
		f.leash.Freeze()
	}
}

func (e *Engine) untrack(runID string, f *inflight) {
	e.mu.Lock()
	if e.inflight[runID] == f {
		delete(e.inflight, runID)
	}
	e.mu.Unlock()
	close(f.done)
}

// isCurrentAttempt reports whether it is still the run's current attempt
// under this process's lease.
func (e *Engine) isCurrentAttempt(ctx context.Context, it *iteration) (bool, error) {
	run, err := e.store.FindRun(ctx, it.run.UserID, it.run.ID)
	if spec.ErrorCode(err) == spec.ENOTFOUND {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return e.current(run, it.row), nil
}

// finalWrite runs write, one of an attempt's final reads and writes, until
// it succeeds: an attempt whose work is done must not lose it to a database
// that is briefly unreachable (the iteration would run again). Every final
// write checks in its transaction that the attempt is still current, so
// retrying can never record it twice or over an attempt that took its
// place; the reads before it change nothing. Each try survives the job
// context's cancellation. The retries end when the job is canceled
// (shutdown, or recovery gave the run to another attempt), or after
// finalWriteFor unless the store is unavailable (an outage is waited out:
// once another process takes the run over, the write finds the attempt
// stale and writes nothing); the last error is returned.
func (e *Engine) finalWrite(ctx context.Context, it *iteration, write func(ctx context.Context) error) error {
	giveUp := time.Now().Add(finalWriteFor)
	wait := 50 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := write(wctx)
		cancel()
		if err == nil || ctx.Err() != nil || (time.Now().After(giveUp) && !e.storeUnavailable(err)) {
			return err
		}
		e.log.Warn("final write of an iteration failed; retrying", "run", it.run.ID, "iteration", it.row.Iteration, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// finalWriteFor bounds the retries of a final write that fails for another
// reason than an unavailable store (finalWrite).
const finalWriteFor = 30 * time.Second

// storeUnavailable reports whether err means the store was unavailable.
func (e *Engine) storeUnavailable(err error) bool {
	return err != nil && e.store.Unavailable(err)
}

// current reports whether row's attempt is run's current one, leased by us.
func (e *Engine) current(run *spec.Run, row *spec.Iteration) bool {
	return run.Status == spec.StatusRunning && run.Iteration == row.Iteration && run.Attempt == row.Attempt && run.LeaseOwner == e.id
}

func ending(d spec.Decision) bool {
	return d.Decision == spec.DecisionComplete || d.Decision == spec.DecisionStop || d.Decision == spec.DecisionFail
}

func (e *Engine) executorFor(cfg *spec.Config) Executor {
	x, _ := e.executor(cfg.Executor)
	return x
}

// execute calls the executor, turning a panic into a failed iteration with
// the stack recorded.
func (e *Engine) execute(ctx context.Context, it *iteration) (res *spec.Result, err error) {
	x, ok := e.executor(it.cfg.Executor)
	if !ok {
		return &spec.Result{Fatal: &spec.Fatal{Type: spec.StopError,
			Detail: fmt.Sprintf("The %s executor is not available on this server any more.", it.cfg.Executor)}}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			e.log.Error("executor panicked", "run", it.run.ID, "iteration", it.row.Iteration, "panic", p, "stack", stack)
			res = &spec.Result{Error: fmt.Sprintf("executor panicked: %v\n%s", p, truncate(stack, 4000)),
				ErrorFingerprint: hashStrings("panic", fmt.Sprint(p))}
			err = nil
		}
	}()
	return x.Iterate(ctx, it.input)
}

// beginIteration checks that args are the run's current iteration, takes
// the lease, writes the running iteration row and builds the input. It
// returns nil, nil for a stale job.
func (e *Engine) beginIteration(ctx context.Context, args IterateArgs) (*iteration, error) {
	// What the earlier iterations left and the inbox are read before the
	// write transaction, so that the one writer does not wait on them:
	// finished iterations do not change (the previous one was finished in
	// the transaction that enqueued this job), and the iteration consumes
	// the inbox items up to the last id read here. That consumes no item
	// unread because inbox items are inserted only in a transition, under
	// the run's lock, so their ids are given in commit order; an item
	// committed after the read waits for the next iteration.
	recent, err := e.store.PastIterations(ctx, args.RunID, args.Iteration, historyDepth)
	if err != nil {
		return nil, err
	}
	inbox, err := e.store.PendingInbox(ctx, args.RunID)
	if err != nil {
		return nil, err
	}
	var it *iteration
	err = e.inTx(ctx, func(tx spec.Tx) error {
		run, err := tx.FindRun(ctx, args.RunID)
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			return nil
		} else if err != nil {
			return err
		}
		if run.Status != spec.StatusRunning || run.Iteration != args.Iteration || run.Attempt != args.Attempt {
			return nil // stale: a no-op
		}
		if run.LeaseOwner != "" && run.LeaseOwner != e.id {
			// This attempt already began under another process (this job is
			// River's retry or rescue of its job): recovery, not this job,
			// runs the iteration again, as a new attempt, once that
			// process is dead or its lease expired.
			return nil
		}
		// Decoded before anything is written: a config that does not
		// decode fails the job with nothing begun.
		cfg, err := RunConfig(run)
		if err != nil {
			return err
		}
		// Unleased, attempt 1 is begun for the first time; leased to this
		// process, it is River's retry of a job that began it.
		fresh := args.Attempt == 1 && run.LeaseOwner == ""
		if err := tx.SetLease(ctx, run, e.id, tx.Now().Add(e.opts.LeaseTTL)); err != nil {
			return err
		}
		row := &spec.Iteration{RunID: run.ID, Iteration: args.Iteration, Attempt: args.Attempt, Status: spec.IterRunning, StartedAt: tx.Now()}
		if args.Attempt > 1 {
			// An interrupted earlier attempt: its running time still counts,
			// in this row, which replaces it, and its model calls are the
			// iteration's (iterationMetrics reads them); neither counts
			// twice in the run total the gate checks budgets against.
			if prev, err := tx.FindIteration(ctx, run.ID, args.Iteration); err == nil {
				row.Metrics.RunningMS = prev.Metrics.RunningMS
				run.Metrics.Sub(prev.Metrics)
			}
		}
		if err := tx.UpsertIteration(ctx, row); err != nil {
			return err
		}
		it = &iteration{run: run, cfg: cfg, row: row, forecast: args.Forecast, recent: recent, fresh: fresh}
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventIterationStarted, spec.IterationStartedData{
			Iteration: args.Iteration, Attempt: args.Attempt, Inbox: len(inbox),
		}); err != nil {
			return err
		}
		return nil
	})
	if err != nil || it == nil {
		return nil, err
	}
	e.prepare(it, inbox)
	return it, nil
}

// prepare makes a begun iteration's input from what the earlier iterations
// left (it.recent) and its inbox, after the beginning commit, so that no
// other write waits on it.
func (e *Engine) prepare(it *iteration, inbox []*spec.InboxItem) {
	recent := it.recent
	in := &spec.Input{RunID: it.run.ID, UserID: it.run.UserID, Iteration: it.row.Iteration, Attempt: it.row.Attempt,
		Config: it.cfg, WorkspaceDocID: it.run.WorkspaceDocID}
	for _, m := range inbox {
		in.Inbox = append(in.Inbox, spec.InboxItem{Kind: m.Kind, Body: m.Body, CreatedAt: m.CreatedAt})
		it.maxInbox = m.ID
	}
	it.input = in
	for _, r := range recent { // newest first
		if in.Feedback == nil {
			in.Feedback = feedbackOf(r)
		}
		in.Summaries = append([]string{r.Summary}, in.Summaries...)
	}
	if len(in.Summaries) > 3 {
		in.Summaries = in.Summaries[len(in.Summaries)-3:]
	}
	it.history = historySinceResume(recent, it.row.Iteration)
	it.input.Host = &host{e: e, runID: it.run.ID, iteration: it.row.Iteration, budgets: &it.cfg.Budgets,
		baseTools: it.run.Metrics.ToolCallsTotal, tr: e.newTranscript(it.run.ID, it.row.Iteration, it.row.Attempt),
		usageKnown: it.fresh}
}

// feedbackOf returns what the gate said after iteration r.
func feedbackOf(r *spec.PastIteration) *spec.Feedback {
	var g spec.GateRecord
	if len(r.Gate) > 0 {
		json.Unmarshal(r.Gate, &g)
	}
	fb := &spec.Feedback{Decision: g.Decision.Decision, Reasons: g.Reasons, Questions: g.Questions, RemainingWork: g.RemainingWork}
	var cr []spec.CheckResult
	json.Unmarshal(r.Checks, &cr)
	for _, c := range cr {
		if !c.Passed {
			fb.FailingChecks = append(fb.FailingChecks, c)
		}
	}
	return fb
}

// historySinceResume returns the signals of the iterations before n, newest
// first, back to (not including) the last one that ended a stretch with a
// wait or a stop, so breakers start afresh after the person steps in.
func historySinceResume(recent []*spec.PastIteration, n int) []spec.Signals {
	var out []spec.Signals
	for _, r := range recent {
		if r.Iteration >= n {
			continue
		}
		var g spec.GateRecord
		if len(r.Gate) == 0 || json.Unmarshal(r.Gate, &g) != nil {
			break
		}
		if g.Decision.Decision != spec.DecisionContinue {
			break
		}
		out = append(out, g.Signals)
	}
	return out
}

// iterationMetrics returns this iteration's metrics: its usage as recorded
// in llm_calls (as its host counted the records when it knows them), tool
// calls and running time.
func (e *Engine) iterationMetrics(ctx context.Context, it *iteration, res *spec.Result, start time.Time) (spec.Metrics, error) {
	m, known := spec.Metrics{}, false
	if h, ok := it.input.Host.(*host); ok {
		m, known = h.iterationUsage()
	}
	var err error
	if !known {
		m, err = e.store.SumLLMCalls(ctx, it.run.ID, it.row.Iteration)
	}
	m.Iterations = 1
	m.ToolCallsTotal = res.ToolCalls
	m.RunningMS = it.row.Metrics.RunningMS + e.now().Sub(start).Milliseconds()
	if m.ByModel == nil {
		m.ByModel = map[string]spec.ModelUsage{}
	}
	return m, err
}

// checkEnv gives checks what they may look at.
func (e *Engine) checkEnv(it *iteration, res *spec.Result) checks.Env {
	env := checks.Env{Output: res.Output, Environ: minimalEnviron()}
	if it.cfg.Agent != nil {
		env.Workdir = it.cfg.Agent.Workdir
	}
	if ce, ok := e.executorFor(it.cfg).(CheckEnvironment); ok {
		env.Environ = ce.Environ(it.input)
	}
	runID, userID := it.run.ID, it.run.UserID
	env.Document = func(ctx context.Context, path string) (string, bool, error) {
		d, err := e.store.FindRunDocumentByPath(ctx, userID, runID, path)
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			return "", false, nil
		} else if err != nil {
			return "", false, err
		}
		return d.Content, true, nil
	}
	env.Tasks = func(ctx context.Context) (int, int, error) {
		tasks, err := e.store.ListTasks(ctx, userID, runID)
		if err != nil {
			return 0, 0, err
		}
		done := 0
		for _, t := range tasks {
			if t.Status == spec.TaskDone {
				done++
			}
		}
		return len(tasks), done, nil
	}
	return env
}

// minimalEnviron is what command checks get when the executor does not say:
// enough to find programs, never the server's secrets.
func minimalEnviron() []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR", "GOCACHE", "GOPATH", "GOMODCACHE", "GOFLAGS", "GOPROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// finishIteration commits an iteration's outcome in one transaction: the
// iteration row, its events, the run's metrics, and either the next job,
// or the next iteration begun here (returned, for the worker to work), or
// the run's new status, whose event is then the run's last. An attempt that
// is no longer the run's current one writes nothing and reports false.
func (e *Engine) finishIteration(ctx context.Context, it *iteration, out *outcome) (bool, *iteration, error) {
	// The row is encoded outside the transaction, and again in it only
	// when the executor queued writes, which may add to its artifacts.
	row, queued := e.outcomeRow(it, out), hostOf(it).pendingOutcome()
	var stored func()   // marks the transcript lines and the executor's writes the transaction stored
	var next *iteration // begun here (it.goOn)
	err := e.inTx(ctx, func(tx spec.Tx) error {
		stored, next = nil, nil
		run, err := tx.FindRun(ctx, it.run.ID)
		if err != nil {
			return err
		}
		if !e.current(run, row) {
			return nil // stale: a pure no-op
		}
		// The executor's last writes commit with the outcome, not in a
		// transaction each; they come first, as they may add to its
		// artifacts.
		wrote, err := hostOf(it).writeOutcome(ctx, tx)
		if err != nil {
			return err
		}
		if queued {
			row = e.outcomeRow(it, out)
		}
		// The rest of the transcript commits with the outcome, its event
		// before the iteration's own.
		markStored, err := hostOf(it).storeTranscript(ctx, tx)
		if err != nil {
			return err
		}
		if err := e.recordIteration(ctx, tx, run, it, row, out); err != nil {
			return err
		}
		// Begun here only when what the next iteration reads of this one
		// is what was written (following).
		here := it.goOn != nil && it.goOn() && storedAsWritten(row.Summary)
		if next, err = e.applyDecision(ctx, tx, run, it, out, here); err != nil {
			return err
		}
		stored = func() { wrote(); markStored() }
		return nil
	})
	if err != nil || stored == nil {
		return false, nil, err
	}
	stored()
	if next != nil {
		next.recent = following(row, it.recent)
		e.prepare(next, next.inbox)
	}
	return true, next, nil
}

// outcomeRow fills the iteration row from the outcome (usage is re-read in
// the finishing transaction).
func (e *Engine) outcomeRow(it *iteration, out *outcome) *spec.Iteration {
	res, d := out.res, out.decision
	rec := spec.GateRecord{Decision: d, Signals: out.sig, Forecast: it.forecast}
	if res.Status != nil {
		rec.RemainingWork = res.Status.RemainingWork
	}
	gate, _ := json.Marshal(rec)
	checksJSON, _ := json.Marshal(out.checks)
	if out.checks == nil {
		checksJSON = []byte("[]")
	}
	artifacts, _ := json.Marshal(res.Artifacts)
	row := *it.row
	row.Status, row.Summary = out.status, res.Summary
	row.Gate, row.Checks, row.Fingerprint = gate, checksJSON, out.sig.Progress
	row.Error, row.ErrorFingerprint, row.Metrics, row.Artifacts = res.Error, res.ErrorFingerprint, out.metrics, artifacts
	return &row
}

// recordIteration writes the iteration row, consumes its inbox, sums the
// run's metrics and appends the iteration's events.
func (e *Engine) recordIteration(ctx context.Context, tx spec.Tx, run *spec.Run, it *iteration, row *spec.Iteration, out *outcome) error {
	row.EndedAt = tx.Now()
	// Usage is re-read here so calls made after the iteration's own
	// (the summarizer's) are in the iteration and so in the run total.
	usage, err := tx.SumLLMCalls(ctx, run.ID, row.Iteration)
	if err != nil {
		return err
	}
	row.Metrics.SetUsage(usage)
	if err := tx.UpsertIteration(ctx, row); err != nil {
		return err
	}
	total, err := e.settled.sum(ctx, tx, run.ID, row.Iteration)
	if err != nil {
		return err
	}
	run.Metrics = total
	if it.maxInbox > 0 {
		if err := tx.ConsumeInbox(ctx, run.ID, it.maxInbox, row.Iteration); err != nil {
			return err
		}
	}
	for _, c := range out.checks {
		if _, err := tx.AppendEvent(ctx, run.ID, spec.EventCheckResult, spec.CheckResultData{Iteration: row.Iteration, Check: c}); err != nil {
			return err
		}
	}
	d, res := out.decision, out.res
	if _, err := tx.AppendEvent(ctx, run.ID, spec.EventGateDecision, spec.GateDecisionData{
		Iteration: row.Iteration, Decision: d.Decision, Reasons: d.Reasons, StopReason: d.StopReason,
		WaitReason: d.WaitReason, Questions: d.Questions, FalseCompletion: d.FalseCompletion,
		Evidence: d.Evidence, CheckScore: out.sig.Score,
	}); err != nil {
		return err
	}
	_, err = tx.AppendEvent(ctx, run.ID, spec.EventIterationCompleted, spec.IterationCompletedData{
		Iteration: row.Iteration, Attempt: row.Attempt, Status: row.Status, Summary: truncate(res.Summary, 2000),
		Error: truncate(res.Error, 2000), Metrics: row.Metrics, Decision: d.Decision,
		RunMetrics: &spec.RunSoFarData{Iterations: total.Iterations, TokensTotal: total.TokensTotal, CostTotalUSD: total.CostTotalUSD},
	})
	return err
}

// applyDecision enqueues the next iteration, or begins it (here), or
// moves the run to its new status (report, notification, status event
// last), then promotes queued runs when a slot freed. It returns the
// iteration it began. The run's config is the one decoded when the
// iteration began.
func (e *Engine) applyDecision(ctx context.Context, tx spec.Tx, run *spec.Run, it *iteration, out *outcome, here bool) (*iteration, error) {
	d := out.decision
	run.RunningSince = time.Time{}
	switch d.Decision {
	case spec.DecisionContinue:
		run.RunningSince = tx.Now()
		next, err := e.advance(ctx, tx, run, it.cfg, e.endpointBackoff(out, it.history), here)
		if err != nil || run.Status == spec.StatusRunning {
			return next, err
		}
		// The forecast stopped it, or made it wait: its slot is free.
	case spec.DecisionWait:
		w := &spec.Waiting{Reason: d.WaitReason, Questions: d.Questions}
		if err := e.setStatus(ctx, tx, run, spec.StatusWaiting, nil, w); err != nil {
			return nil, err
		}
	default: // complete, stop, fail
		st, sr := spec.StatusStopped, &spec.StopReason{Type: d.StopReason, Detail: joinReasons(d.Reasons), Evidence: d.Evidence}
		switch d.Decision {
		case spec.DecisionComplete:
			st, sr = spec.StatusCompleted, &spec.StopReason{Type: spec.StopCompleted, Detail: joinReasons(d.Reasons)}
		case spec.DecisionFail:
			st = spec.StatusFailed
		}
		if err := e.writeReport(ctx, tx, run, st, sr, out.narrative, out.narrativeErr); err != nil {
			return nil, err
		}
		if err := e.setStatus(ctx, tx, run, st, sr, nil); err != nil {
			return nil, err
		}
	}
	return nil, e.promote(ctx, tx, run.UserID)
}

func joinReasons(r []string) string {
	out := ""
	for i, s := range r {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	return out
}

// leaseGrace is how long an attempt's processes may run after a lease
// renewal: the lease's TTL less a quarter, so that they are stopped before
// the lease can be seen expired anywhere.
func (e *Engine) leaseGrace() time.Duration { return e.opts.LeaseTTL - e.opts.LeaseTTL/4 }

// holdLease renews the attempt's lease every third of its TTL from now
// until the returned stop is called (after the outcome commits) or ctx ends.
// Each renewal is a compare-and-set on the attempt, and extends the leash
// of the attempt's processes; without one they stop by themselves before
// the lease can be seen expired (proc.Leash), so a paused or cut-off
// attempt does nothing while another process may take its run over. The
// attempt gives the run up at once (its processes killed, its context
// canceled with errLeaseLost, its finish writing nothing) when a renewal
// finds the run taken over or moved on, or when the store could not be
// reached for unreachableFor. While this process's liveness is lost it does
// not renew: it may have been taken for dead, and learns which when it
// renews after holding its liveness again. Past deadline it stops renewing
// and abandons the attempt (the watchdog): an executor that ignores its
// context cannot hold a run, and recovery takes the run over once the
// lease expires.
func (e *Engine) holdLease(ctx context.Context, fl *inflight, it *iteration, deadline time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		renewed := time.Now()
		t := time.NewTicker(e.opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if e.now().After(deadline) {
				e.log.Warn("attempt past its deadline: abandoned", "run", it.run.ID, "iteration", it.row.Iteration)
				fl.abandoned.Store(true)
				fl.giveUp()
				return
			}
			if lost := time.Since(renewed); lost > e.unreachableFor() {
				e.log.Warn("lease not renewed for too long: attempt given up", "run", it.run.ID, "iteration", it.row.Iteration, "for", lost.Round(time.Second))
				fl.giveUp()
				return
			}
			if e.noLiveness.Load() {
				continue // frozen by livenessChanged until held again
			}
			sent := time.Now()
			rctx, cancel := context.WithTimeout(ctx, e.opts.LeaseTTL/3)
			ok, err := e.store.RenewAttemptLease(rctx, it.run.ID, e.id, it.row.Iteration, it.row.Attempt, e.now().Add(e.opts.LeaseTTL))
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				e.log.Warn("renew lease", "run", it.run.ID, "err", err)
			case !ok:
				fl.giveUp()
				return
			default:
				renewed = sent
				fl.leash.Extend(time.Until(sent.Add(e.leaseGrace())))
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// unreachableFor is how long an attempt may go without renewing its lease
// (the store unreachable, or this process's liveness lost) before it gives
// its run up; its processes are stopped from the first lapse on.
func (e *Engine) unreachableFor() time.Duration { return max(4*e.opts.LeaseTTL, time.Minute) }
