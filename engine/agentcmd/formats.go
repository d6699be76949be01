package agentcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Output formats a command run's agent.output_format may name.
//
// The field names below follow the CLIs' published headless documentation:
//
//   - FormatClaudeJSON: `claude -p --output-format json` prints one result
//     object: {"type":"result","subtype","is_error","result","session_id",
//     "num_turns","total_cost_usd","usage":{"input_tokens","output_tokens",
//     "cache_creation_input_tokens","cache_read_input_tokens"},
//     "modelUsage":{"<model>":{…}}}.
//   - FormatClaudeStreamJSON: `claude -p --output-format stream-json
//     --verbose` prints one JSON object per line: {"type":"system",
//     "subtype":"init","session_id","model"}, then {"type":"assistant",
//     "message":{"id","model","content":[{"type":"text","text"} |
//     {"type":"tool_use","id","name","input"}],"usage":{…}}} and
//     {"type":"user","message":{"content":[{"type":"tool_result",
//     "tool_use_id","content","is_error"}]}}, and last the same result
//     object as FormatClaudeJSON.
//   - FormatCodexJSON: `codex exec --json` prints JSON lines:
//     {"type":"thread.started","thread_id"}, {"type":"turn.started"},
//     {"type":"item.started"|"item.updated"|"item.completed","item":{"id",
//     "type":"agent_message"|"reasoning"|"command_execution"|"file_change"|
//     "mcp_tool_call"|"web_search"|"todo_list"|"error", …}},
//     {"type":"turn.completed","usage":{"input_tokens","cached_input_tokens",
//     "output_tokens"}}, {"type":"turn.failed","error":{"message"}} and
//     {"type":"error","message"}.
const (
	FormatText             = "text"
	FormatClaudeJSON       = "claude-json"
	FormatClaudeStreamJSON = "claude-stream-json"
	FormatCodexJSON        = "codex-json"
)

// OutputFormats lists the formats in the order the composer offers them.
func OutputFormats() []string {
	return []string{FormatText, FormatClaudeJSON, FormatClaudeStreamJSON, FormatCodexJSON}
}

// ValidOutputFormat reports whether f names a known format ("" is text).
func ValidOutputFormat(f string) bool {
	switch f {
	case "", FormatText, FormatClaudeJSON, FormatClaudeStreamJSON, FormatCodexJSON:
		return true
	}
	return false
}

// Field and type names of the formats, in one place.
const (
	fType    = "type"
	tResult  = "result" // claude
	tSystem  = "system" // claude
	tAssist  = "assistant"
	tUser    = "user"
	bText    = "text"
	bToolUse = "tool_use"
	bToolRes = "tool_result"

	tThreadStarted = "thread.started" // codex
	tTurnCompleted = "turn.completed"
	tTurnFailed    = "turn.failed"
	tError         = "error"
	tItemCompleted = "item.completed"
	iAgentMessage  = "agent_message"
	iCommand       = "command_execution"
	iFileChange    = "file_change"
	iMCPToolCall   = "mcp_tool_call"
	iWebSearch     = "web_search"
	iError         = "error"
)

// claudeUsage is the usage object of Claude Code's messages and result.
type claudeUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// claudeLine is any line of Claude Code's JSON output.
type claudeLine struct {
	Type         string                     `json:"type"`
	Subtype      string                     `json:"subtype"`
	IsError      bool                       `json:"is_error"`
	Result       *string                    `json:"result"`
	SessionID    string                     `json:"session_id"`
	NumTurns     int                        `json:"num_turns"`
	TotalCostUSD *float64                   `json:"total_cost_usd"`
	Usage        *claudeUsage               `json:"usage"`
	ModelUsage   map[string]json.RawMessage `json:"modelUsage"`
	Model        string                     `json:"model"`
	Errors       json.RawMessage            `json:"errors"`
	Message      *struct {
		ID      string          `json:"id"`
		Model   string          `json:"model"`
		Content json.RawMessage `json:"content"`
		Usage   *claudeUsage    `json:"usage"`
	} `json:"message"`
}

// claudeBlock is one content block of a Claude message.
type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// codexLine is any line of `codex exec --json`.
type codexLine struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Message  string `json:"message"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Item *codexItem `json:"item"`
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
	Query            string          `json:"query"`
	Error            json.RawMessage `json:"error"`
}

// AgentUsage is what an agent CLI reported it spent in one iteration.
type AgentUsage struct {
	// InputTokens counts every prompt token the model read, cached or not
	// (Claude's input, cache-creation and cache-read tokens; Codex's
	// input_tokens, which include the cached ones).
	InputTokens  int64
	OutputTokens int64
	// CachedTokens is the cached part of InputTokens, for display.
	CachedTokens int64
	// CostUSD is the CLI's own cost figure when HasCost.
	CostUSD float64
	HasCost bool
	Turns   int
}

// ToolUse is one tool call or command the agent reported.
type ToolUse struct {
	ID        string
	Name      string
	Arguments string // JSON or the command line, bounded
	Output    string // bounded; "" when the format did not say
	IsError   bool
	HasResult bool
}

// ParsedOutput is what an agent's structured output said.
type ParsedOutput struct {
	Format string
	// OK is false when the output held nothing of its format: the
	// iteration then degrades to plain text.
	OK bool
	// FinalText is the agent's final answer: Claude's result, or Codex's
	// last agent message.
	FinalText string
	SessionID string
	Model     string
	// Usage is nil when the output reported none.
	Usage    *AgentUsage
	ToolUses []ToolUse
	// Error is the agent's own error report (is_error, turn.failed, error).
	Error string
	// Warnings describe malformed or missing parts.
	Warnings []string
}

const (
	maxToolArgBytes = 2000
	maxToolOutBytes = 2000
	maxToolUses     = 1000
	maxWarnings     = 5
)

// jsonLines returns the lines of output that look like JSON objects, and
// warnings for those that do not parse. Other lines (the agent's stderr,
// which shares the pipe) are skipped.
func jsonLines(output string) (objs []json.RawMessage, warnings []string) {
	bad := 0
	for l := range strings.SplitSeq(output, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			continue
		}
		if !json.Valid([]byte(l)) {
			bad++
			if bad <= maxWarnings {
				warnings = append(warnings, "a line of the agent's JSON output does not parse: "+oneLine(l, 120))
			}
			continue
		}
		objs = append(objs, json.RawMessage(l))
	}
	if bad > maxWarnings {
		warnings = append(warnings, fmt.Sprintf("%d more malformed lines", bad-maxWarnings))
	}
	return objs, warnings
}

// ParseOutput reads an agent's output in format. It never fails: what
// cannot be read becomes a warning, and an output with nothing of its
// format comes back with OK false.
func ParseOutput(format, output string) *ParsedOutput {
	p := &ParsedOutput{Format: format}
	switch format {
	case FormatClaudeJSON, FormatClaudeStreamJSON:
		parseClaude(p, output)
	case FormatCodexJSON:
		parseCodex(p, output)
	default:
		return p
	}
	if len(p.ToolUses) > maxToolUses {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d tool uses; only the first %d are recorded", len(p.ToolUses), maxToolUses))
		p.ToolUses = p.ToolUses[:maxToolUses]
	}
	return p
}

func parseClaude(p *ParsedOutput, output string) {
	objs, warnings := jsonLines(output)
	p.Warnings = warnings
	if len(objs) == 0 {
		// The single result object may have been pretty-printed.
		if t := bytes.TrimSpace([]byte(output)); json.Valid(t) && bytes.HasPrefix(t, []byte("{")) {
			objs = append(objs, json.RawMessage(t))
		}
	}
	c := &claudeParser{p: p, seenMsg: map[string]bool{}, byID: map[string]int{}}
	for _, raw := range objs {
		var l claudeLine
		if err := json.Unmarshal(raw, &l); err != nil {
			p.Warnings = append(p.Warnings, "a line of the agent's JSON output has unexpected fields: "+oneLine(err.Error(), 120))
			continue
		}
		c.line(&l)
	}
	if c.result == nil {
		c.finishWithoutResult()
		return
	}
	c.finishWithResult()
}

// claudeParser is what parseClaude gathers from Claude Code's lines before
// the result object (or its absence) decides what they mean.
type claudeParser struct {
	p              *ParsedOutput
	result         *claudeLine // the last result object, nil if none
	assistantUsage AgentUsage  // summed over the assistant messages
	seenMsg        map[string]bool
	byID           map[string]int // tool use id to its index in p.ToolUses
	lastText       string         // the last assistant text block
}

// line reads one line of Claude Code's output.
func (c *claudeParser) line(l *claudeLine) {
	p := c.p
	switch l.Type {
	case tResult:
		c.result = l
	case tSystem:
		if l.SessionID != "" {
			p.SessionID = l.SessionID
		}
		if l.Model != "" {
			p.Model = l.Model
		}
		p.OK = true
	case tAssist, tUser:
		p.OK = true
		if l.SessionID != "" {
			p.SessionID = l.SessionID
		}
		if l.Message == nil {
			return
		}
		if l.Message.Model != "" && p.Model == "" {
			p.Model = l.Message.Model
		}
		c.countUsage(l)
		var blocks []claudeBlock
		if json.Unmarshal(l.Message.Content, &blocks) != nil {
			return
		}
		for _, b := range blocks {
			c.block(l.Type, &b)
		}
	}
}

// countUsage adds an assistant message's usage, once per message.
func (c *claudeParser) countUsage(l *claudeLine) {
	if l.Type != tAssist || l.Message.Usage == nil || (l.Message.ID != "" && c.seenMsg[l.Message.ID]) {
		return
	}
	// One message may be printed once per content block, each with the
	// same usage.
	c.seenMsg[l.Message.ID] = true
	u := l.Message.Usage
	c.assistantUsage.InputTokens += u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	c.assistantUsage.CachedTokens += u.CacheReadInputTokens
	c.assistantUsage.OutputTokens += u.OutputTokens
	c.assistantUsage.Turns++
}

// block reads one content block of a message of type lineType: text, a
// tool use, or the result of an earlier tool use.
func (c *claudeParser) block(lineType string, b *claudeBlock) {
	p := c.p
	switch b.Type {
	case bText:
		if lineType == tAssist && strings.TrimSpace(b.Text) != "" {
			c.lastText = b.Text
		}
	case bToolUse:
		c.byID[b.ID] = len(p.ToolUses)
		p.ToolUses = append(p.ToolUses, ToolUse{ID: b.ID, Name: b.Name, Arguments: truncate(string(b.Input), maxToolArgBytes)})
	case bToolRes:
		if i, ok := c.byID[b.ToolUseID]; ok {
			p.ToolUses[i].Output = truncate(blockText(b.Content), maxToolOutBytes)
			p.ToolUses[i].IsError = b.IsError
			p.ToolUses[i].HasResult = true
		}
	}
}

// finishWithoutResult ends an output with no result object: cut short, its
// last message is the answer, or not Claude Code's JSON at all.
func (c *claudeParser) finishWithoutResult() {
	p := c.p
	if !p.OK {
		p.Warnings = append(p.Warnings, "the agent's output has no Claude Code JSON result; it is read as text")
		return
	}
	p.Warnings = append(p.Warnings, "the agent's output has no final result object (cut short?); its last message is used")
	p.FinalText = c.lastText
	if c.assistantUsage.Turns > 0 {
		p.Usage = &c.assistantUsage
	}
}

// finishWithResult ends an output by its result object, which has the last
// word on the session, the answer, the usage and the error.
func (c *claudeParser) finishWithResult() {
	p, result := c.p, c.result
	p.OK = true
	if result.SessionID != "" {
		p.SessionID = result.SessionID
	}
	if result.Result != nil {
		p.FinalText = *result.Result
	} else {
		p.FinalText = c.lastText
	}
	if len(result.ModelUsage) > 0 && p.Model == "" {
		// The model that did the most work is listed; pick deterministically.
		names := make([]string, 0, len(result.ModelUsage))
		for n := range result.ModelUsage {
			names = append(names, n)
		}
		sort.Strings(names)
		p.Model = names[0]
	}
	if result.Usage != nil || result.TotalCostUSD != nil {
		p.Usage = claudeResultUsage(result)
	}
	if result.IsError || (result.Subtype != "" && result.Subtype != "success") {
		p.Error = claudeResultError(result, p.FinalText)
	}
}

// claudeResultUsage returns the usage a result object reports.
func claudeResultUsage(result *claudeLine) *AgentUsage {
	u := &AgentUsage{Turns: result.NumTurns}
	if result.Usage != nil {
		u.InputTokens = result.Usage.InputTokens + result.Usage.CacheCreationInputTokens + result.Usage.CacheReadInputTokens
		u.CachedTokens = result.Usage.CacheReadInputTokens
		u.OutputTokens = result.Usage.OutputTokens
	}
	if result.TotalCostUSD != nil && *result.TotalCostUSD >= 0 {
		u.CostUSD, u.HasCost = *result.TotalCostUSD, true
	}
	return u
}

// claudeResultError returns the error a failed result object reports: its
// errors, else the final text, prefixed with the subtype.
func claudeResultError(result *claudeLine, finalText string) string {
	msg := strings.TrimSpace(finalText)
	var errs []string
	if json.Unmarshal(result.Errors, &errs) == nil && len(errs) > 0 {
		msg = strings.Join(errs, "; ")
	}
	if msg == "" {
		msg = orStr(result.Subtype, "is_error set without a message")
	} else if result.Subtype != "" && result.Subtype != "success" {
		msg = result.Subtype + ": " + msg
	}
	return truncate(msg, 1000)
}

// blockText returns a tool_result's content, a string or a list of text
// blocks.
func blockText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []claudeBlock
	if json.Unmarshal(raw, &blocks) == nil {
		var b strings.Builder
		for _, bl := range blocks {
			if bl.Text != "" {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(bl.Text)
			}
		}
		return b.String()
	}
	return string(raw)
}

func parseCodex(p *ParsedOutput, output string) {
	objs, warnings := jsonLines(output)
	p.Warnings = warnings
	var usage *AgentUsage
	completed := false
	for _, raw := range objs {
		var l codexLine
		if err := json.Unmarshal(raw, &l); err != nil {
			p.Warnings = append(p.Warnings, "a line of the agent's JSON output has unexpected fields: "+oneLine(err.Error(), 120))
			continue
		}
		switch l.Type {
		case tThreadStarted:
			p.OK = true
			p.SessionID = l.ThreadID
		case tTurnCompleted:
			p.OK, completed = true, true
			if l.Usage != nil {
				if usage == nil {
					usage = &AgentUsage{}
				}
				usage.InputTokens += l.Usage.InputTokens
				usage.CachedTokens += l.Usage.CachedInputTokens
				usage.OutputTokens += l.Usage.OutputTokens
				usage.Turns++
			}
		case tTurnFailed:
			p.OK, completed = true, true
			msg := "the turn failed"
			if l.Error != nil && l.Error.Message != "" {
				msg = l.Error.Message
			}
			p.Error = truncate(msg, 1000)
		case tError:
			p.OK = true
			if l.Message != "" {
				p.Error = truncate(l.Message, 1000)
			}
		case tItemCompleted:
			p.OK = true
			it := l.Item
			if it == nil {
				continue
			}
			switch it.Type {
			case iAgentMessage:
				if strings.TrimSpace(it.Text) != "" {
					p.FinalText = it.Text
				}
			case iCommand, iFileChange, iMCPToolCall, iWebSearch:
				if tu, ok := codexToolUse(it); ok {
					p.ToolUses = append(p.ToolUses, tu)
				}
			case iError:
				// A non-fatal error the agent carried on after.
				p.Warnings = append(p.Warnings, "the agent reported: "+oneLine(orStr(it.Message, it.Text), 300))
			}
		default:
			if l.Type != "" {
				p.OK = true
			}
		}
	}
	p.Usage = usage
	switch {
	case !p.OK:
		p.Warnings = append(p.Warnings, "the agent's output has no codex JSON events; it is read as text")
	case !completed && p.Error == "":
		p.Warnings = append(p.Warnings, "the agent's output has no turn.completed event (cut short?)")
	}
}

func orStr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// codexToolUse returns the tool use a codex item stands for: a command, a
// file change, an MCP tool call or a web search.
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
		return ToolUse{ID: it.ID, Name: it.Server + "/" + it.Tool, Arguments: truncate(string(it.Arguments), maxToolArgBytes),
			HasResult: it.Status != "" && it.Status != "in_progress", IsError: it.Status == "failed"}, true
	case iWebSearch:
		return ToolUse{ID: it.ID, Name: "web_search", Arguments: truncate(it.Query, maxToolArgBytes)}, true
	}
	return ToolUse{}, false
}
