package agentcmd_test

import (
	"math"
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

// usage is what a recording's usage should read as.
type usage struct {
	in, cacheRead, cacheWrite, out, reasoning int64
	cost                                      float64 // the CLI's own; -1 when it reports none
}

func TestParseOutput(t *testing.T) {
	type want struct {
		ok             bool
		final          string // substring of FinalText
		session, model string
		usage          *usage           // nil: no usage
		byModel        map[string]usage // per-model usage, when the CLI splits it
		tools          []string         // tool names in order
		toolErrors     []string         // the error text each failed tool use keeps, in order
		err            string           // substring of Error
		warnings       bool
		likely         string
	}
	for _, tc := range []struct {
		name, format, file string
		cut                bool // the recording without its last line
		want               want
	}{
		{name: "a claude stream without its result sums every message's usage once, a message printed per block counted once", format: agentcmd.FormatClaudeStreamJSON,
			file: "claude-stream-json.jsonl", cut: true,
			want: want{ok: true, final: "Fixed add.go; the tests pass.", session: "7c1d2e3f-aaaa-4bbb-8ccc-123456789abc", model: "claude-sonnet-4-5-20250929",
				usage:   &usage{in: 1630, cacheRead: 1110, cacheWrite: 500, out: 90, cost: -1},
				byModel: map[string]usage{"claude-sonnet-4-5-20250929": {in: 1630, cacheRead: 1110, cacheWrite: 500, out: 90, cost: -1}},
				tools:   []string{"Bash", "Edit"}, toolErrors: []string{"--- FAIL: TestAdd"}, warnings: true}},
		{name: "the claude json result gives the result text, cost, tokens and the model from modelUsage", format: agentcmd.FormatClaudeJSON, file: "claude-json.json",
			want: want{ok: true, final: "<promise>COMPLETE</promise>", session: "f18f49de-5b8f-4261-99c4-dbbaa6ae0e24", model: "claude-sonnet-4-5-20250929",
				usage:   &usage{in: 8 + 192 + 17004, cacheRead: 17004, cacheWrite: 192, out: 320, cost: 0.0106452},
				byModel: map[string]usage{"claude-sonnet-4-5-20250929": {in: 17204, cacheRead: 17004, cacheWrite: 192, out: 320, cost: 0.0106452}}}},
		{name: "a pretty-printed claude json result is read whole", format: agentcmd.FormatClaudeJSON, file: "claude-json-pretty.json",
			want: want{ok: true, final: "nil check", session: "2b6f0c1e-8a4d-4c8e-9f31-5d7e2a9b0c14", model: "claude-opus-4-5-20251101",
				usage:   &usage{in: 52003, cacheRead: 40000, cacheWrite: 12000, out: 1500, cost: 0.132515},
				byModel: map[string]usage{"claude-opus-4-5-20251101": {in: 52003, cacheRead: 40000, cacheWrite: 12000, out: 1500, cost: 0.132515}}}},
		{name: "the json array of claude -p --output-format json --verbose gives the result, every tool use and the failed one's error", format: agentcmd.FormatClaudeJSON, file: "claude-json-verbose.json",
			want: want{ok: true, final: "nil check", session: "5e1a9c3d-7b2f-4d6e-8a0b-1c2d3e4f5a6b", model: "claude-opus-4-5-20251101",
				usage:   &usage{in: 52003, cacheRead: 40000, cacheWrite: 12000, out: 1500, cost: 0.132515},
				byModel: map[string]usage{"claude-opus-4-5-20251101": {in: 52003, cacheRead: 40000, cacheWrite: 12000, out: 1500, cost: 0.132515}},
				tools:   []string{"Bash", "Edit"}, toolErrors: []string{"nil pointer dereference"}}},
		{name: "update notices and warnings around the claude json result are skipped without losing its usage", format: agentcmd.FormatClaudeJSON, file: "claude-json-noise.txt",
			want: want{ok: true, final: "Renamed the flag", session: "9d8c7b6a-5f4e-4d3c-2b1a-0f9e8d7c6b5a", model: "claude-sonnet-4-5-20250929",
				usage:   &usage{in: 20500, cacheRead: 20000, out: 900, cost: 0.021},
				byModel: map[string]usage{"claude-sonnet-4-5-20250929": {in: 20500, cacheRead: 20000, out: 900, cost: 0.021}}}},
		{name: "every model of claude's modelUsage is attributed its own tokens and cost", format: agentcmd.FormatClaudeJSON, file: "claude-json-multimodel.json",
			want: want{ok: true, final: "Split the handler", session: "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f", model: "claude-opus-4-5-20251101",
				usage: &usage{in: 38010 + 2000, cacheRead: 30000, cacheWrite: 8000, out: 1200, cost: 0.09105},
				byModel: map[string]usage{"claude-opus-4-5-20251101": {in: 38010, cacheRead: 30000, cacheWrite: 8000, out: 900, cost: 0.08755},
					"claude-haiku-4-5-20251001": {in: 2000, out: 300, cost: 0.0035}}}},
		{name: "a claude error result is an error with its subtype", format: agentcmd.FormatClaudeJSON, file: "claude-json-error.json",
			want: want{ok: true, session: "0a4c6a53-8d3e-4c52-9d0b-0f4f2b1e9a11", usage: &usage{in: 1000, out: 200, cost: 0.05}, err: "error_max_turns"}},
		{name: "claude stream json gives tool uses with their results and the final result", format: agentcmd.FormatClaudeStreamJSON, file: "claude-stream-json.jsonl",
			want: want{ok: true, final: "Fixed add.go; the tests pass.", session: "7c1d2e3f-aaaa-4bbb-8ccc-123456789abc", model: "claude-sonnet-4-5-20250929",
				usage: &usage{in: 20 + 500 + 1110, cacheRead: 1110, cacheWrite: 500, out: 90, cost: 0.0123},
				tools: []string{"Bash", "Edit"}, toolErrors: []string{"--- FAIL: TestAdd"}}},
		{name: "a cut-short claude stream falls back to the last message and every message's usage once, with a warning", format: agentcmd.FormatClaudeStreamJSON, file: "claude-stream-json-truncated.jsonl",
			want: want{ok: true, final: "<promise>BLOCKED</promise>", session: "s-1", model: "claude-sonnet-4-5-20250929", usage: &usage{in: 100, out: 50, cost: -1},
				byModel: map[string]usage{"claude-sonnet-4-5-20250929": {in: 100, out: 50, cost: -1}}, warnings: true}},
		{name: "output that is no json degrades to text with a warning", format: agentcmd.FormatClaudeJSON, file: "claude-json-garbage.txt",
			want: want{ok: false, warnings: true}},
		{name: "codex's json events give the last agent message, the turn's usage with its reasoning, and every command, change and tool call", format: agentcmd.FormatCodexJSON, file: "codex-json.jsonl",
			want: want{ok: true, final: "Fixed add.go so TestAdd passes.", session: "0199a213-81c0-7800-8aa1-bbab2a035a53",
				usage: &usage{in: 120000, cacheRead: 100000, out: 3000, reasoning: 1800, cost: -1},
				tools: []string{"shell", "docs/search", "file_change", "shell"}, toolErrors: []string{"want 5", "connection refused"}}},
		{name: "a failed codex turn is an error with its message", format: agentcmd.FormatCodexJSON, file: "codex-json-failed.jsonl",
			want: want{ok: true, session: "0199a213-81c0-7800-8aa1-bbab2a035a54", err: "rate limit reached"}},
		{name: "codex's older id/msg envelope gives the model, each request's tokens once, the commands and the last message", format: agentcmd.FormatCodexJSON, file: "codex-json-legacy.jsonl",
			want: want{ok: true, final: "the tests pass", model: "gpt-5-codex",
				usage: &usage{in: 81000, cacheRead: 70000, out: 1500, reasoning: 900, cost: -1},
				tools: []string{"shell", "shell"}, toolErrors: []string{"FAIL"}}},
		{name: "gemini's json gives the response and every model's tokens, thoughts as reasoning", format: agentcmd.FormatGeminiJSON, file: "gemini-json.json",
			want: want{ok: true, final: "install section", session: "c0ffee00-1234-4abc-9def-0123456789ab", model: "gemini-2.5-pro",
				usage: &usage{in: 54000, cacheRead: 18000, out: 2750, reasoning: 1400, cost: -1},
				byModel: map[string]usage{"gemini-2.5-pro": {in: 48000, cacheRead: 18000, out: 2600, reasoning: 1400, cost: -1},
					"gemini-2.5-flash": {in: 6000, out: 150, cost: -1}}}},
		{name: "a gemini error is an error with its type and message", format: agentcmd.FormatGeminiJSON, file: "gemini-json-error.json",
			want: want{ok: true, session: "c0ffee00-1234-4abc-9def-0123456789ac", err: "FatalAuthenticationError: Please set an Auth method"}},
		{name: "claude's json read as codex json names claude-json", format: agentcmd.FormatCodexJSON, file: "claude-json-pretty.json",
			want: want{ok: false, warnings: true, likely: agentcmd.FormatClaudeJSON}},
		{name: "claude's stream read as codex json names claude-stream-json", format: agentcmd.FormatCodexJSON, file: "claude-stream-json.jsonl",
			want: want{ok: false, warnings: true, likely: agentcmd.FormatClaudeStreamJSON}},
		{name: "codex's events read as claude json name codex-json", format: agentcmd.FormatClaudeJSON, file: "codex-json.jsonl",
			want: want{ok: false, warnings: true, likely: agentcmd.FormatCodexJSON}},
		{name: "codex's older envelope read as claude stream json names codex-json", format: agentcmd.FormatClaudeStreamJSON, file: "codex-json-legacy.jsonl",
			want: want{ok: false, warnings: true, likely: agentcmd.FormatCodexJSON}},
		{name: "gemini's json read as claude json names gemini-json", format: agentcmd.FormatClaudeJSON, file: "gemini-json.json",
			want: want{ok: false, warnings: true, likely: agentcmd.FormatGeminiJSON}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := fixture(t, tc.file)
			if tc.cut {
				out = out[:strings.LastIndex(strings.TrimSuffix(out, "\n"), "\n")+1]
			}
			p := agentcmd.ParseOutput(tc.format, out)
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
			if (p.Usage != nil) != (w.usage != nil) {
				t.Fatalf("usage = %+v, want %+v", p.Usage, w.usage)
			}
			if p.Usage != nil {
				checkUsage(t, "usage", *p.Usage, *w.usage)
			}
			if len(p.ByModel) != len(w.byModel) {
				t.Errorf("by model %+v, want %v", p.ByModel, w.byModel)
			}
			for _, u := range p.ByModel {
				want, ok := w.byModel[u.Model]
				if !ok {
					t.Errorf("model %q attributed, want only %v", u.Model, w.byModel)
					continue
				}
				checkUsage(t, u.Model, u, want)
			}
			var names, errTexts []string
			for _, tu := range p.ToolUses {
				names = append(names, tu.Name)
				if tu.IsError {
					errTexts = append(errTexts, tu.Output)
				}
			}
			if strings.Join(names, ",") != strings.Join(w.tools, ",") || len(errTexts) != len(w.toolErrors) {
				t.Errorf("tools = %v (errors %q), want %v (%q)", names, errTexts, w.tools, w.toolErrors)
			}
			for i := range min(len(errTexts), len(w.toolErrors)) {
				if !strings.Contains(errTexts[i], w.toolErrors[i]) {
					t.Errorf("failed tool use %d keeps %q, want its error %q", i, errTexts[i], w.toolErrors[i])
				}
			}
			if (w.err == "") != (p.Error == "") || !strings.Contains(p.Error, w.err) {
				t.Errorf("Error = %q, want %q", p.Error, w.err)
			}
			if (len(p.Warnings) > 0) != w.warnings {
				t.Errorf("warnings = %q, want some: %v", p.Warnings, w.warnings)
			}
			if p.LikelyFormat != w.likely {
				t.Errorf("likely format %q, want %q", p.LikelyFormat, w.likely)
			}
			if w.likely != "" && !strings.Contains(strings.Join(p.Warnings, " "), w.likely) {
				t.Errorf("the warnings do not name %s: %q", w.likely, p.Warnings)
			}
		})
	}
}

func checkUsage(t *testing.T, what string, got agentcmd.AgentUsage, want usage) {
	t.Helper()
	if got.InputTokens != want.in || got.CacheReadTokens != want.cacheRead || got.CacheWriteTokens != want.cacheWrite ||
		got.OutputTokens != want.out || got.ReasoningTokens != want.reasoning {
		t.Errorf("%s tokens %+v, want in %d (cache read %d, write %d) out %d (reasoning %d)", what, got, want.in, want.cacheRead, want.cacheWrite, want.out, want.reasoning)
	}
	if want.cost < 0 {
		if got.HasCost {
			t.Errorf("%s has a cost %v, want none reported", what, got.CostUSD)
		}
	} else if !got.HasCost || math.Abs(got.CostUSD-want.cost) > 1e-12 {
		t.Errorf("%s cost %v (%v), want %v", what, got.CostUSD, got.HasCost, want.cost)
	}
}

func TestValidJSONRaisesNoWarning(t *testing.T) {
	for format, files := range map[string][]string{
		agentcmd.FormatClaudeJSON:       {"claude-json.json", "claude-json-pretty.json", "claude-json-verbose.json", "claude-json-noise.txt", "claude-json-multimodel.json", "claude-json-error.json"},
		agentcmd.FormatClaudeStreamJSON: {"claude-stream-json.jsonl", "claude-json-verbose.json"},
		agentcmd.FormatCodexJSON:        {"codex-json.jsonl", "codex-json-failed.jsonl", "codex-json-legacy.jsonl"},
		agentcmd.FormatGeminiJSON:       {"gemini-json.json", "gemini-json-error.json"},
	} {
		for _, f := range files {
			if p := agentcmd.ParseOutput(format, fixture(t, f)); !p.OK || len(p.Warnings) > 0 {
				t.Errorf("%s read as %s: ok %v, warnings %q", f, format, p.OK, p.Warnings)
			}
		}
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
