package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sashabaranov/go-openai"

	"homework/db"
	"homework/engine/spec"
)

// NotDoneSummary starts the summary of an iteration that ended without
// report_status.
const NotDoneSummary = "not done: the model ended without report_status"

const (
	maxObservation  = 6000   // a tool result as the model sees it
	maxEventData    = 2000   // a tool call's arguments or result in an event
	maxTranscript   = 100000 // the tool loop's messages before old results are elided
	maxBranchResult = 3000
)

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

	mu   sync.Mutex
	res  *spec.Result
	refs map[string]refPos
	// errKind and errTool are the kind ("invalid_arguments", "internal")
	// and tool of the failure in res.Error, "" when none.
	errKind, errTool string
}

// scope is one tool loop: the planner's or a delegated branch's.
type scope struct {
	it     *iteration
	role   string
	model  string
	prefix string // "branches/<id>/" in a branch
	branch string
	tools  []*tool
	limit  int
	u      *usage

	calls    int
	done     bool
	status   *spec.Status // planner: report_status or ask_user
	result   string       // branch: finish
	lastText string
	stuck    string
	bound    bool
	modelErr *ModelError
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
	cfg := in.Config
	if cfg == nil {
		cfg = &spec.Config{}
	}
	if cfg.Objective == "" {
		run, err := e.db.FindRunByID(ctx, in.RunID)
		if err != nil {
			return nil, fmt.Errorf("load run: %w", err)
		}
		c := *cfg
		c.Objective = run.Objective
		cfg = &c
	}
	it := &iteration{
		e: e, in: in, cfg: cfg, host: in.Host,
		readOnly:      cfg.Permissions.WriteMode == spec.WriteReadOnly,
		planPhase:     cfg.Permissions.WriteMode == spec.WriteApprovePlan && in.Iteration <= 1 && !hasAnswer(in.Inbox),
		plannerModel:  e.Model(cfg, RolePlanner),
		executorModel: e.Model(cfg, RoleExecutor),
		repairModel:   e.Model(cfg, RoleRepair),
		res:           &spec.Result{},
		refs:          map[string]refPos{},
	}
	res := it.res
	if it.plannerModel == "" {
		res.Summary = NotDoneSummary + " (no model is configured)"
		res.Error, res.ErrorFingerprint = "no model is configured for this run", "config:no_model"
		res.Fatal = &spec.Fatal{Type: "error", Detail: "No model is configured: set the run's model or HOMEWORK_LLM_MODEL."}
		return res, &spec.Error{Code: spec.EUNAVAILABLE, Field: "model", Message: res.Fatal.Detail}
	}
	if err := e.db.WriteTx(ctx, func(tx *db.Tx) error { return ensureWorkspace(ctx, tx, in.RunID, cfg.Objective) }); err != nil {
		return res, fmt.Errorf("prepare workspace: %w", err)
	}
	prompt, err := it.buildContext(ctx)
	if err != nil {
		return res, fmt.Errorf("assemble context: %w", err)
	}
	limit := cfg.Budgets.IterationToolCalls
	if limit <= 0 {
		limit = e.opts.DefaultToolCalls
	}
	sc := &scope{it: it, role: RolePlanner, model: it.plannerModel, tools: e.plannerTools(it.planPhase), limit: limit, u: &usage{}}
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: plannerPrompt},
		{Role: openai.ChatMessageRoleUser, Content: prompt},
	}
	it.loop(ctx, sc, msgs)

	var retErr error
	it.mu.Lock()
	res.Status, res.Output, res.Stuck = sc.status, truncate(sc.lastText, 20000), sc.stuck
	switch {
	case sc.status != nil:
		res.Summary = strings.TrimSpace(sc.status.ProgressSummary)
		if res.Summary == "" {
			res.Summary = "The model reported its status without a summary."
		}
		if res.Output == "" {
			// The final output of a model that only called tools is its report.
			res.Output = res.Summary
		}
	case sc.modelErr != nil && ctx.Err() != nil:
		res.Summary = NotDoneSummary + " (the iteration ran out of time)"
	case sc.modelErr != nil:
		res.Summary = NotDoneSummary + " (model error: " + sc.modelErr.Message + ")"
	case sc.stuck != "":
		res.Summary = NotDoneSummary + " (stuck: " + sc.stuck + ")"
	case sc.bound:
		res.Summary = fmt.Sprintf("%s (the iteration's bound of %d tool calls was reached)", NotDoneSummary, limit)
	default:
		res.Summary = NotDoneSummary
	}
	if me := sc.modelErr; me != nil {
		if ctx.Err() != nil {
			res.Error, res.ErrorFingerprint = "the iteration ran out of time", "iteration:timeout"
			retErr = fmt.Errorf("llm iteration: %w", ctx.Err())
		} else {
			res.Error, res.ErrorFingerprint, res.RetryAfter = me.Message, me.Fingerprint, me.RetryAfter
			retErr = me
			if me.Fatal {
				res.Fatal = &spec.Fatal{Type: "error", Detail: me.Message}
			}
		}
	}
	if it.planPhase && res.Fatal == nil {
		res.WaitForApproval = "The plan is in plan.md. Answer to approve it (or say what to change); the run proceeds after your answer."
		if !it.wrote(planPath) {
			res.WaitForApproval = "The model did not write plan.md this iteration; see its notes and summary. Answer to let the run proceed, or say what the plan should be."
		}
	}
	it.mu.Unlock()

	// The record of the iteration survives the iteration's own deadline.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := it.writeSummary(fctx, limit); err != nil {
		e.log.Warn("write iteration summary", "run", in.RunID, "iteration", in.Iteration, "err", err)
	}
	if p, err := e.progress(fctx, in); err == nil {
		res.Progress = p
	} else {
		e.log.Warn("progress fingerprint", "run", in.RunID, "err", err)
	}
	return res, retErr
}

func hasAnswer(items []spec.InboxItem) bool {
	for _, it := range items {
		if it.Kind == "answer" {
			return true
		}
	}
	return false
}

// ensureWorkspace creates the root and scratchpad.md when missing.
func ensureWorkspace(ctx context.Context, tx *db.Tx, runID, objective string) error {
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

// loop runs sc's tool loop until the model finishes, the tool-call bound,
// a stuck pattern, a model error or the end of ctx.
func (it *iteration) loop(ctx context.Context, sc *scope, msgs []openai.ChatCompletionMessage) {
	finisher := toolReportStatus
	if sc.branch != "" {
		finisher = toolFinish
	}
	var steps []step
	finalTry := false
	for turn := 0; !sc.done; turn++ {
		if err := ctx.Err(); err != nil {
			sc.modelErr = classify(err)
			return
		}
		tools := sc.tools
		if sc.calls >= sc.limit {
			if finalTry {
				sc.bound = true
				return
			}
			// One last turn that may only report.
			finalTry = true
			tools = it.e.pick([]string{finisher})
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(
				"You have used all %d tool calls of this iteration. Call %s now.", sc.limit, finisher)})
		}
		msgs = compact(msgs)
		req := openai.ChatCompletionRequest{Messages: msgs}
		for _, t := range tools {
			req.Tools = append(req.Tools, t.openai())
		}
		resp, err := it.e.chat(ctx, it.host.RecordLLMCall, sc.u, sc.role, sc.model, req)
		if err != nil {
			sc.modelErr = classify(err)
			return
		}
		choice := resp.Choices[0]
		msg := choice.Message
		if strings.TrimSpace(msg.Content) != "" {
			spec.Transcribe(ctx, it.host, spec.TranscriptEntry{Kind: spec.TranscriptAssistant, Role: sc.transcriptRole(), Text: msg.Content})
		}
		if strings.TrimSpace(msg.Content) != "" {
			sc.lastText = msg.Content
		}
		if len(msg.ToolCalls) == 0 {
			if finalTry {
				sc.bound = true
				return
			}
			steps = append(steps, step{noAction: true})
			if s := detectStuck(steps); s != "" {
				sc.stuck = s
				return
			}
			content := msg.Content
			if strings.TrimSpace(content) == "" {
				content = "(no reply)"
			}
			nudge := fmt.Sprintf("Act through tool calls. When this iteration's work is done, call %s.", finisher)
			if choice.FinishReason == openai.FinishReasonLength {
				nudge = "Your reply was cut off for length. Keep replies short and act through tool calls; write long text with workspace_write in parts. " + nudge
			}
			msgs = append(msgs,
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: truncate(content, 4000)},
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: nudge})
			continue
		}
		calls := msg.ToolCalls
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call_%d_%d", turn, i)
			}
			calls[i].Type = openai.ToolTypeFunction
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content, ToolCalls: calls})
		for i, tc := range calls {
			if sc.done || sc.stuck != "" {
				break
			}
			if sc.calls >= sc.limit && !finalTry {
				for _, rest := range calls[i:] {
					msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: rest.ID,
						Content: "not run: the iteration's tool-call bound was reached"})
				}
				break
			}
			obs, st := it.execCall(ctx, sc, tc, tools)
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: obs})
			steps = append(steps, st)
			if s := detectStuck(steps); s != "" && !sc.done {
				sc.stuck = s
			}
		}
		if sc.stuck != "" && !sc.done {
			return
		}
		if finalTry && !sc.done {
			sc.bound = true
			return
		}
	}
}

// compact elides the oldest tool results once the transcript passes
// maxTranscript characters, keeping the system prompt and the context.
func compact(msgs []openai.ChatCompletionMessage) []openai.ChatCompletionMessage {
	total := 0
	for _, m := range msgs {
		total += len(m.Content)
		for _, tc := range m.ToolCalls {
			total += len(tc.Function.Arguments)
		}
	}
	const elided = "[earlier tool result elided to keep the context bounded; call the tool again if you need it]"
	for i := 2; i < len(msgs) && total > maxTranscript; i++ {
		if msgs[i].Role == openai.ChatMessageRoleTool && len(msgs[i].Content) > len(elided) {
			total -= len(msgs[i].Content) - len(elided)
			msgs[i].Content = elided
		}
	}
	return msgs
}

// execCall validates (repairing when needed) and runs one tool call, emits
// tool_call and tool_result, and returns the observation for the model.
func (it *iteration) execCall(ctx context.Context, sc *scope, tc openai.ToolCall, allowed []*tool) (string, step) {
	name, raw := tc.Function.Name, tc.Function.Arguments
	sc.calls++
	it.mu.Lock()
	it.res.ToolCalls++
	it.mu.Unlock()
	it.emit(ctx, "tool_call", map[string]any{"tool": name, "call_id": tc.ID, "arguments": truncate(raw, maxEventData), "branch": sc.branch, "role": sc.role})
	spec.Transcribe(ctx, it.host, spec.TranscriptEntry{Kind: spec.TranscriptToolCall, Name: name, Role: sc.transcriptRole(), Text: raw})

	st := step{action: name + " " + raw}
	var t *tool
	for _, a := range allowed {
		if a.name == name {
			t = a
		}
	}
	var obs string
	errored, repaired := false, false
	if t == nil {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = a.name
		}
		obs, errored = fmt.Sprintf("error: unknown tool %q; the tools are: %s", name, strings.Join(names, ", ")), true
	} else {
		args, verr := t.validate(raw)
		if verr != nil {
			args, verr = it.repair(ctx, sc, t, raw, verr)
			repaired = verr == nil
			transcribeRepair(ctx, it.host, sc, name, args, verr)
		}
		if verr != nil {
			obs, errored = fmt.Sprintf("error: invalid arguments for %s: %s\nExpected JSON schema: %s", name, verr.Error(), t.schema), true
			it.fail(name, "invalid_arguments", verr.Error())
		} else {
			st.action = name + " " + string(args)
			out, err := it.runTool(ctx, sc, t, args)
			var te *toolError
			switch {
			case err == nil:
				obs = out
				it.recovered(name)
			case errors.As(err, &te):
				obs, errored = "error: "+te.msg, true
			case ctx.Err() != nil:
				obs, errored = "error: the iteration's time ran out", true
			default:
				obs, errored = "error: the tool failed internally; try something else", true
				it.e.log.Error("tool failed", "run", it.in.RunID, "tool", name, "err", err)
				it.fail(name, "internal", err.Error())
			}
		}
	}
	obs = truncate(obs, maxObservation)
	st.observation, st.errored = obs, errored
	it.emit(ctx, "tool_result", map[string]any{"tool": name, "call_id": tc.ID, "ok": !errored, "repaired": repaired,
		"result": truncate(obs, maxEventData), "branch": sc.branch, "role": sc.role})
	spec.Transcribe(ctx, it.host, spec.TranscriptEntry{Kind: spec.TranscriptToolResult, Name: name, Role: sc.transcriptRole(), Text: obs,
		Data: spec.TranscriptJSON(map[string]any{"ok": !errored, "repaired": repaired})})
	return obs, st
}

// runTool runs t, turning a panic into an internal error.
func (it *iteration) runTool(ctx context.Context, sc *scope, t *tool, args json.RawMessage) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in tool %s: %v\n%s", t.name, r, debug.Stack())
		}
	}()
	return t.run(ctx, sc, args)
}

func (it *iteration) emit(ctx context.Context, typ string, data map[string]any) {
	if data["branch"] == "" {
		delete(data, "branch")
	}
	if err := it.host.Emit(ctx, typ, data); err != nil && ctx.Err() == nil {
		it.e.log.Warn("emit", "run", it.in.RunID, "type", typ, "err", err)
	}
}

// fail records a failed tool call as the iteration's error.
func (it *iteration) fail(toolName, kind, msg string) {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.res.Error = truncate(fmt.Sprintf("tool %s: %s", toolName, oneLine(msg)), 1000)
	it.res.ErrorFingerprint = "tool:" + toolName + ":" + kind + ":" + normalizeError(msg)
	it.errKind, it.errTool = kind, toolName
}

// recovered clears an invalid-arguments failure of toolName once the model
// made that call with valid arguments: an error it corrected (a final
// report_status after a malformed one, say) is not the iteration's error.
func (it *iteration) recovered(toolName string) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.errKind == "invalid_arguments" && it.errTool == toolName {
		it.res.Error, it.res.ErrorFingerprint, it.errKind, it.errTool = "", "", "", ""
	}
}

const repairPrompt = `You repair the JSON arguments of a tool call that failed validation.
Reply with only the corrected JSON object: no prose, no code fences. Keep the caller's intent and values where they are valid.`

// repair asks the model (role "repair") to fix invalid arguments, at most
// twice. It returns the valid arguments or the last validation error.
func (it *iteration) repair(ctx context.Context, sc *scope, t *tool, raw string, verr error) (json.RawMessage, error) {
	for attempt := 0; attempt < 2; attempt++ {
		req := openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: repairPrompt},
			{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(
				"Tool: %s\n\nJSON schema of its arguments:\n%s\n\nThe arguments given:\n%s\n\nWhy they are invalid:\n%s",
				t.name, t.schema, truncate(raw, 8000), verr)},
		}}
		resp, err := it.e.chat(ctx, it.host.RecordLLMCall, sc.u, RoleRepair, it.repairModel, req)
		if err != nil {
			return nil, fmt.Errorf("%v (repair failed: %s)", verr, classify(err).Message)
		}
		cand := extractJSON(resp.Choices[0].Message.Content)
		args, err := t.validate(cand)
		if err == nil {
			return args, nil
		}
		raw, verr = cand, err
	}
	return nil, verr
}

func extractJSON(s string) string {
	s = strings.TrimSpace(s)
	if i, j := strings.Index(s, "{"), strings.LastIndex(s, "}"); i >= 0 && j > i {
		return s[i : j+1]
	}
	return s
}

// branchTask is one delegated sub-task.
type branchTask struct {
	ID           string `json:"id"`
	Title        string `json:"title"`
	Instructions string `json:"instructions"`
}

var branchIDRE = regexp.MustCompile(`[^a-z0-9-]+`)

// delegate runs tasks as parallel branches, at most MaxParallelBranches at
// once, and returns their results for the planner. It returns when every
// branch it started has returned.
func (it *iteration) delegate(ctx context.Context, tasks []branchTask) string {
	ids := make([]string, len(tasks))
	seen := map[string]bool{}
	for i, t := range tasks {
		id := strings.Trim(branchIDRE.ReplaceAllString(strings.ToLower(t.ID), "-"), "-")
		if id == "" || seen[id] {
			id = fmt.Sprintf("i%03d-%d", it.in.Iteration, i+1)
		}
		seen[id] = true
		ids[i] = truncate(id, 40)
	}
	results := make([]string, len(tasks))
	sem := make(chan struct{}, it.e.opts.MaxParallelBranches)
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = fmt.Sprintf("### Branch %s — %s\nstatus: not started (the iteration ended)", ids[i], tasks[i].Title)
				return
			}
			defer func() { <-sem }()
			results[i] = it.runBranch(ctx, ids[i], tasks[i])
		}()
	}
	wg.Wait()
	return strings.Join(results, "\n\n")
}

// runBranch runs one delegated sub-task with its own tool loop and returns
// its report for the planner.
func (it *iteration) runBranch(ctx context.Context, id string, bt branchTask) (report string) {
	folder := branchesFolder + "/" + id
	sc := &scope{it: it, role: RoleExecutor, model: it.executorModel, prefix: folder + "/", branch: id,
		tools: it.e.branchTools(), limit: it.e.opts.BranchToolCalls, u: &usage{}}
	defer func() {
		if r := recover(); r != nil {
			it.e.log.Error("branch panicked", "run", it.in.RunID, "branch", id, "panic", r, "stack", string(debug.Stack()))
			it.fail(toolDelegate, "internal", fmt.Sprintf("branch %s panicked", id))
			report = fmt.Sprintf("### Branch %s — %s\nstatus: failed (internal error)", id, bt.Title)
		}
	}()
	if _, err := it.putDoc(ctx, &spec.Document{Path: folder, Kind: spec.DocBranch, Title: bt.Title,
		Description: truncate(bt.Instructions, 500), Content: "# " + bt.Title + "\n\n" + bt.Instructions + "\n"}); err != nil {
		it.e.log.Warn("create branch folder", "run", it.in.RunID, "branch", id, "err", err)
		return fmt.Sprintf("### Branch %s — %s\nstatus: failed (could not create its folder: %s)", id, bt.Title, errMessage(err))
	}
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: fmt.Sprintf(branchPrompt, id, folder)},
		{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf("The run's objective (for context):\n%s\n\nYour sub-task: %s\n\n%s",
			truncate(it.cfg.Objective, 3000), bt.Title, bt.Instructions)},
	}
	it.loop(ctx, sc, msgs)

	status := "finished"
	switch {
	case sc.modelErr != nil:
		status = "failed: " + sc.modelErr.Message
		if ctx.Err() == nil {
			it.mu.Lock()
			it.res.Error, it.res.ErrorFingerprint = "branch "+id+": "+sc.modelErr.Message, "branch:"+sc.modelErr.Fingerprint
			it.mu.Unlock()
		}
	case sc.stuck != "":
		status = "stopped, stuck: " + sc.stuck
	case sc.bound:
		status = fmt.Sprintf("stopped at its bound of %d tool calls", sc.limit)
	case !sc.done:
		status = "ended without calling finish"
	}
	result := strings.TrimSpace(sc.result)
	if result == "" {
		result = strings.TrimSpace(sc.lastText)
	}
	if result != "" && ctx.Err() == nil {
		if _, err := it.putDoc(ctx, &spec.Document{Path: folder + "/result.md", Kind: spec.DocNote, Title: "Result: " + bt.Title,
			Content: "# Result: " + bt.Title + "\n\n" + result + "\n"}); err != nil {
			it.e.log.Warn("write branch result", "run", it.in.RunID, "branch", id, "err", err)
		}
	}
	if result == "" {
		result = "(no result)"
	}
	u := sc.u
	cost := fmt.Sprintf("$%.4f", u.costUSD)
	if u.unpriced > 0 {
		cost += fmt.Sprintf(" (%d unpriced calls)", u.unpriced)
	}
	return fmt.Sprintf("### Branch %s — %s\nstatus: %s\ntool calls: %d; model calls: %d; tokens: %d in, %d out; cost: %s\ndocuments: under %s/\nresult:\n%s",
		id, bt.Title, status, sc.calls, u.calls, u.promptTokens, u.completionTokens, cost, folder, truncate(result, maxBranchResult))
}

func errMessage(err error) string {
	var te *toolError
	if errors.As(err, &te) {
		return te.msg
	}
	return "internal error"
}

// writeSummary writes iterations/NNN-summary.md.
func (it *iteration) writeSummary(ctx context.Context, limit int) error {
	it.mu.Lock()
	res := *it.res
	created := append([]spec.Ref(nil), res.Artifacts.Created...)
	updated := append([]spec.Ref(nil), res.Artifacts.Updated...)
	it.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# Iteration %d\n\n%s\n\n", it.in.Iteration, res.Summary)
	if st := res.Status; st != nil {
		fmt.Fprintf(&b, "- exit signal: %v; needs input: %v; confidence: %s\n", st.ExitSignal, st.NeedsUserInput, orDash(st.Confidence))
		for _, q := range st.BlockingQuestions {
			fmt.Fprintf(&b, "- question: %s\n", q)
		}
		for _, w := range st.RemainingWork {
			fmt.Fprintf(&b, "- remaining: %s\n", w)
		}
		for _, ev := range st.CompletionEvidence {
			fmt.Fprintf(&b, "- evidence: %s\n", ev)
		}
		if st.NextActionHint != "" {
			fmt.Fprintf(&b, "- next: %s\n", st.NextActionHint)
		}
	}
	fmt.Fprintf(&b, "- tool calls: %d (bound %d)\n", res.ToolCalls, limit)
	for _, r := range created {
		fmt.Fprintf(&b, "- created %s: %s\n", r.Type, refName(r))
	}
	for _, r := range updated {
		fmt.Fprintf(&b, "- updated %s: %s\n", r.Type, refName(r))
	}
	if res.Stuck != "" {
		fmt.Fprintf(&b, "- stuck: %s\n", res.Stuck)
	}
	if res.Error != "" {
		fmt.Fprintf(&b, "- error: %s\n", res.Error)
	}
	if res.WaitForApproval != "" {
		fmt.Fprintf(&b, "- waiting for approval: %s\n", res.WaitForApproval)
	}
	p := fmt.Sprintf("%s/%03d-summary.md", iterationsFolder, it.in.Iteration)
	_, err := it.putDoc(ctx, &spec.Document{Path: p, Kind: spec.DocSummary, Title: fmt.Sprintf("Iteration %d summary", it.in.Iteration),
		Description: truncate(oneLine(res.Summary), 300), Content: truncate(b.String(), 20000)})
	return err
}

func refName(r spec.Ref) string {
	if r.Path != "" {
		return r.Path
	}
	return r.Title
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// progress fingerprints the workspace and checklist, leaving out the
// scratchpad and iteration summaries, which change every iteration.
func (e *Executor) progress(ctx context.Context, in *spec.Input) (string, error) {
	docs, err := e.db.ListRunDocuments(ctx, in.UserID, in.RunID)
	if err != nil {
		return "", err
	}
	tasks, err := e.db.ListTasks(ctx, in.UserID, in.RunID)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, d := range docs {
		if d.Path == scratchpadPath || strings.HasPrefix(d.Path, scratchpadFolder+"/") || strings.HasPrefix(d.Path, iterationsFolder+"/") {
			continue
		}
		c := sha256.Sum256([]byte(d.Content))
		fmt.Fprintf(h, "doc\x00%s\x00%s\x00%x\n", d.Path, d.Kind, c[:8])
	}
	for _, t := range tasks {
		fmt.Fprintf(h, "task\x00%s\x00%s\x00%v\x00%s\n", t.ID, t.Status, t.Passes, t.Title)
	}
	return "llm:" + hex.EncodeToString(h.Sum(nil))[:32], nil
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

const branchPrompt = `You are an executor agent working on one sub-task (branch %s) of a larger objective, in parallel with others.
Use the tools to research and write. Your documents go under %s/ (paths you give are relative to it).
Keep to your sub-task. When done, call finish with a concise result: what you found and which documents you wrote.`

// buildContext assembles the iteration's bounded context.
func (it *iteration) buildContext(ctx context.Context) (string, error) {
	e, in, cfg := it.e, it.in, it.cfg
	docs, err := e.db.ListRunDocuments(ctx, in.UserID, in.RunID)
	if err != nil {
		return "", err
	}
	tasks, err := e.db.ListTasks(ctx, in.UserID, in.RunID)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	section := func(title, body string, size int) {
		body = strings.TrimSpace(body)
		if body == "" {
			return
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", title, truncate(body, size))
	}
	section("Objective", cfg.Objective, 4000)

	var mode strings.Builder
	fmt.Fprintf(&mode, "This is iteration %d. Mode: %s. Write mode: %s.\n", in.Iteration, orDefault(cfg.Mode, spec.ModeAuto), orDefault(cfg.Permissions.WriteMode, spec.WriteAutopilot))
	limit := cfg.Budgets.IterationToolCalls
	if limit <= 0 {
		limit = e.opts.DefaultToolCalls
	}
	fmt.Fprintf(&mode, "You have at most %d tool calls in this iteration.\n", limit)
	switch {
	case it.planPhase:
		mode.WriteString("The person must approve a plan before the work starts. In this iteration: research as needed, write the plan to plan.md (steps, deliverables, how completion will be verified, proposed tasks), then call report_status with exit_signal false. The checklist and other documents cannot be changed until the plan is approved.\n")
	case it.readOnly:
		mode.WriteString("This run is read_only (planning): you may read, search, append to the scratchpad and write notes under notes/ only. The checklist and other documents cannot be changed.\n")
	case cfg.Permissions.WriteMode == spec.WriteApprovePlan:
		mode.WriteString("The plan in plan.md was reviewed by the person (see their answer below); follow it.\n")
	}
	if cfg.Mode == spec.ModeInteractive {
		mode.WriteString("The person reviews the run after each iteration.\n")
	}
	if len(cfg.Completion.Checks) > 0 {
		mode.WriteString("Completion is verified by these checks:\n")
		for _, c := range cfg.Completion.Checks {
			fmt.Fprintf(&mode, "- %s (%s)%s\n", c.DisplayName(), c.Type, checkDetail(c))
		}
	}
	section("Mode and permissions", mode.String(), 3000)

	if f := in.Feedback; f != nil {
		var fb strings.Builder
		fmt.Fprintf(&fb, "After the previous iteration the platform decided: %s.\n", f.Decision)
		for _, r := range f.Reasons {
			fmt.Fprintf(&fb, "- %s\n", truncate(r, 500))
		}
		for i, c := range f.FailingChecks {
			if i == 6 {
				fmt.Fprintf(&fb, "… %d more failing checks\n", len(f.FailingChecks)-i)
				break
			}
			fmt.Fprintf(&fb, "\nFailing check %q (%s): %s\n", c.Name, c.Type, truncate(c.Message, 500))
			if c.OutputTail != "" {
				fmt.Fprintf(&fb, "Output tail:\n```\n%s\n```\n", tail(c.OutputTail, 800))
			}
		}
		if len(f.RemainingWork) > 0 {
			fb.WriteString("\nRemaining work:\n")
			for _, w := range f.RemainingWork {
				fmt.Fprintf(&fb, "- %s\n", truncate(w, 300))
			}
		}
		if len(f.Questions) > 0 {
			fb.WriteString("\nYou asked the person:\n")
			for _, q := range f.Questions {
				fmt.Fprintf(&fb, "- %s\n", truncate(q, 300))
			}
		}
		section("Gate feedback (why you are continuing)", fb.String(), 6000)
	}

	if len(in.Inbox) > 0 {
		var ib strings.Builder
		for _, m := range in.Inbox {
			label := "Message"
			if m.Kind == "answer" {
				label = "Answer"
			}
			fmt.Fprintf(&ib, "%s from the person:\n%s\n\n", label, truncate(m.Body, 2000))
		}
		section("New from the person", ib.String(), 6000)
	}

	if len(tasks) > 0 {
		section("Checklist", formatTasks(tasks, 60, 4000), 4500)
	} else {
		section("Checklist", "(empty — add tasks with tasks_add)", 200)
	}
	if len(in.Summaries) > 0 {
		var sb strings.Builder
		for i, s := range in.Summaries {
			fmt.Fprintf(&sb, "- %d iteration(s) ago: %s\n", len(in.Summaries)-i, truncate(oneLine(s), 800))
		}
		section("Recent iteration summaries (newest last)", sb.String(), 3000)
	}
	var plan, pad string
	var list strings.Builder
	n := 0
	for _, d := range docs {
		switch d.Path {
		case scratchpadPath:
			pad = d.Content
		case planPath:
			plan = d.Content
		}
		if d.Path == "" || d.Kind == spec.DocFolder || strings.HasPrefix(d.Path, iterationsFolder+"/") || strings.HasPrefix(d.Path, scratchpadFolder+"/") {
			continue
		}
		if n++; n <= 60 {
			fmt.Fprintf(&list, "- %s (%s, %d chars) %s\n", d.Path, d.Kind, len(d.Content), truncate(d.Title, 100))
		}
	}
	if n > 60 {
		fmt.Fprintf(&list, "… %d more; use workspace_list\n", n-60)
	}
	if plan != "" && !it.planPhase {
		section("Plan (plan.md)", plan, 3000)
	}
	section("Scratchpad (most recent notes)", tail(pad, 4000), 4100)
	section("Workspace documents", list.String(), 3000)

	out := b.String()
	if bound := e.opts.MaxContextChars; len(out) > bound {
		out = truncate(out, bound-60) + "\n\n[context cut to its size bound]"
	}
	return out, nil
}

func checkDetail(c spec.CheckSpec) string {
	switch {
	case c.Path != "":
		return ": " + c.Path
	case c.Target != "":
		return fmt.Sprintf(": /%s/ in %s", c.Pattern, c.Target)
	case len(c.Argv) > 0:
		return ": " + truncate(strings.Join(c.Argv, " "), 200)
	}
	return ""
}

// tail returns the last n bytes of s on a rune boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return "…" + s[start:]
}
