package agentcmd

import (
	"encoding/json"
	"strings"
)

// Field and type names of Claude Code's JSON.
const (
	fType    = "type"
	tResult  = "result"
	tSystem  = "system"
	tAssist  = "assistant"
	tUser    = "user"
	bText    = "text"
	bToolUse = "tool_use"
	bToolRes = "tool_result"
)

// claudeUsage is the usage object of Claude Code's messages and result.
type claudeUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreation            *struct {
		Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
}

// agentUsage returns u as an AgentUsage. Claude's input_tokens are the
// uncached ones.
func (u *claudeUsage) agentUsage() AgentUsage {
	a := AgentUsage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens, OutputTokens: u.OutputTokens}
	if c := u.CacheCreation; c != nil && c.Ephemeral1h > 0 && c.Ephemeral1h <= u.CacheCreationInputTokens {
		a.CacheWrite1hTokens = c.Ephemeral1h
	}
	return a
}

// claudeModelUsage is one model's entry in a result's modelUsage.
type claudeModelUsage struct {
	InputTokens              int64    `json:"inputTokens"`
	OutputTokens             int64    `json:"outputTokens"`
	CacheReadInputTokens     int64    `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64    `json:"cacheCreationInputTokens"`
	CostUSD                  *float64 `json:"costUSD"`
}

// claudeLine is any object of Claude Code's JSON output.
type claudeLine struct {
	Type         string                      `json:"type"`
	Subtype      string                      `json:"subtype"`
	IsError      bool                        `json:"is_error"`
	Result       *string                     `json:"result"`
	SessionID    string                      `json:"session_id"`
	NumTurns     int                         `json:"num_turns"`
	TotalCostUSD *float64                    `json:"total_cost_usd"`
	Usage        *claudeUsage                `json:"usage"`
	ModelUsage   map[string]claudeModelUsage `json:"modelUsage"`
	Model        string                      `json:"model"`
	Errors       json.RawMessage             `json:"errors"`
	RawMessage   json.RawMessage             `json:"message"`
	// Message is RawMessage decoded, when it is a message object (other
	// CLIs' lines have a string there).
	Message *claudeMessage `json:"-"`
}

// claudeMessage is the message of an assistant or user line.
type claudeMessage struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"`
	Usage   *claudeUsage    `json:"usage"`
}

// decodeClaudeLine decodes one object of Claude Code's output.
func decodeClaudeLine(raw []byte, l *claudeLine) error {
	if err := json.Unmarshal(raw, l); err != nil {
		return err
	}
	if len(l.RawMessage) > 0 && l.RawMessage[0] == '{' {
		var m claudeMessage
		if err := json.Unmarshal(l.RawMessage, &m); err != nil {
			return err
		}
		l.Message = &m
	}
	return nil
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

func parseClaude(p *ParsedOutput, objs []json.RawMessage) {
	c := &claudeParser{p: p, seenMsg: map[string]bool{}, byID: map[string]int{}, msgUsage: map[string]*AgentUsage{}}
	for _, raw := range objs {
		var l claudeLine
		if err := decodeClaudeLine(raw, &l); err != nil {
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

// claudeParser is what parseClaude gathers from Claude Code's objects
// before the result object (or its absence) decides what they mean.
type claudeParser struct {
	p        *ParsedOutput
	result   *claudeLine // the last result object, nil if none
	messages int         // assistant messages with usage, counted once each
	msgUsage map[string]*AgentUsage
	seenMsg  map[string]bool
	byID     map[string]int // tool use id to its index in p.ToolUses
	lastText string         // the last assistant text block
}

// line reads one object of Claude Code's output.
func (c *claudeParser) line(l *claudeLine) {
	p := c.p
	switch l.Type {
	case tResult:
		c.result = l
	case tSystem:
		if l.Subtype != "init" && l.SessionID == "" {
			return
		}
		if l.SessionID != "" {
			p.SessionID = l.SessionID
		}
		if l.Model != "" {
			p.Model = l.Model
		}
		p.OK = true
	case tAssist, tUser:
		if l.Message == nil {
			return
		}
		p.OK = true
		if l.SessionID != "" {
			p.SessionID = l.SessionID
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

// countUsage adds an assistant message's usage, once per message, to its
// model's.
func (c *claudeParser) countUsage(l *claudeLine) {
	m := l.Message
	if l.Type != tAssist || m.Usage == nil || (m.ID != "" && c.seenMsg[m.ID]) {
		return
	}
	// One message is printed once per content block, each time with the
	// same usage.
	c.seenMsg[m.ID] = true
	model := orStr(m.Model, c.p.Model)
	if c.msgUsage[model] == nil {
		c.msgUsage[model] = &AgentUsage{}
	}
	u := m.Usage.agentUsage()
	u.Requests = 1
	c.msgUsage[model].add(u)
	c.messages++
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
		if lineType != tAssist {
			return
		}
		if i, ok := c.byID[b.ID]; ok && b.ID != "" {
			// The same message printed again.
			p.ToolUses[i].Arguments = truncate(string(b.Input), maxToolArgBytes)
			return
		}
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
// last message is the answer and its usage the sum of its messages'.
func (c *claudeParser) finishWithoutResult() {
	p := c.p
	if !p.OK {
		return
	}
	p.Warnings = append(p.Warnings, "the agent's output has no final result object (cut short?); its last message is used")
	p.FinalText = c.lastText
	p.ByModel, p.Usage = byModel(c.msgUsage)
	if len(p.ByModel) == 1 && p.ByModel[0].Model == "" {
		p.ByModel = nil
	}
	p.Turns = c.messages
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
	p.Turns = result.NumTurns
	c.resultUsage()
	if result.IsError || (result.Subtype != "" && result.Subtype != "success") {
		p.Error = claudeResultError(result, p.FinalText)
	}
}

// resultUsage sets the usage the result object reports: per model from
// modelUsage (every model the session used: the main model, the small
// model of sub-tasks), else its usage under the session's model. The
// CLI's total_cost_usd is the cost; each model gets its own costUSD.
func (c *claudeParser) resultUsage() {
	p, result := c.p, c.result
	if len(result.ModelUsage) > 0 {
		m := map[string]*AgentUsage{}
		allCosts := true
		for name, mu := range result.ModelUsage {
			u := &AgentUsage{InputTokens: mu.InputTokens + mu.CacheReadInputTokens + mu.CacheCreationInputTokens,
				CacheReadTokens: mu.CacheReadInputTokens, CacheWriteTokens: mu.CacheCreationInputTokens, OutputTokens: mu.OutputTokens}
			if mu.CostUSD != nil && *mu.CostUSD >= 0 {
				u.CostUSD, u.HasCost = *mu.CostUSD, true
			} else {
				allCosts = false
			}
			m[name] = u
		}
		p.ByModel, p.Usage = byModel(m)
		if len(p.ByModel) == 1 {
			p.ByModel[0].Requests = result.NumTurns
			if result.Usage != nil {
				// The 5-minute/1-hour split of cache writes is only in
				// the session's usage.
				p.ByModel[0].CacheWrite1hTokens = result.Usage.agentUsage().CacheWrite1hTokens
			}
			p.Usage.CacheWrite1hTokens = p.ByModel[0].CacheWrite1hTokens
		}
		if p.Model == "" {
			p.Model = mainModel(p.ByModel)
		}
		if !allCosts {
			// Without per-model costs the session's total cannot be
			// split here; the recorder spreads it.
			for i := range p.ByModel {
				p.ByModel[i].CostUSD, p.ByModel[i].HasCost = 0, false
			}
			p.Usage.CostUSD, p.Usage.HasCost = 0, false
		}
	} else if result.Usage != nil {
		u := result.Usage.agentUsage()
		u.Requests = result.NumTurns
		p.Usage = &u
	}
	if result.TotalCostUSD != nil && *result.TotalCostUSD >= 0 {
		if p.Usage == nil {
			p.Usage = &AgentUsage{}
		}
		p.Usage.CostUSD, p.Usage.HasCost = *result.TotalCostUSD, true
	}
}

// mainModel returns the model that produced the most output.
func mainModel(us []AgentUsage) string {
	best := -1
	for i, u := range us {
		if best < 0 || u.OutputTokens > us[best].OutputTokens {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return us[best].Model
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
