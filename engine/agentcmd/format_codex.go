package agentcmd

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Type names of codex's JSON events.
const (
	tThreadStarted = "thread.started"
	tTurnCompleted = "turn.completed"
	tTurnFailed    = "turn.failed"
	tError         = "error"
	tItemStarted   = "item.started"
	tItemCompleted = "item.completed"
	iAgentMessage  = "agent_message"
	iCommand       = "command_execution"
	iFileChange    = "file_change"
	iMCPToolCall   = "mcp_tool_call"
	iWebSearch     = "web_search"
	iError         = "error"

	// The older {"id","msg"} envelope's message types.
	mAgentMessage = "agent_message"
	mExecBegin    = "exec_command_begin"
	mExecEnd      = "exec_command_end"
	mTokenCount   = "token_count"
	mError        = "error"
	mTaskComplete = "task_complete"
)

// codexUsage is codex's token usage: input_tokens include the cached ones
// (and the cache writes); output_tokens include the reasoning ones.
type codexUsage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
	TotalTokens           int64 `json:"total_tokens"`
}

func (u *codexUsage) agentUsage() AgentUsage {
	return AgentUsage{InputTokens: u.InputTokens, CacheReadTokens: min(u.CachedInputTokens, u.InputTokens),
		CacheWriteTokens: u.CacheWriteInputTokens, OutputTokens: u.OutputTokens, ReasoningTokens: min(u.ReasoningOutputTokens, u.OutputTokens)}
}

// codexLine is any line of `codex exec --json`, current or older.
type codexLine struct {
	Type     string          `json:"type"`
	ThreadID string          `json:"thread_id"`
	Message  json.RawMessage `json:"message"` // a string (other CLIs' lines have an object)
	Usage    *codexUsage     `json:"usage"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
	Item *codexItem `json:"item"`
	// The older envelope, and the configuration object it began with.
	ID    *json.RawMessage `json:"id"`
	Msg   *codexMsg        `json:"msg"`
	Model string           `json:"model"`
}

// codexItem is the item of codex's item.* events.
type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Message          string          `json:"message"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Status           string          `json:"status"`
	Changes          json.RawMessage `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Query            string          `json:"query"`
	Error            json.RawMessage `json:"error"`
}

// codexMsg is the msg of the older {"id","msg"} envelope.
type codexMsg struct {
	Type             string          `json:"type"`
	Message          string          `json:"message"`
	LastAgentMessage *string         `json:"last_agent_message"`
	CallID           string          `json:"call_id"`
	Command          json.RawMessage `json:"command"`
	Stdout           string          `json:"stdout"`
	Stderr           string          `json:"stderr"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Info             *struct {
		Total *codexUsage `json:"total_token_usage"`
		Last  *codexUsage `json:"last_token_usage"`
	} `json:"info"`
	codexUsage
}

// codexParser is what parseCodex gathers.
type codexParser struct {
	p         *ParsedOutput
	usage     *AgentUsage
	completed bool
	requests  int // model responses seen in the current format's items
	// legacy: the last cumulative total seen, to count each request once.
	lastTotal *codexUsage
	execs     map[string]int // call_id → index in p.ToolUses
}

func parseCodex(p *ParsedOutput, objs []json.RawMessage) {
	c := &codexParser{p: p, execs: map[string]int{}}
	for _, raw := range objs {
		var l codexLine
		if err := json.Unmarshal(raw, &l); err != nil {
			p.Warnings = append(p.Warnings, "a line of the agent's JSON output has unexpected fields: "+oneLine(err.Error(), 120))
			continue
		}
		if l.Msg != nil && l.ID != nil {
			c.legacy(l.Msg)
			continue
		}
		if l.Type == "" && l.Model != "" && p.Model == "" {
			// The older versions' configuration summary.
			p.Model = l.Model
			continue
		}
		c.line(&l)
	}
	if c.usage != nil && c.usage.Requests == 0 {
		c.usage.Requests = max(c.requests, 1)
	}
	p.Usage = c.usage
	if p.OK && !c.completed && p.Error == "" {
		p.Warnings = append(p.Warnings, "the agent's output has no turn.completed event (cut short?)")
	}
}

// line reads one event of the current format.
func (c *codexParser) line(l *codexLine) {
	p := c.p
	switch l.Type {
	case tThreadStarted:
		p.OK = true
		p.SessionID = l.ThreadID
	case tTurnCompleted:
		p.OK, c.completed = true, true
		if l.Usage != nil {
			c.addUsage(l.Usage.agentUsage())
		}
	case tTurnFailed:
		p.OK, c.completed = true, true
		msg := "the turn failed"
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		p.Error = truncate(msg, 1000)
	case tError:
		var msg string
		if json.Unmarshal(l.Message, &msg) != nil {
			return // not codex's error event
		}
		p.OK = true
		if msg != "" {
			p.Error = truncate(msg, 1000)
		}
	case tItemCompleted:
		p.OK = true
		if l.Item != nil {
			c.item(l.Item)
		}
	case "turn.started", tItemStarted, "item.updated":
		p.OK = true
	}
}

func (c *codexParser) addUsage(u AgentUsage) {
	if c.usage == nil {
		c.usage = &AgentUsage{}
	}
	c.usage.add(u)
}

// item reads a completed item: the answer, a tool use, a non-fatal error.
func (c *codexParser) item(it *codexItem) {
	p := c.p
	switch it.Type {
	case iAgentMessage:
		c.requests++
		if strings.TrimSpace(it.Text) != "" {
			p.FinalText = it.Text
		}
	case iCommand, iFileChange, iMCPToolCall, iWebSearch:
		c.requests++
		if tu, ok := codexToolUse(it); ok {
			p.ToolUses = append(p.ToolUses, tu)
		}
	case iError:
		// A non-fatal error the agent carried on after.
		p.Warnings = append(p.Warnings, "the agent reported: "+oneLine(orStr(it.Message, it.Text), 300))
	}
}

// legacy reads one {"id","msg"} event of the older format.
func (c *codexParser) legacy(m *codexMsg) {
	p := c.p
	p.OK = true
	switch m.Type {
	case mAgentMessage:
		if strings.TrimSpace(m.Message) != "" {
			p.FinalText = m.Message
		}
	case mTaskComplete:
		c.completed = true
		if m.LastAgentMessage != nil && strings.TrimSpace(*m.LastAgentMessage) != "" {
			p.FinalText = *m.LastAgentMessage
		}
	case mError, "stream_error":
		if m.Message != "" {
			p.Error = truncate(m.Message, 1000)
		}
	case mExecBegin:
		c.execs[m.CallID] = len(p.ToolUses)
		p.ToolUses = append(p.ToolUses, ToolUse{ID: m.CallID, Name: "shell", Arguments: truncate(commandText(m.Command), maxToolArgBytes)})
	case mExecEnd:
		i, ok := c.execs[m.CallID]
		if !ok {
			i = len(p.ToolUses)
			c.execs[m.CallID] = i
			p.ToolUses = append(p.ToolUses, ToolUse{ID: m.CallID, Name: "shell", Arguments: truncate(commandText(m.Command), maxToolArgBytes)})
		}
		out := m.AggregatedOutput
		if out == "" {
			out = strings.TrimSpace(m.Stdout + "\n" + m.Stderr)
		}
		tu := &p.ToolUses[i]
		tu.Output, tu.HasResult = truncate(out, maxToolOutBytes), true
		tu.IsError = m.ExitCode != nil && *m.ExitCode != 0
	case mTokenCount:
		c.tokenCount(m)
	}
}

// tokenCount reads a token_count event: with info, the session's running
// total (a request is counted when the total moves, by its last usage);
// without, one request's usage itself.
func (c *codexParser) tokenCount(m *codexMsg) {
	if m.Info == nil {
		if m.InputTokens != 0 || m.OutputTokens != 0 {
			u := m.codexUsage.agentUsage()
			u.Requests = 1
			c.addUsage(u)
		}
		return
	}
	total, last := m.Info.Total, m.Info.Last
	if total == nil || (c.lastTotal != nil && *total == *c.lastTotal) {
		return // a repeat (rate-limit updates carry the same totals)
	}
	var u AgentUsage
	switch {
	case last != nil:
		u = last.agentUsage()
	case c.lastTotal != nil:
		d := codexUsage{InputTokens: total.InputTokens - c.lastTotal.InputTokens, CachedInputTokens: total.CachedInputTokens - c.lastTotal.CachedInputTokens,
			OutputTokens: total.OutputTokens - c.lastTotal.OutputTokens, ReasoningOutputTokens: total.ReasoningOutputTokens - c.lastTotal.ReasoningOutputTokens}
		u = d.agentUsage()
	default:
		u = total.agentUsage()
	}
	c.lastTotal = total
	u.Requests = 1
	c.addUsage(u)
}

// commandText returns a command given as an argv array or a string.
func commandText(raw json.RawMessage) string {
	var argv []string
	if json.Unmarshal(raw, &argv) == nil {
		return strings.Join(argv, " ")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// codexToolUse returns the tool use a codex item stands for: a command, a
// file change, an MCP tool call or a web search. A failed use keeps its
// error text (the command's output, the tool's error message).
func codexToolUse(it *codexItem) (ToolUse, bool) {
	switch it.Type {
	case iCommand:
		return ToolUse{ID: it.ID, Name: "shell", Arguments: truncate(it.Command, maxToolArgBytes),
			Output: truncate(it.AggregatedOutput, maxToolOutBytes), HasResult: it.Status != "in_progress",
			IsError: it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)}, true
	case iFileChange:
		return ToolUse{ID: it.ID, Name: "file_change", Arguments: truncate(string(it.Changes), maxToolArgBytes),
			HasResult: it.Status != "in_progress", IsError: it.Status == "failed"}, true
	case iMCPToolCall:
		tu := ToolUse{ID: it.ID, Name: it.Server + "/" + it.Tool, Arguments: truncate(string(it.Arguments), maxToolArgBytes),
			HasResult: it.Status != "" && it.Status != "in_progress", IsError: it.Status == "failed"}
		if msg := errorText(it.Error); msg != "" {
			tu.Output, tu.IsError = truncate(msg, maxToolOutBytes), true
		} else if len(it.Result) > 0 && string(it.Result) != "null" {
			tu.Output = truncate(mcpResultText(it.Result), maxToolOutBytes)
		}
		return tu, true
	case iWebSearch:
		return ToolUse{ID: it.ID, Name: "web_search", Arguments: truncate(it.Query, maxToolArgBytes)}, true
	}
	return ToolUse{}, false
}

// errorText returns an error given as {"message"} or a string.
func errorText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return fmt.Sprint(string(raw))
}

// mcpResultText returns an MCP tool result's text content, else its JSON.
func mcpResultText(raw json.RawMessage) string {
	var r struct {
		Content []claudeBlock `json:"content"`
	}
	if json.Unmarshal(raw, &r) == nil && len(r.Content) > 0 {
		var parts []string
		for _, b := range r.Content {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, "\n")
		}
	}
	return string(raw)
}
