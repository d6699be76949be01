package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sashabaranov/go-openai"

	"homework/engine/spec"
	"homework/engine/text"
)

// NotDoneSummary starts the summary of an iteration that ended without
// report_status.
const NotDoneSummary = "not done: the model ended without report_status"

// iteration is the state of one Iterate call. The mutex guards res and refs,
// which parallel branches update.
type iteration struct {
	e         *Executor
	in        *spec.Input
	cfg       *spec.Config
	host      spec.Host
	readOnly  bool
	planPhase bool

	plannerModel, executorModel, repairModel string

	// mcp holds the sessions with the run's MCP servers, open for the
	// iteration.
	mcp *mcpSet

	// start is the run's documents and checklist as the iteration found
	// them; changed is set before the iteration first writes either, until
	// when start is also their state at its end.
	start   runState
	changed atomic.Bool

	mu   sync.Mutex
	res  *spec.Result
	refs map[string]refPos
	// errKind and errTool are the kind ("invalid_arguments", "internal")
	// and tool of the failure in res.Error, "" when none.
	errKind, errTool string
}

// Iterate runs one bounded iteration of the run described by in. See the
// package documentation for what the model may do. A model failure returns
// the partial Result together with a *ModelError (Result.Fatal is set when
// the endpoint refused the credentials); the end of ctx returns the partial
// Result with ctx's error. Tool failures do not fail the iteration: they
// are reported in Result.Error and Result.ErrorFingerprint.
func (e *Executor) Iterate(ctx context.Context, in *spec.Input) (*spec.Result, error) {
	if in.Host == nil {
		return nil, errors.New("llm: Input.Host is required")
	}
	cfg, err := e.config(ctx, in)
	if err != nil {
		return nil, err
	}
	it := e.newIteration(in, cfg)
	res := it.res
	if it.plannerModel == "" {
		res.Summary = NotDoneSummary + " (no model is configured)"
		res.Error, res.ErrorFingerprint = "no model is configured for this run", "config:no_model"
		res.Fatal = &spec.Fatal{Type: "error", Detail: "No model is configured: set the run's model or HOMEWORK_LLM_MODEL."}
		return res, &spec.Error{Code: spec.EUNAVAILABLE, Field: "model", Message: res.Fatal.Detail}
	}
	if it.start, err = e.workspace(ctx, in, cfg); err != nil {
		return res, fmt.Errorf("prepare workspace: %w", err)
	}
	prompt := it.buildContext(it.start)
	if it.mcp, err = it.openMCP(ctx); err != nil {
		res.Summary = NotDoneSummary + " (" + err.Error() + ")"
		res.Error, res.ErrorFingerprint = truncate(err.Error(), 1000), "mcp:unavailable:"+normalizeError(err.Error())
		return res, err
	}
	defer it.mcp.close()
	limit := it.toolCallLimit()
	sc := &scope{it: it, role: RolePlanner, model: it.plannerModel, tools: it.mcp.withMCP(e.plannerTools(it.planPhase)), limit: limit, u: &usage{}}
	it.loop(ctx, sc, []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: plannerPrompt},
		{Role: openai.ChatMessageRoleUser, Content: prompt},
	})
	retErr := it.conclude(ctx, sc)
	it.record(ctx, limit)
	return res, retErr
}

// config returns the run's configuration, with the objective loaded from
// the store when in.Config leaves it out.
func (e *Executor) config(ctx context.Context, in *spec.Input) (*spec.Config, error) {
	cfg := in.Config
	if cfg == nil {
		cfg = &spec.Config{}
	}
	if cfg.Objective == "" {
		run, err := e.store.FindRunByID(ctx, in.RunID)
		if err != nil {
			return nil, fmt.Errorf("load run: %w", err)
		}
		c := *cfg
		c.Objective = run.Objective
		cfg = &c
	}
	return cfg, nil
}

// newIteration returns the state of one Iterate call of in.
func (e *Executor) newIteration(in *spec.Input, cfg *spec.Config) *iteration {
	return &iteration{
		e: e, in: in, cfg: cfg, host: in.Host,
		readOnly:      cfg.Permissions.WriteMode == spec.WriteReadOnly,
		planPhase:     cfg.Permissions.WriteMode == spec.WriteApprovePlan && in.Iteration <= 1 && !hasAnswer(in.Inbox),
		plannerModel:  e.Model(cfg, RolePlanner),
		executorModel: e.Model(cfg, RoleExecutor),
		repairModel:   e.Model(cfg, RoleRepair),
		res:           &spec.Result{},
		refs:          map[string]refPos{},
	}
}

// toolCallLimit is the planner's bound on tool calls in this iteration.
func (it *iteration) toolCallLimit() int {
	if limit := it.cfg.Budgets.IterationToolCalls; limit > 0 {
		return limit
	}
	return it.e.opts.DefaultToolCalls
}

// conclude fills in the Result from the planner's scope sc once its loop
// has ended, and returns the error Iterate returns: sc's model error, or
// ctx's error when the iteration ran out of time.
func (it *iteration) conclude(ctx context.Context, sc *scope) error {
	it.mu.Lock()
	defer it.mu.Unlock()
	res := it.res
	res.Status, res.Output, res.Stuck = sc.status, truncate(sc.lastText, 20000), sc.stuck
	res.Summary = outcomeSummary(ctx, sc)
	if sc.status != nil && res.Output == "" {
		// The final output of a model that only called tools is its report.
		res.Output = res.Summary
	}
	err := recordModelError(ctx, res, sc.modelErr)
	if it.planPhase && res.Fatal == nil {
		res.WaitForApproval = "The plan is in plan.md. Answer to approve it (or say what to change); the run proceeds after your answer."
		if !it.wrote(planPath) {
			res.WaitForApproval = "The model did not write plan.md this iteration; see its notes and summary. Answer to let the run proceed, or say what the plan should be."
		}
	}
	return err
}

// outcomeSummary is the iteration's summary: the model's own when it
// reported its status, otherwise why it did not.
func outcomeSummary(ctx context.Context, sc *scope) string {
	switch {
	case sc.status != nil:
		if s := strings.TrimSpace(sc.status.ProgressSummary); s != "" {
			return s
		}
		return "The model reported its status without a summary."
	case sc.modelErr != nil && ctx.Err() != nil:
		return NotDoneSummary + " (" + endedBy(ctx) + ")"
	case sc.modelErr != nil:
		return NotDoneSummary + " (model error: " + sc.modelErr.Message + ")"
	case sc.stuck != "":
		return NotDoneSummary + " (stuck: " + sc.stuck + ")"
	case sc.bound:
		return fmt.Sprintf("%s (the iteration's bound of %d tool calls was reached)", NotDoneSummary, sc.limit)
	}
	return NotDoneSummary
}

// recordModelError records me, the model error that ended the iteration,
// in res and returns the error Iterate returns; nil when me is nil.
func recordModelError(ctx context.Context, res *spec.Result, me *ModelError) error {
	if me == nil {
		return nil
	}
	if ctx.Err() != nil {
		res.Error, res.ErrorFingerprint = endedBy(ctx), "iteration:timeout"
		return fmt.Errorf("llm iteration: %w", ctx.Err())
	}
	res.Error, res.ErrorFingerprint, res.RetryAfter = me.Message, me.Fingerprint, me.RetryAfter
	if me.Fatal {
		res.Fatal = &spec.Fatal{Type: "error", Detail: me.Message}
	}
	return me
}

// endedBy says what ended the iteration whose context ctx is done: its
// time, or the cause the engine gave when it cut the iteration short (a
// cost or token budget used up during it is not "out of time").
func endedBy(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		return "the iteration ran out of time"
	}
	return "the iteration was ended early: " + text.OneLine(cause.Error(), 300)
}

func hasAnswer(items []spec.InboxItem) bool {
	for _, it := range items {
		if it.Kind == "answer" {
			return true
		}
	}
	return false
}

// workspace returns the run's documents and checklist, creating its root
// and scratchpad.md first when missing. Once they exist (every iteration
// after the first) it only reads: no write transaction.
func (e *Executor) workspace(ctx context.Context, in *spec.Input, cfg *spec.Config) (runState, error) {
	st, err := e.readState(ctx, in)
	if err != nil {
		return runState{}, err
	}
	root, scratchpad := false, false
	for _, d := range st.docs {
		root = root || d.Path == ""
		scratchpad = scratchpad || d.Path == scratchpadPath
	}
	if root && scratchpad {
		return st, nil
	}
	if err := e.store.WriteTx(ctx, func(tx spec.Tx) error { return ensureWorkspace(ctx, tx, in.RunID, cfg.Objective) }); err != nil {
		return runState{}, err
	}
	return e.readState(ctx, in)
}

// runState is the run's documents and checklist, read in one snapshot.
// docs leaves out the documents inside the iterations and scratchpad
// folders: one summary an iteration and the archives, which neither the
// context nor the progress fingerprint shows.
type runState struct {
	docs  []*spec.Document
	tasks []*spec.Task
}

// readState reads the run's documents and checklist in one read
// transaction. Each statement outside one begins a read of its own, which
// on SQLite starts from an empty page cache whenever the writer committed
// meanwhile (under load, nearly always).
func (e *Executor) readState(ctx context.Context, in *spec.Input) (runState, error) {
	var st runState
	err := e.store.ReadTx(ctx, func(r spec.ReadStore) error {
		var err error
		if st.docs, err = r.ListRunDocumentsOutside(ctx, in.UserID, in.RunID, iterationsFolder, scratchpadFolder); err != nil {
			return err
		}
		st.tasks, err = r.ListTasks(ctx, in.UserID, in.RunID)
		return err
	})
	return st, err
}

// writeTx runs fn, a write of the run's documents or checklist, in a
// transaction of its own. It marks the iteration changed first, so that
// the progress fingerprint reads them again rather than trusting start.
func (it *iteration) writeTx(ctx context.Context, fn func(tx spec.Tx) error) error {
	it.changed.Store(true)
	return it.e.store.WriteTx(ctx, fn)
}

// ensureWorkspace creates the root and scratchpad.md when missing.
func ensureWorkspace(ctx context.Context, tx spec.Tx, runID, objective string) error {
	run, err := tx.FindRun(ctx, runID)
	if err != nil {
		return err
	}
	if objective == "" {
		objective = run.Objective
	}
	return startRun(ctx, tx, run, objective)
}

func (it *iteration) wrote(p string) bool {
	for _, r := range it.res.Artifacts.Created {
		if r.Path == p {
			return true
		}
	}
	for _, r := range it.res.Artifacts.Updated {
		if r.Path == p {
			return true
		}
	}
	return false
}

// allowWrite enforces the write mode for a document path (see the package
// documentation).
func (it *iteration) allowWrite(p string) error {
	notes := strings.HasPrefix(p, notesFolder+"/") || strings.HasPrefix(p, branchesFolder+"/")
	switch {
	case it.readOnly && !notes:
		return toolErrorf("this run is read_only: only notes (paths under notes/ or your branch folder) and the scratchpad may be written, not %s", p)
	case it.planPhase && !notes && p != planPath:
		return toolErrorf("the plan is not approved yet: write plan.md (and notes under notes/) only, then call report_status")
	}
	return nil
}

func (it *iteration) allowTasks() error {
	switch {
	case it.readOnly:
		return toolErrorf("this run is read_only: the checklist cannot be changed; record proposed tasks in notes or the scratchpad")
	case it.planPhase:
		return toolErrorf("the plan is not approved yet: put the proposed tasks in plan.md; the checklist can be changed after approval")
	}
	return nil
}

const plannerPrompt = `You are the planner of Homework, a background agent that works on one objective over many iterations. This conversation is one iteration. The platform, not you, decides whether the run continues: it verifies your report against objective checks.

How to work:
- Act only through the tools. Start from the workspace, the checklist and the scratchpad: they are your memory of earlier iterations.
- Keep the checklist current with tasks_add and tasks_update; mark a task done only when it is done, and set passes when it is verified.
- Write findings, drafts and deliverables as workspace documents with workspace_write. Record what you tried, learned and plan next with append_scratchpad.
- Use delegate for independent sub-tasks that can run in parallel.
- Use ask_user only for information you cannot find or decide yourself.
- Make real progress each iteration and never repeat the same call.
- End the iteration by calling report_status exactly once. Set exit_signal true only when the whole objective is met, with concrete completion_evidence (documents written, tasks done); otherwise list remaining_work.`
