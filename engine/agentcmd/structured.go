package agentcmd

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/renameio/v2"

	"homework/engine/llm/prices"
	"homework/engine/spec"
)

// Event types for structured agent output.
const (
	// RoleAgent is the role of the usage a command agent reports.
	RoleAgent = "agent"
	// sessionFile (in the run's state directory) keeps the last agent
	// session id, for agent.resume.
	sessionFile = "session.txt"
)

// Pricer looks up a model's price by name: the key it was found under and
// whether it has one. prices.Table is a Pricer.
type Pricer interface {
	Lookup(model string) (prices.Price, string, bool)
}

// costDiffers is how far (relative) a CLI's own cost may be from the price
// table's before both are recorded.
const costDiffers = 0.05

// readStructured reads the iteration's output in the run's output format:
// it records the usage the agent reported (through Host.RecordLLMCall, one
// call per model the CLI names, so it counts toward the run's totals,
// by_model and budgets), emits a tool_call (and tool_result) event per tool
// use not already emitted live, and returns what it read, with
// UsageUnknown or CostUnknown set when the iteration's tokens or cost could
// not be read. It returns nil for text output, and a ParsedOutput with OK
// false when the output held nothing of its format (after a warning event
// that names the format it looks like).
func (e *Executor) readStructured(ctx context.Context, in *spec.Input, output string, duration time.Duration, live *liveTools) *ParsedOutput {
	a := in.Config.Agent
	if !ReportsUsage(a.OutputFormat) {
		return nil
	}
	p := ParseOutput(a.OutputFormat, output)
	if len(p.Warnings) > 0 {
		e.emit(ctx, in, spec.EventAgentOutputWarning, spec.OutputWarningData{Iteration: in.Iteration, Format: a.OutputFormat,
			Warnings: p.Warnings, Degraded: !p.OK, LikelyFormat: p.LikelyFormat})
	}
	switch {
	case !p.OK && p.LikelyFormat != "":
		p.UsageUnknown = fmt.Sprintf("iteration %d's output looks like %s, not %s (agent.output_format), so its tokens and cost could not be read",
			in.Iteration, p.LikelyFormat, a.OutputFormat)
	case !p.OK:
		p.UsageUnknown = fmt.Sprintf("iteration %d's output has no %s JSON, so its tokens and cost could not be read", in.Iteration, a.OutputFormat)
	case p.Usage == nil:
		p.UsageUnknown = fmt.Sprintf("iteration %d's output reports no token usage, so its tokens and cost are unknown", in.Iteration)
	}
	if !p.OK {
		return p
	}
	for _, tu := range p.ToolUses {
		sentCall, sentResult := live.sent(tu.ID)
		if !sentCall {
			emitTool(ctx, in.Host, in.Iteration, tu, false)
		}
		if tu.HasResult && !sentResult {
			emitTool(ctx, in.Host, in.Iteration, tu, true)
		}
	}
	if p.Usage != nil && in.Host != nil {
		calls, unpriced := e.agentCalls(in, p, duration)
		if len(unpriced) > 0 {
			p.CostUnknown = fmt.Sprintf("iteration %d used %s, which has no price in the price table and whose cost the agent did not report",
				in.Iteration, strings.Join(unpriced, ", "))
		}
		for _, call := range calls {
			if err := in.Host.RecordLLMCall(ctx, call); err != nil {
				e.emit(ctx, in, spec.EventAgentOutputWarning, spec.OutputWarningData{Iteration: in.Iteration, Format: a.OutputFormat,
					Warnings: []string{"the agent's usage could not be recorded: " + err.Error()}})
			}
		}
	}
	if p.SessionID != "" {
		// Best effort: without it the next iteration starts a new session.
		e.saveSession(a.Workdir, in.RunID, p.SessionID)
	}
	return p
}

// agentCalls turns the usage the agent reported into model calls, one per
// model: priced by the CLI's own figure when it gave one (its total spread
// over its models in proportion to their list price, or their tokens, when
// it did not say per model), else by the price table. It returns the models
// left unpriced.
func (e *Executor) agentCalls(in *spec.Input, p *ParsedOutput, duration time.Duration) (calls []spec.LLMCall, unpriced []string) {
	usages := p.ByModel
	if len(usages) == 0 {
		u := *p.Usage
		u.Model = orStr(p.Model, ResolveModel(in.Config))
		usages = []AgentUsage{u}
	}
	spread := p.Usage.HasCost && !usages[0].HasCost
	var tableSum float64
	var tokens int64
	allPriced := true
	for i, u := range usages {
		call := spec.LLMCall{Role: RoleAgent, Model: orStr(u.Model, "unknown"), PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens,
			CachedTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
		if i == 0 {
			call.LatencyMS = duration.Milliseconds()
		}
		tableCost, tablePriced := e.tableCost(u, p.Turns)
		switch {
		case u.HasCost:
			call.CostUSD, call.Priced, call.CostSource = u.CostUSD, true, spec.CostSourceCLI
			if tablePriced && differs(u.CostUSD, tableCost) {
				call.TableCostUSD = tableCost
			}
		case tablePriced:
			call.CostUSD, call.Priced, call.CostSource = tableCost, true, spec.CostSourceTable
		}
		allPriced = allPriced && tablePriced
		tableSum += tableCost
		tokens += u.InputTokens + u.OutputTokens
		calls = append(calls, call)
	}
	if spread {
		total := p.Usage.CostUSD
		for i := range calls {
			share := float64(calls[i].PromptTokens+calls[i].CompletionTokens) / float64(max(tokens, 1))
			if allPriced && tableSum > 0 {
				share = calls[i].CostUSD / tableSum
			}
			if len(calls) == 1 {
				share = 1
			}
			tableCost := calls[i].CostUSD
			calls[i].CostUSD, calls[i].Priced, calls[i].CostSource = total*share, true, spec.CostSourceCLI
			if calls[i].TableCostUSD == 0 && tableCost > 0 && differs(calls[i].CostUSD, tableCost) {
				calls[i].TableCostUSD = tableCost
			}
		}
	}
	for _, c := range calls {
		if !c.Priced {
			unpriced = append(unpriced, fmt.Sprintf("%q", c.Model))
		}
	}
	return calls, unpriced
}

// tableCost prices u by the price table; turns estimates the requests when
// the CLI did not count them.
func (e *Executor) tableCost(u AgentUsage, turns int) (float64, bool) {
	if e.opts.Prices == nil || u.Model == "" {
		return 0, false
	}
	price, _, ok := e.opts.Prices.Lookup(u.Model)
	if !ok {
		return 0, false
	}
	return price.Cost(u.pricesUsage(turns)), true
}

// pricesUsage returns u for the price table.
func (u AgentUsage) pricesUsage(turns int) prices.Usage {
	requests := u.Requests
	if requests == 0 {
		requests = turns
	}
	return prices.Usage{Input: u.InputTokens, CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens - u.CacheWrite1hTokens,
		CacheWrite1h: u.CacheWrite1hTokens, Output: u.OutputTokens, Reasoning: u.ReasoningTokens, Requests: requests}
}

// differs reports whether a and b differ by more than costDiffers of the
// larger.
func differs(a, b float64) bool {
	return math.Abs(a-b) > costDiffers*math.Max(math.Abs(a), math.Abs(b))
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
