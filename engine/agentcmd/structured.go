package agentcmd

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/renameio/v2"

	"homework/engine/spec"
)

// Event types for structured agent output.
const (
	// EventOutputWarning says the agent's output did not fully match its
	// format: {"iteration", "format", "warnings", "degraded"}; degraded
	// is true when the output was read as plain text instead.
	EventOutputWarning = "agent_output_warning"
	// RoleAgent is the role of the usage a command agent reports.
	RoleAgent = "agent"
	// sessionFile (in the run's state directory) keeps the last agent
	// session id, for agent.resume.
	sessionFile = "session.txt"
)

// CostFunc prices a model's tokens; ok is false for an unknown model.
type CostFunc func(model string, prompt, completion int64) (usd float64, ok bool)

// readStructured reads the iteration's output in the run's output format:
// it records the usage the agent reported (through Host.RecordLLMCall, so
// it counts toward the run's totals and budgets), emits a tool_call (and
// tool_result) event per tool use not already emitted live, and returns
// what it read. It returns nil
// for text output, and a ParsedOutput with OK false when the output held
// nothing of its format (after a warning event).
func (e *Executor) readStructured(ctx context.Context, in *spec.Input, output string, duration time.Duration, live *liveTools) *ParsedOutput {
	a := in.Config.Agent
	if a.OutputFormat == "" || a.OutputFormat == FormatText {
		return nil
	}
	p := ParseOutput(a.OutputFormat, output)
	if len(p.Warnings) > 0 {
		e.emit(ctx, in, EventOutputWarning, map[string]any{"iteration": in.Iteration, "format": a.OutputFormat,
			"warnings": p.Warnings, "degraded": !p.OK})
	}
	if !p.OK {
		return p
	}
	for _, tu := range p.ToolUses {
		sentCall, sentResult := live.sent(tu.ID)
		if !sentCall {
			emitTool(ctx, in.Host, spec.EventToolCall, map[string]any{"iteration": in.Iteration, "tool": tu.Name, "call_id": tu.ID,
				"arguments": tu.Arguments, "role": RoleAgent})
		}
		if tu.HasResult && !sentResult {
			emitTool(ctx, in.Host, spec.EventToolResult, map[string]any{"iteration": in.Iteration, "tool": tu.Name, "call_id": tu.ID,
				"ok": !tu.IsError, "result": tu.Output, "role": RoleAgent})
		}
	}
	if p.Usage != nil && in.Host != nil {
		model := p.Model
		if model == "" {
			model = in.Config.Model
		}
		call := spec.LLMCall{Role: RoleAgent, Model: model, PromptTokens: p.Usage.InputTokens,
			CompletionTokens: p.Usage.OutputTokens, LatencyMS: duration.Milliseconds()}
		switch {
		case p.Usage.HasCost:
			call.CostUSD, call.Priced = p.Usage.CostUSD, true
		case e.opts.Cost != nil && model != "":
			call.CostUSD, call.Priced = e.opts.Cost(model, call.PromptTokens, call.CompletionTokens)
		}
		if call.Model == "" {
			call.Model = "unknown"
		}
		if err := in.Host.RecordLLMCall(ctx, call); err != nil {
			e.emit(ctx, in, EventOutputWarning, map[string]any{"iteration": in.Iteration, "format": a.OutputFormat,
				"warnings": []string{"the agent's usage could not be recorded: " + err.Error()}})
		}
	}
	if p.SessionID != "" {
		// Best effort: without it the next iteration starts a new session.
		e.saveSession(a.Workdir, in.RunID, p.SessionID)
	}
	return p
}

func (e *Executor) saveSession(wd, runID, id string) {
	if dir := ensureStateDir(wd, runID); dir != "" {
		renameio.WriteFile(filepath.Join(dir, sessionFile), []byte(id), 0o644)
	}
}

// lastSession returns the session id the run's previous iteration reported
// in wd, or "".
func lastSession(wd, runID string) string {
	dir := stateDir(wd, runID)
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, sessionFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// agentArgv returns the argv of this iteration: the run's, continuing the
// previous session when agent.resume is set and one was reported (claude
// … --resume SESSION; codex exec … resume SESSION, the prompt still on stdin).
func agentArgv(a *spec.Agent, wd, runID string) []string {
	argv := slices.Clone(a.Argv)
	if !a.Resume {
		return argv
	}
	id := lastSession(wd, runID)
	if id == "" {
		return argv
	}
	switch a.OutputFormat {
	case FormatClaudeJSON, FormatClaudeStreamJSON:
		return append(argv, "--resume", id)
	case FormatCodexJSON:
		if len(argv) > 0 && argv[len(argv)-1] == "-" {
			argv = argv[:len(argv)-1]
		}
		return append(argv, "resume", id, "-")
	}
	return argv
}
