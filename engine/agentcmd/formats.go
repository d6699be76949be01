package agentcmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Output formats a command run's agent.output_format may name. Each reader
// takes the output as the CLIs print it: one JSON value per line, a
// pretty-printed (multi-line) value, a JSON array of messages, with lines of
// other text (warnings, update notices, stderr) before, between or after.
//
//   - FormatClaudeJSON: `claude -p --output-format json` prints one result
//     object: {"type":"result","subtype","is_error","result","session_id",
//     "num_turns","total_cost_usd","usage":{"input_tokens","output_tokens",
//     "cache_creation_input_tokens","cache_read_input_tokens",
//     "cache_creation":{"ephemeral_5m_input_tokens",
//     "ephemeral_1h_input_tokens"}},"modelUsage":{"<model>":{"inputTokens",
//     "outputTokens","cacheReadInputTokens","cacheCreationInputTokens",
//     "costUSD"}}}; with --verbose it prints a JSON array of every message,
//     the result last.
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
//     "cache_write_input_tokens","output_tokens","reasoning_output_tokens"}},
//     {"type":"turn.failed","error":{"message"}} and {"type":"error",
//     "message"}. Older versions printed a configuration object, then
//     {"id","msg":{"type":…}} envelopes: "agent_message" {"message"},
//     "agent_reasoning", "exec_command_begin" {"call_id","command"},
//     "exec_command_end" {"call_id","stdout","stderr","aggregated_output",
//     "exit_code"}, "token_count" ({"info":{"total_token_usage",
//     "last_token_usage"}}, or the usage fields themselves), "error"
//     {"message"} and "task_complete" {"last_agent_message"}.
//   - FormatGeminiJSON: `gemini --output-format json` prints one
//     pretty-printed object: {"session_id","response","stats":{"models":
//     {"<model>":{"api":{"totalRequests"},"tokens":{"prompt","candidates",
//     "cached","thoughts","tool","total"}}},"tools":{…}},"error":{"type",
//     "message","code"}}.
const (
	FormatText             = "text"
	FormatClaudeJSON       = "claude-json"
	FormatClaudeStreamJSON = "claude-stream-json"
	FormatCodexJSON        = "codex-json"
	FormatGeminiJSON       = "gemini-json"
)

// OutputFormats lists the formats in the order the composer offers them.
func OutputFormats() []string {
	return []string{FormatText, FormatClaudeJSON, FormatClaudeStreamJSON, FormatCodexJSON, FormatGeminiJSON}
}

// ValidOutputFormat reports whether f names a known format ("" is text).
func ValidOutputFormat(f string) bool {
	return f == "" || slices.Contains(OutputFormats(), f)
}

// ReportsCost reports whether the CLI of format f reports its own cost, so
// a cost budget binds without a price for its model.
func ReportsCost(f string) bool {
	return f == FormatClaudeJSON || f == FormatClaudeStreamJSON
}

// ReportsUsage reports whether format f reports the agent's token usage.
func ReportsUsage(f string) bool {
	return f != "" && f != FormatText && ValidOutputFormat(f)
}

// AgentUsage is what an agent CLI reported it spent in one iteration, on
// one model (or on all of them, when the CLI does not say by model).
type AgentUsage struct {
	// Model is the model's name, "" when the CLI did not say.
	Model string
	// InputTokens counts every prompt token the model read: uncached,
	// read from the cache (CacheReadTokens) and written to it
	// (CacheWriteTokens, of which CacheWrite1hTokens with the one-hour
	// lifetime).
	InputTokens        int64
	CacheReadTokens    int64
	CacheWriteTokens   int64
	CacheWrite1hTokens int64
	// OutputTokens counts every output token; ReasoningTokens is the part
	// spent reasoning.
	OutputTokens    int64
	ReasoningTokens int64
	// Requests is how many model requests the tokens add up, when the
	// CLI says (0 otherwise).
	Requests int
	// CostUSD is the CLI's own cost figure when HasCost.
	CostUSD float64
	HasCost bool
}

func (u *AgentUsage) add(o AgentUsage) {
	u.InputTokens += o.InputTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.CacheWrite1hTokens += o.CacheWrite1hTokens
	u.OutputTokens += o.OutputTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.Requests += o.Requests
	if o.HasCost {
		u.CostUSD += o.CostUSD
		u.HasCost = true
	}
}

// ToolUse is one tool call or command the agent reported.
type ToolUse struct {
	ID        string
	Name      string
	Arguments string // JSON or the command line, bounded
	Output    string // bounded; the error text of a failed use; "" when the format did not say
	IsError   bool
	HasResult bool
}

// ParsedOutput is what an agent's structured output said.
type ParsedOutput struct {
	Format string
	// OK is false when the output held nothing of its format: the
	// iteration then degrades to plain text.
	OK bool
	// FinalText is the agent's final answer: Claude's result, Codex's last
	// agent message, Gemini's response.
	FinalText string
	SessionID string
	// Model is the main model the output named, "" when none.
	Model string
	// Usage is the iteration's total usage, nil when the output reported
	// none. ByModel splits it by model when the CLI does (each entry's
	// Model set), sorted by model name; it is empty otherwise.
	Usage   *AgentUsage
	ByModel []AgentUsage
	// Turns is the number of agent turns, when reported.
	Turns    int
	ToolUses []ToolUse
	// Error is the agent's own error report (is_error, turn.failed, error).
	Error string
	// LikelyFormat names the format the output looks like when it is not
	// Format's (another CLI's JSON); "" otherwise.
	LikelyFormat string
	// Warnings describe malformed or missing parts.
	Warnings []string
	// UsageUnknown and CostUnknown are set by the executor when the
	// iteration's tokens, or their cost, could not be read (spec.Result).
	UsageUnknown, CostUnknown string
}

const (
	maxToolArgBytes = 2000
	maxToolOutBytes = 2000
	maxToolUses     = 1000
	maxWarnings     = 5
	// maxFailedDecodes bounds the attempts to decode a multi-line value
	// from a line that starts like JSON but is not, each of which may read
	// to the end of the output.
	maxFailedDecodes = 64
)

// jsonObjects returns the JSON objects in output, in order: each line that
// holds one, each pretty-printed object or array starting at the beginning
// of a line, and the objects of such arrays. Other lines (the agent's
// stderr, which shares the pipe, warnings, notices) are skipped; a line
// that starts with "{" but holds no JSON is reported in warnings.
func jsonObjects(output string) (objs []json.RawMessage, values int, warnings []string) {
	bad, failed := 0, 0
	data := []byte(output)
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		line := bytes.TrimRight(data[pos:next], "\r\n")
		trimmed := bytes.TrimLeft(line, " \t")
		if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
			pos = next
			continue
		}
		start := pos + len(line) - len(trimmed)
		var v json.RawMessage
		n, err := decodeOne(data[start:], &v, failed < maxFailedDecodes || json.Valid(trimmed))
		if err != nil {
			failed++
			if trimmed[0] == '{' {
				bad++
				if bad <= maxWarnings {
					warnings = append(warnings, "a line of the agent's JSON output does not parse: "+oneLine(string(trimmed), 120))
				}
			}
			pos = next
			continue
		}
		objs = append(objs, flatten(v)...)
		values++
		pos = start + n
	}
	if bad > maxWarnings {
		warnings = append(warnings, fmt.Sprintf("%d more malformed lines", bad-maxWarnings))
	}
	return objs, values, warnings
}

// decodeOne decodes the first JSON value of data into v and returns how
// many bytes it took. With multiLine false only a value on the first line
// is tried.
func decodeOne(data []byte, v *json.RawMessage, multiLine bool) (int, error) {
	if !multiLine {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[:i]
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return 0, err
	}
	// The value must end its line: `{"a":1} trailing text` is not JSON
	// output but a line of text that starts like it.
	n := int(dec.InputOffset())
	rest := data[n:]
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return 0, errors.New("text after the value")
	}
	return n, nil
}

// flatten returns an object as itself and an array as its objects.
func flatten(v json.RawMessage) []json.RawMessage {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return nil
	}
	switch t[0] {
	case '{':
		return []json.RawMessage{t}
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(t, &elems) != nil {
			return nil
		}
		var out []json.RawMessage
		for _, e := range elems {
			if e = bytes.TrimSpace(e); len(e) > 0 && e[0] == '{' {
				out = append(out, e)
			}
		}
		return out
	}
	return nil
}

// ParseOutput reads an agent's output in format. It never fails: what
// cannot be read becomes a warning, and an output with nothing of its
// format comes back with OK false (and LikelyFormat set when it is another
// format's JSON).
func ParseOutput(format, output string) *ParsedOutput {
	p := &ParsedOutput{Format: format}
	if !ReportsUsage(format) {
		return p
	}
	objs, values, warnings := jsonObjects(output)
	p.Warnings = warnings
	switch format {
	case FormatClaudeJSON, FormatClaudeStreamJSON:
		parseClaude(p, objs)
	case FormatCodexJSON:
		parseCodex(p, objs)
	case FormatGeminiJSON:
		parseGemini(p, objs)
	}
	if !p.OK {
		name := map[string]string{FormatClaudeJSON: "Claude Code JSON", FormatClaudeStreamJSON: "Claude Code JSON",
			FormatCodexJSON: "codex JSON events", FormatGeminiJSON: "Gemini CLI JSON"}[format]
		if likely := sniffFormat(objs, values); likely != "" && !sameCLI(likely, format) {
			p.LikelyFormat = likely
			p.Warnings = append(p.Warnings, fmt.Sprintf("the agent's output is not %s but looks like %s output: "+
				"set agent.output_format to %q; it is read as text and its usage is unknown", name, likely, likely))
		} else {
			p.Warnings = append(p.Warnings, "the agent's output has no "+name+"; it is read as text and its usage is unknown")
		}
	}
	if len(p.ToolUses) > maxToolUses {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d tool uses; only the first %d are recorded", len(p.ToolUses), maxToolUses))
		p.ToolUses = p.ToolUses[:maxToolUses]
	}
	return p
}

// sameCLI reports whether two formats are the same CLI's (claude's json and
// stream-json read the same objects).
func sameCLI(a, b string) bool {
	claude := func(f string) bool { return f == FormatClaudeJSON || f == FormatClaudeStreamJSON }
	return a == b || claude(a) && claude(b)
}

// sniffFormat names the format whose JSON the objects, read from values
// top-level JSON values, look like, or "". Claude's output is claude-json
// when it is one value (the result object, or --verbose's array) and
// claude-stream-json when it is a value per line.
func sniffFormat(objs []json.RawMessage, values int) string {
	score := map[string]int{}
	for _, raw := range objs {
		var o map[string]json.RawMessage
		if json.Unmarshal(raw, &o) != nil {
			continue
		}
		var typ string
		json.Unmarshal(o["type"], &typ)
		switch {
		case typ == tResult && (o["total_cost_usd"] != nil || o["num_turns"] != nil || o["modelUsage"] != nil):
			score[FormatClaudeJSON] += 3
		case (typ == tAssist || typ == tUser) && o["message"] != nil, typ == tSystem && o["session_id"] != nil:
			score[FormatClaudeStreamJSON]++
		case strings.HasPrefix(typ, "thread.") || strings.HasPrefix(typ, "turn.") || strings.HasPrefix(typ, "item."):
			score[FormatCodexJSON]++
		case o["msg"] != nil && o["id"] != nil:
			score[FormatCodexJSON]++
		case o["response"] != nil || o["stats"] != nil:
			score[FormatGeminiJSON] += 2
		}
	}
	if n := score[FormatClaudeJSON] + score[FormatClaudeStreamJSON]; n > 0 {
		if values <= 1 {
			score[FormatClaudeJSON], score[FormatClaudeStreamJSON] = n, 0
		} else {
			score[FormatClaudeJSON], score[FormatClaudeStreamJSON] = 0, n
		}
	}
	best, bestN := "", 0
	for _, f := range OutputFormats() {
		if score[f] > bestN {
			best, bestN = f, score[f]
		}
	}
	return best
}

// byModel returns the usage per model sorted by name, and their sum.
func byModel(m map[string]*AgentUsage) ([]AgentUsage, *AgentUsage) {
	if len(m) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	total := &AgentUsage{}
	out := make([]AgentUsage, 0, len(names))
	for _, n := range names {
		u := *m[n]
		u.Model = n
		out = append(out, u)
		total.add(u)
	}
	return out, total
}

func orStr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
