package agentcmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"homework/engine/agentcmd"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseOutput(t *testing.T) {
	type want struct {
		ok                bool
		final             string // substring of FinalText
		session, model    string
		in, out, cached   int64
		cost              float64
		hasCost, hasUsage bool
		tools             []string // tool names in order
		toolErrors        int
		err               string // substring of Error
		warnings          bool
	}
	for _, tc := range []struct {
		name, format, file string
		prefix             string // stderr lines before the output
		want               want
	}{
		{name: "the claude json result gives the result text, cost and tokens", format: agentcmd.FormatClaudeJSON, file: "claude-json.json",
			want: want{ok: true, final: "<promise>COMPLETE</promise>", session: "f18f49de-5b8f-4261-99c4-dbbaa6ae0e24", model: "claude-sonnet-4-5-20250929",
				in: 8 + 192 + 17004, out: 320, cached: 17004, cost: 0.3464, hasCost: true, hasUsage: true}},
		{name: "stderr lines around the claude json result are skipped", format: agentcmd.FormatClaudeJSON, file: "claude-json.json",
			prefix: "warning: something on stderr\n",
			want: want{ok: true, final: "Fixed the failing test", session: "f18f49de-5b8f-4261-99c4-dbbaa6ae0e24", model: "claude-sonnet-4-5-20250929",
				in: 17204, out: 320, cached: 17004, cost: 0.3464, hasCost: true, hasUsage: true}},
		{name: "a claude error result is an error with its subtype", format: agentcmd.FormatClaudeJSON, file: "claude-json-error.json",
			want: want{ok: true, session: "0a4c6a53-8d3e-4c52-9d0b-0f4f2b1e9a11", in: 1000, out: 200, cost: 0.05, hasCost: true, hasUsage: true, err: "error_max_turns"}},
		{name: "claude stream json gives tool uses with their results and the final result", format: agentcmd.FormatClaudeStreamJSON, file: "claude-stream-json.jsonl",
			want: want{ok: true, final: "Fixed add.go; the tests pass.", session: "7c1d2e3f-aaaa-4bbb-8ccc-123456789abc", model: "claude-sonnet-4-5-20250929",
				in: 20 + 500 + 1110, out: 90, cached: 1110, cost: 0.0123, hasCost: true, hasUsage: true, tools: []string{"Bash", "Edit"}, toolErrors: 1}},
		{name: "a cut-short claude stream falls back to the last message and the messages' usage, with a warning", format: agentcmd.FormatClaudeStreamJSON, file: "claude-stream-json-truncated.jsonl",
			want: want{ok: true, final: "<promise>BLOCKED</promise>", session: "s-1", model: "claude-sonnet-4-5-20250929", in: 100, out: 50, hasUsage: true, warnings: true}},
		{name: "output that is not claude json degrades to text with a warning", format: agentcmd.FormatClaudeJSON, file: "claude-json-garbage.txt",
			want: want{ok: false, warnings: true}},
		{name: "codex json gives the last agent message, the turn usage and the commands", format: agentcmd.FormatCodexJSON, file: "codex-json.jsonl",
			want: want{ok: true, final: "Fixed add.go so TestAdd passes.", session: "0199a213-81c0-7800-8aa1-bbab2a035a53",
				in: 24763, out: 122, cached: 24448, hasUsage: true, tools: []string{"shell", "file_change"}, toolErrors: 1}},
		{name: "a failed codex turn is an error with its message", format: agentcmd.FormatCodexJSON, file: "codex-json-failed.jsonl",
			want: want{ok: true, session: "0199a213-81c0-7800-8aa1-bbab2a035a54", err: "rate limit reached"}},
		{name: "claude json read as codex json degrades to text", format: agentcmd.FormatCodexJSON, file: "claude-json-garbage.txt",
			want: want{ok: false, warnings: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := agentcmd.ParseOutput(tc.format, tc.prefix+fixture(t, tc.file))
			w := tc.want
			if p.OK != w.ok {
				t.Fatalf("OK = %v, want %v (warnings %q)", p.OK, w.ok, p.Warnings)
			}
			if !strings.Contains(p.FinalText, w.final) {
				t.Errorf("FinalText = %q, want it to contain %q", p.FinalText, w.final)
			}
			if p.SessionID != w.session || p.Model != w.model {
				t.Errorf("session, model = %q, %q; want %q, %q", p.SessionID, p.Model, w.session, w.model)
			}
			if (p.Usage != nil) != w.hasUsage {
				t.Fatalf("usage = %+v, want present %v", p.Usage, w.hasUsage)
			}
			if p.Usage != nil {
				u := p.Usage
				if u.InputTokens != w.in || u.OutputTokens != w.out || u.CachedTokens != w.cached || u.HasCost != w.hasCost || u.CostUSD != w.cost {
					t.Errorf("usage = %+v, want in %d out %d cached %d cost %v (%v)", *u, w.in, w.out, w.cached, w.cost, w.hasCost)
				}
			}
			var names []string
			errs := 0
			for _, tu := range p.ToolUses {
				names = append(names, tu.Name)
				if tu.IsError {
					errs++
				}
			}
			if strings.Join(names, ",") != strings.Join(w.tools, ",") || errs != w.toolErrors {
				t.Errorf("tools = %v (%d errors), want %v (%d)", names, errs, w.tools, w.toolErrors)
			}
			if (w.err == "") != (p.Error == "") || !strings.Contains(p.Error, w.err) {
				t.Errorf("Error = %q, want %q", p.Error, w.err)
			}
			if (len(p.Warnings) > 0) != w.warnings {
				t.Errorf("warnings = %q, want some: %v", p.Warnings, w.warnings)
			}
		})
	}
}

func TestParseOutputNeverPanics(t *testing.T) {
	inputs := []string{"", "{", "{}", `{"type":"result","result":5}`, `{"type":"assistant","message":{"content":"x"}}`,
		`{"type":"item.completed","item":null}`, `{"type":"turn.completed","usage":{"input_tokens":"x"}}`, strings.Repeat("{\"a\":", 1000)}
	for _, f := range agentcmd.OutputFormats() {
		for _, in := range inputs {
			p := agentcmd.ParseOutput(f, in)
			if p == nil {
				t.Fatalf("ParseOutput(%s, %q) = nil", f, in)
			}
		}
	}
}
