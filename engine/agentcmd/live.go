package agentcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"

	"homework/engine/spec"
)

const (
	liveLineBuffer = 256
	maxLiveLine    = 1 << 20
)

// liveTools emits tool_call and tool_result events for a streaming output
// format (claude-stream-json, codex-json) while the agent runs. Lines come
// from the output reader through a bounded channel and are parsed on their
// own goroutine, so a slow event store never slows the agent; a line that
// does not fit is skipped here and its tool use is emitted after the
// iteration instead. Tool uses are keyed by their id: those without one
// are left to the end of the iteration too.
type liveTools struct {
	format  string
	lines   chan string
	partial []byte
	long    bool // the current line outgrew maxLiveLine

	mu         sync.Mutex
	sentCall   map[string]bool
	sentResult map[string]bool
	names      map[string]string // claude tool_use id → tool name
	args       map[string]string // older codex call_id → its command
}

// newLiveTools returns nil for formats that are not streamed line by line.
func newLiveTools(format string) *liveTools {
	if format != FormatClaudeStreamJSON && format != FormatCodexJSON {
		return nil
	}
	return &liveTools{format: format, lines: make(chan string, liveLineBuffer),
		sentCall: map[string]bool{}, sentResult: map[string]bool{}, names: map[string]string{}, args: map[string]string{}}
}

// write takes a chunk of output; it never blocks.
func (l *liveTools) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !l.long {
				l.partial = append(l.partial, p...)
				if len(l.partial) > maxLiveLine {
					l.partial, l.long = nil, true
				}
			}
			return
		}
		if !l.long {
			l.partial = append(l.partial, p[:i]...)
			select {
			case l.lines <- string(l.partial):
			default: // full: left to the end of the iteration
			}
		}
		l.partial, l.long = l.partial[:0], false
		p = p[i+1:]
	}
}

// run emits the events of each line until the lines channel is closed.
func (l *liveTools) run(ctx context.Context, h spec.Host, iteration int) {
	for line := range l.lines {
		for _, ev := range l.events(line) {
			emitTool(ctx, h, iteration, ev.use, ev.result)
		}
	}
}

// liveEvent is a tool use's call (result false) or its result.
type liveEvent struct {
	use    ToolUse
	result bool
}

// events returns the tool events one line holds, marking them sent.
func (l *liveTools) events(line string) []liveEvent {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []liveEvent
	call := func(tu ToolUse) {
		if tu.ID == "" || l.sentCall[tu.ID] {
			return
		}
		l.sentCall[tu.ID] = true
		out = append(out, liveEvent{use: tu})
	}
	result := func(tu ToolUse) {
		if tu.ID == "" || l.sentResult[tu.ID] || !l.sentCall[tu.ID] {
			return
		}
		l.sentResult[tu.ID] = true
		out = append(out, liveEvent{use: tu, result: true})
	}
	switch l.format {
	case FormatClaudeStreamJSON:
		var cl claudeLine
		if decodeClaudeLine([]byte(line), &cl) != nil || cl.Message == nil {
			return nil
		}
		var blocks []claudeBlock
		if json.Unmarshal(cl.Message.Content, &blocks) != nil {
			return nil
		}
		for _, b := range blocks {
			switch {
			case cl.Type == tAssist && b.Type == bToolUse:
				l.names[b.ID] = b.Name
				call(ToolUse{ID: b.ID, Name: b.Name, Arguments: truncate(string(b.Input), maxToolArgBytes)})
			case cl.Type == tUser && b.Type == bToolRes:
				result(ToolUse{ID: b.ToolUseID, Name: l.names[b.ToolUseID], Output: truncate(blockText(b.Content), maxToolOutBytes), IsError: b.IsError})
			}
		}
	case FormatCodexJSON:
		var cl codexLine
		if json.Unmarshal([]byte(line), &cl) != nil {
			return nil
		}
		if m := cl.Msg; m != nil && cl.ID != nil {
			// The older envelope: a command's begin and end.
			tu := ToolUse{ID: m.CallID, Name: "shell", Arguments: truncate(commandText(m.Command), maxToolArgBytes)}
			switch m.Type {
			case mExecBegin:
				call(tu)
			case mExecEnd:
				if tu.Arguments == "" {
					tu.Arguments = l.args[m.CallID]
				}
				call(tu)
				tu.Output = truncate(orStr(m.AggregatedOutput, strings.TrimSpace(m.Stdout+"\n"+m.Stderr)), maxToolOutBytes)
				tu.IsError = m.ExitCode != nil && *m.ExitCode != 0
				result(tu)
			}
			if m.Type == mExecBegin {
				l.args[m.CallID] = tu.Arguments
			}
			return out
		}
		if cl.Item == nil {
			return nil
		}
		switch cl.Type {
		case "item.started", tItemCompleted:
			tu, ok := codexToolUse(cl.Item)
			if !ok {
				return nil
			}
			call(tu)
			if cl.Type == tItemCompleted && tu.HasResult {
				result(tu)
			}
		}
	}
	return out
}

// sent reports whether the tool use's call and result events went out live.
func (l *liveTools) sent(id string) (call, result bool) {
	if l == nil || id == "" {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sentCall[id], l.sentResult[id]
}

// emitTool emits a tool_call event of the agent (or tool_result, for the
// result) and adds the same to the iteration's transcript, so the run page's
// log shows what the agent did between the lines of its raw output.
func emitTool(ctx context.Context, h spec.Host, iteration int, tu ToolUse, result bool) {
	if !result {
		emitWith(ctx, h, spec.EventToolCall, spec.ToolCallData{Iteration: iteration, Tool: tu.Name, CallID: tu.ID,
			Arguments: tu.Arguments, Role: RoleAgent})
	} else {
		emitWith(ctx, h, spec.EventToolResult, spec.ToolResultData{Iteration: iteration, Tool: tu.Name, CallID: tu.ID,
			OK: !tu.IsError, Result: tu.Output, Role: RoleAgent})
	}
	if h == nil {
		return
	}
	e := spec.TranscriptEntry{Name: tu.Name, Role: RoleAgent, Kind: spec.TranscriptToolCall, Text: tu.Arguments}
	e.Data, _ = json.Marshal(map[string]any{"call_id": tu.ID})
	if result {
		e.Kind, e.Text = spec.TranscriptToolResult, tu.Output
		e.Data, _ = json.Marshal(map[string]any{"call_id": tu.ID, "ok": !tu.IsError})
	}
	spec.Transcribe(ctx, h, e)
}
