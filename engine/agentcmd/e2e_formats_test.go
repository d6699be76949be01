package agentcmd_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"homework/engine/agentcmd"
	"homework/engine/llm"
	llmprices "homework/engine/llm/prices"
	"homework/engine/spec"
)

// fakeCLI writes a fake agent CLI that reads its prompt, records its
// arguments (one line per iteration) in $STATE/args and prints the fixture
// with every @ITER@ replaced by the iteration number. It returns the script
// and its state directory.
func fakeCLI(t *testing.T, fixtureName string) (string, string) {
	t.Helper()
	script, state := agent(t, `cat >/dev/null
echo "$*" >>"$STATE/args"
echo "some log line on stderr" >&2
sed "s/@ITER@/$HOMEWORK_ITERATION/g" "$STATE/fixture"`)
	if err := os.WriteFile(filepath.Join(state, "fixture"), []byte(fixture(t, fixtureName)), 0o644); err != nil {
		t.Fatal(err)
	}
	return script, state
}

// fakeCLIOutput is fakeCLI with the fixture given inline.
func fakeCLIOutput(t *testing.T, out string) (string, string) {
	t.Helper()
	script, state := agent(t, `cat >/dev/null
echo "$*" >>"$STATE/args"
sed "s/@ITER@/$HOMEWORK_ITERATION/g" "$STATE/fixture"`)
	if err := os.WriteFile(filepath.Join(state, "fixture"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return script, state
}

type llmCallEvent struct {
	Iteration        int     `json:"iteration"`
	Role             string  `json:"role"`
	Model            string  `json:"model"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	Priced           bool    `json:"priced"`
}

// pricesUsage is a codex turn's usage for the price table.
func pricesUsage(in, cached, out, reasoning int64) llmprices.Usage {
	return llmprices.Usage{Input: in, CacheRead: cached, Output: out, Reasoning: reasoning}
}

type toolCallEvent struct {
	Iteration int    `json:"iteration"`
	Tool      string `json:"tool"`
	CallID    string `json:"call_id"`
	Arguments string `json:"arguments"`
	Role      string `json:"role"`
}

func TestStructuredAgentOutput(t *testing.T) {
	t.Run("a claude stream-json agent's tokens, cost and tool uses are recorded and its result's promise completes the run", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("claude-stream")
		script, _ := fakeCLI(t, "claude-stream-json.jsonl")
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeStreamJSON
		run := h.create(cfg)
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted {
			t.Fatalf("run is %s (%+v), want completed\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		m := run.Metrics
		if m.TokensTotal != 1630+90 || m.PromptTokens != 1630 || m.CompletionTokens != 90 || math.Abs(m.CostTotalUSD-0.0123) > 1e-9 || m.UnpricedCalls != 0 {
			t.Errorf("run metrics %+v; want 1630+90 tokens and $0.0123", m)
		}
		if m.ToolCallsTotal != 3 {
			t.Errorf("tool calls %d, want 3 (the agent run and its two tool uses)", m.ToolCallsTotal)
		}
		evs := h.requireBasics(run.ID)
		calls := ofType(evs, "llm_call")
		if len(calls) != 1 {
			t.Fatalf("%d llm_call events, want 1", len(calls))
		}
		if c := decode[llmCallEvent](t, calls[0].Data); c.Role != agentcmd.RoleAgent || c.Model != "claude-sonnet-4-5-20250929" || !c.Priced || c.PromptTokens != 1630 {
			t.Errorf("llm_call %+v", c)
		}
		if len(ofType(evs, "iteration_cost_update")) != 1 {
			t.Errorf("no live cost update:\n%s", h.eventDump(run.ID))
		}
		tcs := ofType(evs, "tool_call")
		if len(tcs) != 2 {
			t.Fatalf("%d tool_call events, want 2", len(tcs))
		}
		if tc := decode[toolCallEvent](t, tcs[0].Data); tc.Tool != "Bash" || tc.CallID != "toolu_01" || !strings.Contains(tc.Arguments, "go test ./...") || tc.Iteration != 1 {
			t.Errorf("first tool_call %+v", tc)
		}
		if n := len(ofType(evs, "tool_result")); n != 2 {
			t.Errorf("%d tool_result events, want 2", n)
		}
		its := h.iterations(run.ID)
		if its[0].Metrics.CostTotalUSD == 0 || its[0].Metrics.TokensTotal != 1720 {
			t.Errorf("iteration metrics %+v", its[0].Metrics)
		}
		// The tool uses are in the iteration's transcript too, beside the
		// raw output.
		tr, err := h.db.FindTranscript(h.ctx, h.admin.ID, run.ID, 1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var toolCalls, toolResults int
		for _, l := range tr.Lines {
			switch l.Kind {
			case spec.TranscriptToolCall:
				toolCalls++
				if toolCalls == 1 && (l.Name != "Bash" || !strings.Contains(l.Text, "go test ./...")) {
					t.Errorf("first transcribed tool call %+v", l)
				}
			case spec.TranscriptToolResult:
				toolResults++
			}
		}
		if toolCalls != 2 || toolResults != 2 {
			t.Errorf("transcript has %d tool calls and %d results, want 2 and 2", toolCalls, toolResults)
		}
	})

	t.Run("a promise that appears only in a tool result, not in the agent's result, does not complete the run", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("claude-echo")
		out := `{"type":"system","subtype":"init","session_id":"s-echo","model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"PROMPT.md"}}],"usage":{"input_tokens":10,"output_tokens":5}}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"When done print <promise>COMPLETE</promise>"}]}}
{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"Read the prompt; iteration @ITER@ still has work to do.","session_id":"s-echo","total_cost_usd":0.001,"usage":{"input_tokens":10,"output_tokens":5}}
`
		script, _ := fakeCLIOutput(t, out)
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeStreamJSON
		cfg.Budgets.MaxIterations = 2
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopMaxIterations {
			t.Fatalf("run is %s (%+v), want stopped at max_iterations\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		its := h.iterations(run.ID)
		if !strings.Contains(its[0].Summary, "still has work to do") {
			t.Errorf("the summary is not the agent's result: %q", its[0].Summary)
		}
	})

	t.Run("a cost budget stops a claude-json agent once its reported spend reaches it", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("claude-cost")
		out := `{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Worked on iteration @ITER@.","session_id":"s-cost","total_cost_usd":0.4,"usage":{"input_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":100}}` + "\n"
		script, _ := fakeCLIOutput(t, out)
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeJSON
		cfg.Budgets.MaxCostUSD = 1.0
		cfg.Budgets.OnForecast = spec.ForecastOff // the backstop: stop once passed
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopBudgetCost {
			t.Fatalf("run is %s (%+v), want stopped for budget_cost\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		if run.Metrics.Iterations != 3 || math.Abs(run.Metrics.CostTotalUSD-1.2) > 1e-9 || run.Metrics.TokensTotal != 3300 {
			t.Errorf("metrics %+v; want 3 iterations, $1.20 and 3300 tokens", run.Metrics)
		}
		evs := h.requireBasics(run.ID)
		var last map[string]any
		for _, e := range ofType(evs, "iteration_cost_update") {
			last = decode[map[string]any](t, e.Data)
		}
		if last == nil || math.Abs(last["cost_total_usd"].(float64)-1.2) > 1e-9 {
			t.Errorf("last iteration_cost_update %v", last)
		}
	})

	t.Run("a claude-json agent's run stops before the iteration its forecast says would pass the cost budget", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("claude-forecast")
		out := `{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Worked on iteration @ITER@.","session_id":"s-cost","total_cost_usd":0.4,"usage":{"input_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":100}}` + "\n"
		script, _ := fakeCLIOutput(t, out)
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeJSON
		cfg.Budgets.MaxCostUSD = 1.0 // on_forecast: stop, the default of an auto run
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopBudgetCost {
			t.Fatalf("run is %s (%+v), want stopped for budget_cost\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		// Two iterations spent $0.80; the third, forecast at $0.40, would
		// have passed $1.00 and was not started.
		if run.Metrics.Iterations != 2 || math.Abs(run.Metrics.CostTotalUSD-0.8) > 1e-9 {
			t.Errorf("metrics %+v; want 2 iterations and $0.80, within the limit", run.Metrics)
		}
		var ev spec.Evidence
		if err := json.Unmarshal(run.StopReason.Evidence, &ev); err != nil || ev.Forecast == nil ||
			ev.Forecast.Spent != 0.8 || ev.Forecast.Forecast != 0.4 || ev.Forecast.Limit != 1 {
			t.Errorf("stop evidence %s (%v), want spent 0.8, forecast 0.4, limit 1", run.StopReason.Evidence, err)
		}
		if !strings.Contains(run.StopReason.Detail, "$0.4") || !strings.Contains(run.StopReason.Detail, "$1.00") {
			t.Errorf("stop detail %q names no numbers", run.StopReason.Detail)
		}
	})

	t.Run("codex tokens are priced from the price table by the run's model and a failed turn is an iteration error", func(t *testing.T) {
		prices := llm.DefaultPrices()
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: prices}})
		wd := h.workdir("codex")
		script, state := fakeCLI(t, "codex-json.jsonl")
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatCodexJSON
		cfg.Model = "gpt-5"
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusCompleted {
			t.Fatalf("run is %s (%+v), want completed\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		want, _ := prices.Cost("gpt-5", pricesUsage(120000, 100000, 3000, 1800))
		if m := run.Metrics; m.TokensTotal != 123000 || math.Abs(m.CostTotalUSD-want) > 1e-9 || m.UnpricedCalls != 0 ||
			m.CachedTokens != 100000 || m.ReasoningTokens != 1800 {
			t.Errorf("metrics %+v, want $%v", m, want)
		}
		evs := h.requireBasics(run.ID)
		if tcs := ofType(evs, "tool_call"); len(tcs) != 4 || decode[toolCallEvent](t, tcs[0].Data).Tool != "shell" {
			t.Errorf("tool calls:\n%s", h.eventDump(run.ID))
		}

		// The same agent failing its turn.
		if err := os.WriteFile(filepath.Join(state, "fixture"), []byte(fixture(t, "codex-json-failed.jsonl")), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.Budgets.MaxIterations = 2
		run = h.settled(h.create(cfg).ID)
		its := h.iterations(run.ID)
		if len(its) == 0 || its[0].Status != spec.IterFailed || !strings.Contains(its[0].Error, "rate limit reached") {
			t.Fatalf("iterations %+v; want a failed iteration quoting the turn's error\n%s", its, h.eventDump(run.ID))
		}
		if run.Metrics.UnpricedCalls != 0 || run.Metrics.TokensTotal != 0 {
			t.Errorf("a failed turn without usage recorded usage: %+v", run.Metrics)
		}
	})

	t.Run("an unknown model's tokens are counted but unpriced", func(t *testing.T) {
		prices := llm.DefaultPrices()
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: prices}})
		wd := h.workdir("codex-unpriced")
		script, _ := fakeCLI(t, "codex-json.jsonl")
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatCodexJSON
		run := h.settled(h.create(cfg).ID)
		if m := run.Metrics; m.TokensTotal != 123000 || m.CostTotalUSD != 0 || m.UnpricedCalls != 1 {
			t.Errorf("metrics %+v; want the tokens, no cost and one unpriced call", m)
		}
	})

	t.Run("malformed JSON output degrades to text with a warning event and the run carries on", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("garbage")
		script, _ := fakeCLIOutput(t, "Error: invalid API key @ITER@\n{\"type\":\"result\",\"result\":\n")
		cfg := commandRun(script, wd)
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeJSON
		cfg.Budgets.MaxIterations = 2
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopMaxIterations {
			t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		evs := h.requireBasics(run.ID)
		ws := ofType(evs, spec.EventAgentOutputWarning)
		if len(ws) != 2 {
			t.Fatalf("%d warning events, want 2\n%s", len(ws), h.eventDump(run.ID))
		}
		if w := decode[map[string]any](t, ws[0].Data); w["degraded"] != true || !strings.Contains(string(ws[0].Data), "does not parse") {
			t.Errorf("warning %s", ws[0].Data)
		}
		if its := h.iterations(run.ID); !strings.Contains(its[0].Summary, "invalid API key") {
			t.Errorf("the text fallback lost the output: %q", its[0].Summary)
		}
	})

	t.Run("with agent.resume the next iteration continues the session the agent reported", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		for _, tc := range []struct {
			format, fixture, want string
		}{
			{agentcmd.FormatClaudeJSON, "claude-json-error.json", "-p --resume 0a4c6a53-8d3e-4c52-9d0b-0f4f2b1e9a11"},
			{agentcmd.FormatCodexJSON, "codex-json-failed.jsonl", "exec --json resume 0199a213-81c0-7800-8aa1-bbab2a035a54 -"},
		} {
			wd := h.workdir("resume-" + tc.format)
			script, state := fakeCLI(t, tc.fixture)
			cfg := commandRun(script, wd)
			cfg.Agent.OutputFormat = tc.format
			cfg.Agent.Resume = true
			if tc.format == agentcmd.FormatCodexJSON {
				cfg.Agent.Argv = append(cfg.Agent.Argv, "exec", "--json", "-")
			} else {
				cfg.Agent.Argv = append(cfg.Agent.Argv, "-p")
			}
			cfg.Budgets.MaxIterations = 2
			run := h.settled(h.create(cfg).ID)
			args := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(state, "args"))), "\n")
			if len(args) != 2 {
				t.Fatalf("%s: %d iterations ran, want 2 (%s)\n%s", tc.format, len(args), run.Status, h.eventDump(run.ID))
			}
			if strings.Contains(args[0], "resume") {
				t.Errorf("%s: the first iteration resumed: %q", tc.format, args[0])
			}
			if args[1] != tc.want {
				t.Errorf("%s: second iteration's arguments %q, want %q", tc.format, args[1], tc.want)
			}
		}
	})
}

func TestAgentPresetsAndFormatsAtCreation(t *testing.T) {
	h := newE2E(t, e2eConfig{})
	wd := h.workdir("presets")
	t.Run("a preset fills in the argv and output format", func(t *testing.T) {
		cfg := spec.Config{Objective: "x", Executor: spec.ExecutorCommand, Agent: &spec.Agent{Preset: agentcmd.PresetClaude, Workdir: wd}}
		run := h.in(t).create(cfg)
		got := decode[spec.Config](t, run.Config)
		if got.Agent.OutputFormat != agentcmd.FormatClaudeStreamJSON || len(got.Agent.Argv) == 0 || got.Agent.Argv[0] != "claude" {
			t.Errorf("stored agent %+v", got.Agent)
		}
		h.eng.Cancel(h.ctx, h.admin.ID, run.ID)
		h.in(t).settled(run.ID)
	})
	t.Run("an argv the person wrote is kept with a preset", func(t *testing.T) {
		cfg := spec.Config{Objective: "x", Executor: spec.ExecutorCommand, Agent: &spec.Agent{Preset: agentcmd.PresetCodex, Argv: []string{"codex", "exec", "--json", "-m", "o3", "-"}, Workdir: wd}}
		run := h.in(t).create(cfg)
		got := decode[spec.Config](t, run.Config)
		if strings.Join(got.Agent.Argv, " ") != "codex exec --json -m o3 -" || got.Agent.OutputFormat != agentcmd.FormatCodexJSON {
			t.Errorf("stored agent %+v", got.Agent)
		}
		h.eng.Cancel(h.ctx, h.admin.ID, run.ID)
		h.in(t).settled(run.ID)
	})
	for _, tc := range []struct {
		name  string
		agent spec.Agent
		field string
	}{
		{"an unknown preset is refused", spec.Agent{Preset: "cursor", Workdir: wd}, "agent.preset"},
		{"an unknown output format is refused", spec.Agent{Argv: []string{"x"}, OutputFormat: "xml", Workdir: wd}, "agent.output_format"},
		{"resume without a session-reporting format is refused", spec.Agent{Argv: []string{"x"}, Resume: true, Workdir: wd}, "agent.resume"},
		{"the custom preset needs an argv", spec.Agent{Preset: agentcmd.PresetCustom, Workdir: wd}, "agent.argv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.agent
			_, err := h.eng.CreateRun(h.ctx, h.admin, spec.Config{Objective: "x", Executor: spec.ExecutorCommand, Agent: &a})
			var de *spec.Error
			if !errors.As(err, &de) || de.Code != spec.EINVALID || de.Field != tc.field {
				t.Errorf("err = %v, want EINVALID on %s", err, tc.field)
			}
		})
	}
}

func TestToolUsesStreamLive(t *testing.T) {
	for _, tc := range []struct {
		format, first, rest string
	}{
		{agentcmd.FormatClaudeStreamJSON,
			`{"type":"system","subtype":"init","session_id":"s-live","model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_live","name":"Bash","input":{"command":"make test"}}],"usage":{"input_tokens":10,"output_tokens":5}}}`,
			`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_live","content":"ok"}]}}
{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"Done. <promise>COMPLETE</promise>","session_id":"s-live","total_cost_usd":0.001,"usage":{"input_tokens":10,"output_tokens":5}}`},
		{agentcmd.FormatCodexJSON,
			`{"type":"thread.started","thread_id":"t-live"}
{"type":"item.started","item":{"id":"toolu_live","type":"command_execution","command":"make test","aggregated_output":"","status":"in_progress"}}`,
			`{"type":"item.completed","item":{"id":"toolu_live","type":"command_execution","command":"make test","aggregated_output":"ok","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"msg","type":"agent_message","text":"Done. <promise>COMPLETE</promise>"}}
{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}`},
	} {
		t.Run("a "+tc.format+" tool call is an event while the agent still runs, and only once", func(t *testing.T) {
			h := newE2E(t, e2eConfig{})
			wd := h.workdir("live")
			script, state := agent(t, `cat >/dev/null
cat "$STATE/first"
i=0
while [ ! -e "$STATE/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
cat "$STATE/rest"`)
			writeFile(t, state, "first", tc.first+"\n")
			writeFile(t, state, "rest", tc.rest+"\n")
			cfg := commandRun(script, wd)
			cfg.Agent.OutputFormat = tc.format
			run := h.create(cfg)
			h.waitEvent(run.ID, "the live tool_call", func(e *spec.Event) bool {
				return e.Type == "tool_call" && strings.Contains(string(e.Data), "toolu_live")
			})
			if n := len(ofType(h.rawEvents(run.ID), spec.EventAgentExit)); n != 0 {
				t.Errorf("the agent had exited before its tool call was seen")
			}
			writeFile(t, state, "go", "")
			run = h.settled(run.ID)
			if run.Status != spec.StatusCompleted {
				t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
			}
			evs := h.requireBasics(run.ID)
			if c, r := len(ofType(evs, "tool_call")), len(ofType(evs, "tool_result")); c != 1 || r != 1 {
				t.Errorf("%d tool_call and %d tool_result events, want one each\n%s", c, r, h.eventDump(run.ID))
			}
		})
	}
}
