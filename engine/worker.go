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

	"homework/db"
	"homework/engine/checks"
	"homework/engine/spec"
)

// IterateArgs are the args of an iterate job: one bounded iteration of a run.
// Jobs are unique by all three, and a worker whose (iteration, attempt) is
// not the run's current one completes as a no-op, so a stale job that
// resurfaces can never run an iteration twice.
type IterateArgs struct {
	RunID     string `json:"run_id" river:"unique"`
	Iteration int    `json:"iteration" river:"unique"`
	Attempt   int    `json:"attempt" river:"unique"`
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
	run      *db.Run
	cfg      *spec.Config
	row      *db.Iteration
	input    *spec.Input
	maxInbox int64
	history  []Signals
}

// iterate works one iteration: begin (lease, row, inbox), execute, check,
// decide, and commit the outcome with the next job or the new status.
func (e *Engine) iterate(ctx context.Context, args IterateArgs) error {
	it, err := e.beginIteration(ctx, args)
	if err != nil || it == nil {
		return err
	}
	start := e.now()
	e.metrics.iterationsStarted.Inc()

	iterCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.mu.Lock()
	e.inflight[it.run.ID] = &inflight{cancel: cancel}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inflight, it.run.ID)
		e.mu.Unlock()
	}()

	// Renew the lease while the iteration works.
	renewDone := make(chan struct{})
	var renewWG sync.WaitGroup
	renewWG.Add(1)
	go func() {
		defer renewWG.Done()
		e.renewLease(iterCtx, it.run.ID, renewDone)
	}()

	timeout := time.Duration(it.cfg.Budgets.IterationTimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = e.opts.DefaultIterationTime
	}
	execCtx, cancelExec := context.WithTimeout(iterCtx, timeout)
	res, execErr := e.execute(execCtx, it)
	hostOf(it).closeTranscript(ctx)
	timedOut := errors.Is(execCtx.Err(), context.DeadlineExceeded) && iterCtx.Err() == nil
	cancelExec()
	close(renewDone)
	renewWG.Wait()

	cause := context.Cause(iterCtx)
	if errors.Is(cause, errShutdown) || (ctx.Err() != nil && !errors.Is(cause, errRunCanceled)) {
		// Shutting down: leave the run leased so the next start recovers it.
		return fmt.Errorf("iteration interrupted by shutdown: %w", ctx.Err())
	}
	canceled := errors.Is(cause, errRunCanceled)
	if res == nil {
		res = &spec.Result{}
	}
	switch {
	case canceled:
		res.Error = "canceled by the user"
	case timedOut:
		res.Error = fmt.Sprintf("iteration timed out after %s", timeout)
		res.ErrorFingerprint = "timeout"
	case execErr != nil:
		if res.Error == "" {
			res.Error = execErr.Error()
		}
		if res.ErrorFingerprint == "" {
			res.ErrorFingerprint = hashStrings("error", normalizeError(execErr.Error()))
		}
	}

	var checkResults []spec.CheckResult
	if !canceled && len(it.cfg.Completion.Checks) > 0 {
		// Checks outlive a shutdown (their outcome is recorded) but not a
		// cancel of the run: that kills a running command check at once.
		checkCtx, stopChecks := context.WithCancelCause(context.WithoutCancel(ctx))
		stopAfter := context.AfterFunc(iterCtx, func() {
			if errors.Is(context.Cause(iterCtx), errRunCanceled) {
				stopChecks(errRunCanceled)
			}
		})
		checkResults = checks.Run(checkCtx, it.cfg.Completion.Checks, e.checkEnv(it, res))
		hostOf(it).transcribeChecks(ctx, checkResults)
		stopAfter()
		stopChecks(nil)
		if errors.Is(context.Cause(iterCtx), errRunCanceled) {
			canceled = true
			res.Error = "canceled by the user"
		}
	}
	sig := computeSignals(res, checkResults)
	metricsBefore, err := e.iterationMetrics(ctx, it, res, start)
	if err != nil {
		return err
	}
	var decision spec.Decision
	if canceled {
		decision = spec.Decision{Decision: spec.DecisionStop, StopReason: StopCanceled, Reasons: []string{"canceled by the user"}}
	} else {
		total := it.run.Metrics
		total.Add(metricsBefore)
		decision = decide(gateInput{Config: it.cfg, Iteration: it.row.Iteration, Result: res, Checks: checkResults,
			Metrics: total, Signals: sig, History: it.history})
	}
	if decision.FalseCompletion {
		metricsBefore.FalseCompletionsBlocked = 1
	}

	var narrative, narrativeErr string
	switch {
	case ending(decision) && res.Fatal != nil:
		// The endpoint refused the run; asking it for a summary would fail too.
		narrativeErr = "No summary was written: " + res.Fatal.Detail
	case ending(decision) && !canceled:
		narrative, narrativeErr = e.narrate(ctx, it, decision, res, metricsBefore)
	}

	// Final writes survive cancellation of the job context.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer wcancel()
	status := db.IterSucceeded
	if res.Error != "" {
		status = db.IterFailed
	}
	if canceled {
		status = db.IterCanceled
	}
	// The executor's own memory of the iteration (progress.txt, a git
	// commit) is written before the outcome commits: committing enqueues the
	// next iteration, which must see it and must not race the commit.
	if !canceled {
		if obs, ok := e.executorFor(it.cfg).(GateObserver); ok {
			if err := obs.AfterGate(wctx, it.input, res, checkResults, decision); err != nil {
				e.log.Warn("after-gate hook failed", "run", it.run.ID, "iteration", it.row.Iteration, "err", err)
			}
		}
	}
	err = e.finishIteration(wctx, it, res, checkResults, sig, decision, metricsBefore, status, narrative, narrativeErr)
	if err != nil {
		return err
	}
	e.metrics.iterationDuration.Observe(e.now().Sub(start).Seconds())
	return nil
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
		return &spec.Result{Fatal: &spec.Fatal{Type: StopError,
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
	var it *iteration
	err := e.db.WriteTx(ctx, func(tx *db.Tx) error {
		run, err := tx.FindRun(ctx, args.RunID)
		if db.ErrorCode(err) == db.ENOTFOUND {
			return nil
		} else if err != nil {
			return err
		}
		if run.Status != db.StatusRunning || run.Iteration != args.Iteration || run.Attempt != args.Attempt {
			return nil // stale: a no-op
		}
		cfg, err := RunConfig(run)
		if err != nil {
			return err
		}
		if err := tx.SetLease(ctx, run, e.id, tx.Now().Add(e.opts.LeaseTTL)); err != nil {
			return err
		}
		row := &db.Iteration{RunID: run.ID, Iteration: args.Iteration, Attempt: args.Attempt, Status: db.IterRunning, StartedAt: tx.Now()}
		if args.Attempt > 1 {
			// An interrupted earlier attempt: its running time still counts,
			// in this row, which replaces it, and not twice in the run total
			// the gate checks budgets against.
			if prev, err := tx.FindIteration(ctx, run.ID, args.Iteration); err == nil {
				row.Metrics.RunningMS = prev.Metrics.RunningMS
				run.Metrics.RunningMS -= prev.Metrics.RunningMS
				run.Metrics.Iterations -= prev.Metrics.Iterations
			}
		}
		if err := tx.UpsertIteration(ctx, row); err != nil {
			return err
		}
		inbox, err := tx.PendingInbox(ctx, run.ID)
		if err != nil {
			return err
		}
		recent, err := tx.RecentIterations(ctx, run.ID, 10)
		if err != nil {
			return err
		}
		it = &iteration{run: run, cfg: cfg, row: row}
		in := &spec.Input{RunID: run.ID, UserID: run.UserID, Iteration: args.Iteration, Attempt: args.Attempt,
			Config: cfg, WorkspaceDocID: run.WorkspaceDocID}
		for _, m := range inbox {
			in.Inbox = append(in.Inbox, spec.InboxItem{Kind: m.Kind, Body: m.Body, CreatedAt: m.CreatedAt})
			it.maxInbox = m.ID
		}
		for _, r := range recent { // newest first
			if r.Iteration >= args.Iteration {
				continue
			}
			if in.Feedback == nil {
				in.Feedback = feedbackOf(r)
			}
			in.Summaries = append([]string{r.Summary}, in.Summaries...)
		}
		if len(in.Summaries) > 3 {
			in.Summaries = in.Summaries[len(in.Summaries)-3:]
		}
		it.input = in
		it.history = historySinceResume(recent, args.Iteration)
		if _, err := tx.AppendEvent(ctx, run.ID, "iteration_started", map[string]any{
			"iteration": args.Iteration, "attempt": args.Attempt, "inbox": len(inbox),
		}); err != nil {
			return err
		}
		return nil
	})
	if err != nil || it == nil {
		return nil, err
	}
	it.input.Host = &host{e: e, runID: it.run.ID, iteration: it.row.Iteration,
		tr: e.newTranscript(it.run.ID, it.row.Iteration, args.Attempt)}
	return it, nil
}

// feedbackOf returns what the gate said after iteration r.
func feedbackOf(r *db.Iteration) *spec.Feedback {
	var g GateRecord
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
func historySinceResume(recent []*db.Iteration, n int) []Signals {
	var out []Signals
	for _, r := range recent {
		if r.Iteration >= n {
			continue
		}
		var g GateRecord
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
// in llm_calls, tool calls and running time.
func (e *Engine) iterationMetrics(ctx context.Context, it *iteration, res *spec.Result, start time.Time) (db.Metrics, error) {
	m, err := e.db.SumLLMCalls(ctx, it.run.ID, it.row.Iteration)
	m.Iterations = 1
	m.ToolCallsTotal = res.ToolCalls
	m.RunningMS = it.row.Metrics.RunningMS + e.now().Sub(start).Milliseconds()
	if m.ByModel == nil {
		m.ByModel = map[string]db.ModelUsage{}
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
		d, err := e.db.FindRunDocumentByPath(ctx, userID, runID, path)
		if db.ErrorCode(err) == db.ENOTFOUND {
			return "", false, nil
		} else if err != nil {
			return "", false, err
		}
		return d.Content, true, nil
	}
	env.Tasks = func(ctx context.Context) (int, int, error) {
		tasks, err := e.db.ListTasks(ctx, userID, runID)
		if err != nil {
			return 0, 0, err
		}
		done := 0
		for _, t := range tasks {
			if t.Status == db.TaskDone {
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
// iteration row, its events, the run's metrics, and either the next job or
// the run's new status.
func (e *Engine) finishIteration(ctx context.Context, it *iteration, res *spec.Result, checkResults []spec.CheckResult,
	sig Signals, d spec.Decision, m db.Metrics, status, narrative, narrativeErr string) error {
	rec := GateRecord{Decision: d, Signals: sig}
	if res.Status != nil {
		rec.RemainingWork = res.Status.RemainingWork
	}
	gate, _ := json.Marshal(rec)
	checksJSON, _ := json.Marshal(checkResults)
	if checkResults == nil {
		checksJSON = []byte("[]")
	}
	artifacts, _ := json.Marshal(res.Artifacts)
	row := it.row
	row.Status, row.EndedAt, row.Summary = status, e.now(), res.Summary
	row.Gate, row.Checks, row.Fingerprint = gate, checksJSON, sig.Progress
	row.Error, row.ErrorFingerprint, row.Metrics, row.Artifacts = res.Error, res.ErrorFingerprint, m, artifacts

	return e.db.WriteTx(ctx, func(tx *db.Tx) error {
		run, err := tx.FindRun(ctx, it.run.ID)
		if err != nil {
			return err
		}
		row.EndedAt = tx.Now()
		// Usage is re-read here so calls made after the iteration's own
		// (the summarizer's) are in the iteration and so in the run total.
		usage, err := tx.SumLLMCalls(ctx, run.ID, row.Iteration)
		if err != nil {
			return err
		}
		row.Metrics.PromptTokens, row.Metrics.CompletionTokens, row.Metrics.TokensTotal = usage.PromptTokens, usage.CompletionTokens, usage.TokensTotal
		row.Metrics.CostTotalUSD, row.Metrics.UnpricedCalls, row.Metrics.LLMCalls, row.Metrics.ByModel = usage.CostTotalUSD, usage.UnpricedCalls, usage.LLMCalls, usage.ByModel
		if row.Metrics.ByModel == nil {
			row.Metrics.ByModel = map[string]db.ModelUsage{}
		}
		if err := tx.UpsertIteration(ctx, row); err != nil {
			return err
		}
		total, err := tx.SumIterationMetrics(ctx, run.ID)
		if err != nil {
			return err
		}
		run.Metrics = total
		if it.maxInbox > 0 {
			if err := tx.ConsumeInbox(ctx, run.ID, it.maxInbox, row.Iteration); err != nil {
				return err
			}
		}
		for _, c := range checkResults {
			if _, err := tx.AppendEvent(ctx, run.ID, "check_result", map[string]any{"iteration": row.Iteration, "check": c}); err != nil {
				return err
			}
		}
		current := run.Status == db.StatusRunning && run.Iteration == row.Iteration && run.Attempt == row.Attempt
		if current {
			if _, err := tx.AppendEvent(ctx, run.ID, "gate_decision", map[string]any{
				"iteration": row.Iteration, "decision": d.Decision, "reasons": d.Reasons, "stop_reason": d.StopReason,
				"wait_reason": d.WaitReason, "questions": d.Questions, "false_completion": d.FalseCompletion,
				"evidence": d.Evidence, "check_score": sig.Score,
			}); err != nil {
				return err
			}
		}
		if _, err := tx.AppendEvent(ctx, run.ID, "iteration_completed", map[string]any{
			"iteration": row.Iteration, "attempt": row.Attempt, "status": status, "summary": truncate(res.Summary, 2000),
			"error": truncate(res.Error, 2000), "metrics": m, "decision": d.Decision,
			"run_metrics": map[string]any{"iterations": total.Iterations, "tokens_total": total.TokensTotal, "cost_total_usd": total.CostTotalUSD},
		}); err != nil {
			return err
		}
		if !current {
			// Canceled (or otherwise moved on) while we worked: record only.
			if len(run.Report) > 0 {
				if err := e.refreshReportMetrics(run); err != nil {
					return err
				}
			}
			run.LeaseOwner = ""
			return tx.UpdateRun(ctx, run)
		}
		run.RunningSince = time.Time{}
		switch d.Decision {
		case spec.DecisionContinue:
			run.RunningSince = tx.Now()
			return e.enqueueNext(ctx, tx, run)
		case spec.DecisionWait:
			w := &db.Waiting{Reason: d.WaitReason, Questions: d.Questions}
			if err := e.setStatus(ctx, tx, run, db.StatusWaiting, nil, w); err != nil {
				return err
			}
		case spec.DecisionComplete:
			if err := e.writeReport(ctx, tx, run, db.StatusCompleted, &db.StopReason{Type: StopCompleted, Detail: joinReasons(d.Reasons)}, narrative, narrativeErr); err != nil {
				return err
			}
			if err := e.setStatus(ctx, tx, run, db.StatusCompleted, &db.StopReason{Type: StopCompleted, Detail: joinReasons(d.Reasons)}, nil); err != nil {
				return err
			}
		default: // stop, fail
			st := db.StatusStopped
			if d.Decision == spec.DecisionFail {
				st = db.StatusFailed
			}
			sr := &db.StopReason{Type: d.StopReason, Detail: joinReasons(d.Reasons), Evidence: d.Evidence}
			if err := e.writeReport(ctx, tx, run, st, sr, narrative, narrativeErr); err != nil {
				return err
			}
			if err := e.setStatus(ctx, tx, run, st, sr, nil); err != nil {
				return err
			}
		}
		return e.promote(ctx, tx, run.UserID)
	})
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

// renewLease extends the run's lease every third of its TTL until done is
// closed or ctx ends.
func (e *Engine) renewLease(ctx context.Context, runID string, done <-chan struct{}) {
	t := time.NewTicker(e.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			ok, err := e.db.RenewLease(ctx, runID, e.id, e.now().Add(e.opts.LeaseTTL))
			if err != nil && ctx.Err() == nil {
				e.log.Warn("renew lease", "run", runID, "err", err)
			} else if !ok {
				return
			}
		}
	}
}
