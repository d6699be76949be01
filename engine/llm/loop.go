package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/sashabaranov/go-openai"

	"homework/engine/spec"
)

const (
	maxObservation = 6000   // a tool result as the model sees it
	maxEventData   = 2000   // a tool call's arguments or result in an event
	maxTranscript  = 100000 // the tool loop's messages before old results are elided
)

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

// loopState is the state of one tool loop across its turns.
type loopState struct {
	msgs     []openai.ChatCompletionMessage
	steps    []step
	finisher string  // the tool that ends the loop: report_status or finish
	tools    []*tool // the tools offered in this turn
	finalTry bool    // the bound is reached: this turn may only call finisher
}

// loop runs sc's tool loop until the model finishes, the tool-call bound,
// a stuck pattern, a model error or the end of ctx.
func (it *iteration) loop(ctx context.Context, sc *scope, msgs []openai.ChatCompletionMessage) {
	ls := &loopState{msgs: msgs, finisher: toolReportStatus}
	if sc.branch != "" {
		ls.finisher = toolFinish
	}
	for turn := 0; !sc.done; turn++ {
		if err := ctx.Err(); err != nil {
			sc.modelErr = classify(err)
			return
		}
		ls.tools = sc.tools
		if sc.calls >= sc.limit {
			if ls.finalTry {
				sc.bound = true
				return
			}
			ls.lastTurn(it.e, sc.limit)
		}
		ls.msgs = compact(ls.msgs)
		choice, emitted, err := it.ask(ctx, sc, ls, turn)
		if err != nil {
			sc.modelErr = classify(err)
			return
		}
		var goOn bool
		if len(choice.Message.ToolCalls) == 0 {
			goOn = ls.nudge(sc, choice)
		} else {
			goOn = it.runCalls(ctx, sc, ls, turn, choice.Message, emitted)
		}
		if !goOn {
			return
		}
	}
}

// lastTurn offers one last turn that may only call the finisher.
func (ls *loopState) lastTurn(e *Executor, limit int) {
	ls.finalTry = true
	ls.tools = e.pick([]string{ls.finisher})
	ls.msgs = append(ls.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(
		"You have used all %d tool calls of this iteration. Call %s now.", limit, ls.finisher)})
}

// ask sends ls's transcript with its tools to sc's model and returns its
// reply, keeping any text the reply has as the scope's last text. When the
// host can (spec.CallEventWriter), the tool_call event of the reply's first
// call, which runCalls runs at once, is appended in the transaction that
// records the model call instead of in a commit of its own, and emitted
// is true.
func (it *iteration) ask(ctx context.Context, sc *scope, ls *loopState, turn int) (choice openai.ChatCompletionChoice, emitted bool, err error) {
	req := openai.ChatCompletionRequest{Messages: ls.msgs}
	for _, t := range ls.tools {
		req.Tools = append(req.Tools, t.openai())
	}
	cw, withEvent := it.host.(spec.CallEventWriter)
	withEvent = withEvent && !(sc.calls >= sc.limit && !ls.finalTry) // runCalls runs the first call
	rec := func(ctx context.Context, c spec.LLMCall, reply *openai.ChatCompletionResponse) error {
		if !withEvent || reply == nil || len(reply.Choices[0].Message.ToolCalls) == 0 {
			return it.host.RecordLLMCall(ctx, c)
		}
		calls := reply.Choices[0].Message.ToolCalls
		nameCalls(calls, turn)
		if err := cw.RecordLLMCallWith(ctx, c, spec.EventToolCall, toolCallEvent(sc, calls[0])); err != nil {
			return err
		}
		emitted = true
		return nil
	}
	resp, err := it.e.chat(ctx, rec, sc.u, sc.role, sc.model, req)
	if err != nil {
		return openai.ChatCompletionChoice{}, false, err
	}
	choice = resp.Choices[0]
	if content := choice.Message.Content; strings.TrimSpace(content) != "" {
		spec.Transcribe(ctx, it.host, spec.TranscriptEntry{Kind: spec.TranscriptAssistant, Role: sc.transcriptRole(), Text: content})
		sc.lastText = content
	}
	return choice, emitted, nil
}

// nameCalls gives the calls of a reply in turn the ids the model left out
// and their type.
func nameCalls(calls []openai.ToolCall, turn int) {
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("call_%d_%d", turn, i)
		}
		calls[i].Type = openai.ToolTypeFunction
	}
}

// toolCallEvent is the data of tc's tool_call event in sc.
func toolCallEvent(sc *scope, tc openai.ToolCall) spec.ToolCallData {
	return spec.ToolCallData{Tool: tc.Function.Name, CallID: tc.ID, Arguments: truncate(tc.Function.Arguments, maxEventData),
		Branch: sc.branch, Role: sc.role}
}

// nudge answers a reply without tool calls by asking the model to act. It
// reports whether the loop goes on: not after the last turn, nor once the
// model is stuck.
func (ls *loopState) nudge(sc *scope, choice openai.ChatCompletionChoice) bool {
	if ls.finalTry {
		sc.bound = true
		return false
	}
	ls.steps = append(ls.steps, step{noAction: true})
	if s := detectStuck(ls.steps); s != "" {
		sc.stuck = s
		return false
	}
	content := choice.Message.Content
	if strings.TrimSpace(content) == "" {
		content = "(no reply)"
	}
	nudge := fmt.Sprintf("Act through tool calls. When this iteration's work is done, call %s.", ls.finisher)
	if choice.FinishReason == openai.FinishReasonLength {
		nudge = "Your reply was cut off for length. Keep replies short and act through tool calls; write long text with workspace_write in parts. " + nudge
	}
	ls.msgs = append(ls.msgs,
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: truncate(content, 4000)},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: nudge})
	return true
}

// runCalls runs the tool calls of the model's reply msg in order, until
// the model finishes, is stuck or reaches the bound (calls past the bound
// are answered as not run). emitted says the first call's tool_call event
// is written (ask). It reports whether the loop goes on.
func (it *iteration) runCalls(ctx context.Context, sc *scope, ls *loopState, turn int, msg openai.ChatCompletionMessage, emitted bool) bool {
	calls := msg.ToolCalls
	nameCalls(calls, turn)
	ls.msgs = append(ls.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content, ToolCalls: calls})
	for i, tc := range calls {
		if sc.done || sc.stuck != "" {
			break
		}
		if sc.calls >= sc.limit && !ls.finalTry {
			for _, rest := range calls[i:] {
				ls.msgs = append(ls.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: rest.ID,
					Content: "not run: the iteration's tool-call bound was reached"})
			}
			break
		}
		obs, st := it.execCall(ctx, sc, tc, ls.tools, emitted && i == 0)
		ls.msgs = append(ls.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: obs})
		ls.steps = append(ls.steps, st)
		if s := detectStuck(ls.steps); s != "" && !sc.done {
			sc.stuck = s
		}
	}
	if sc.stuck != "" && !sc.done {
		return false
	}
	if ls.finalTry && !sc.done {
		sc.bound = true
		return false
	}
	return true
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
// tool_call (unless emitted: ask wrote it) and tool_result (or queues it
// with the iteration's outcome, when the call ends the iteration), and
// returns the observation for the model.
func (it *iteration) execCall(ctx context.Context, sc *scope, tc openai.ToolCall, allowed []*tool, emitted bool) (string, step) {
	name, raw := tc.Function.Name, tc.Function.Arguments
	sc.calls++
	it.mu.Lock()
	it.res.ToolCalls++
	it.mu.Unlock()
	if !emitted {
		it.emit(ctx, spec.EventToolCall, toolCallEvent(sc, tc))
	}
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
	result := spec.ToolResultData{Tool: name, CallID: tc.ID, OK: !errored, Repaired: repaired,
		Result: truncate(obs, maxEventData), Branch: sc.branch, Role: sc.role}
	if ow, ok := it.host.(spec.OutcomeWriter); ok && sc.branch == "" && sc.done {
		// The planner's last call (report_status or ask_user) ends the
		// iteration: nothing reads its result before the outcome, with
		// which it commits instead of in a commit of its own. Like the
		// outcome's other writes, it is not made when the attempt ends
		// without its outcome because the run was canceled, taken over or
		// its process died (spec.OutcomeWriter); the transcript keeps the
		// result line.
		ow.WithOutcome(func(ctx context.Context, tx spec.Tx) error {
			_, err := tx.AppendEvent(ctx, it.in.RunID, spec.EventToolResult, result)
			return err
		})
	} else {
		it.emit(ctx, spec.EventToolResult, result)
	}
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

func (it *iteration) emit(ctx context.Context, typ spec.EventType, data any) {
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
		resp, err := it.e.chat(ctx, recordWith(it.host.RecordLLMCall), sc.u, RoleRepair, it.repairModel, req)
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
