package agentcmd_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"homework/engine/agentcmd"
	llmprices "homework/engine/llm/prices"
	"homework/engine/spec"
)

// noPromise strips the completion promise from a recording, so a run goes
// on until a budget or the person stops it.
func noPromise(t *testing.T, name string) string {
	return strings.ReplaceAll(fixture(t, name), "<promise>COMPLETE</promise>", "")
}

func TestAgentUsageIsAttributedAndPriced(t *testing.T) {
	table := llmprices.Default()

	t.Run("every model of claude's modelUsage is recorded in by_model with its own tokens and cost", func(t *testing.T) {
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: table}})
		script, _ := fakeCLIOutput(t, fixture(t, "claude-json-multimodel.json"))
		cfg := commandRun(script, h.workdir("multimodel"))
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeJSON
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusCompleted {
			t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		m := run.Metrics
		opus, haiku := m.ByModel["claude-opus-4-5-20251101"], m.ByModel["claude-haiku-4-5-20251001"]
		if len(m.ByModel) != 2 || opus.PromptTokens != 38010 || opus.CompletionTokens != 900 || opus.CachedTokens != 30000 || opus.CacheWriteTokens != 8000 ||
			math.Abs(opus.CostUSD-0.08755) > 1e-12 || haiku.PromptTokens != 2000 || haiku.CompletionTokens != 300 || math.Abs(haiku.CostUSD-0.0035) > 1e-12 {
			t.Errorf("by_model %+v", m.ByModel)
		}
		if math.Abs(m.CostTotalUSD-0.09105) > 1e-12 || math.Abs(m.CostReportedUSD-m.CostTotalUSD) > 1e-12 || m.LLMCalls != 2 || m.UnpricedCalls != 0 {
			t.Errorf("metrics %+v; want $0.09105, all reported by the CLI, over two calls", m)
		}
		// The CLI's costs are the list prices here: nothing is recorded
		// beside them.
		calls, err := h.db.ListLLMCalls(h.ctx, h.admin.ID, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			want, _ := table.Cost(c.Model, llmprices.Usage{Input: c.PromptTokens, CacheRead: c.CachedTokens, CacheWrite: c.CacheWriteTokens, Output: c.CompletionTokens})
			if c.CostSource != spec.CostSourceCLI || c.TableCostUSD != 0 || math.Abs(c.CostUSD-want) > 1e-12 {
				t.Errorf("call %+v; the list price gives $%v", c, want)
			}
		}
	})

	t.Run("a CLI cost more than 5% off the list price wins, and the table's figure is recorded beside it", func(t *testing.T) {
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: table}})
		out := strings.ReplaceAll(fixture(t, "claude-json-pretty.json"), "0.132515", "0.2")
		script, _ := fakeCLIOutput(t, out)
		cfg := commandRun(script, h.workdir("differs"))
		cfg.Agent.OutputFormat = agentcmd.FormatClaudeJSON
		run := h.settled(h.create(cfg).ID)
		calls, err := h.db.ListLLMCalls(h.ctx, h.admin.ID, run.ID)
		if err != nil || len(calls) != 1 {
			t.Fatalf("calls %+v, %v", calls, err)
		}
		if c := calls[0]; c.CostUSD != 0.2 || c.CostSource != spec.CostSourceCLI || math.Abs(c.TableCostUSD-0.132515) > 1e-12 {
			t.Errorf("call %+v; want the CLI's $0.20 with the table's $0.132515 beside it", c)
		}
		llm := ofType(h.events(run.ID), "llm_call")
		if len(llm) != 1 || !strings.Contains(string(llm[0].Data), `"table_cost_usd":0.132515`) || !strings.Contains(string(llm[0].Data), `"cost_source":"cli"`) {
			t.Errorf("llm_call events %v", llm)
		}
	})

	t.Run("gemini's tokens are priced per model from the table, thoughts as output", func(t *testing.T) {
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: table}})
		script, _ := fakeCLIOutput(t, fixture(t, "gemini-json.json"))
		cfg := commandRun(script, h.workdir("gemini"))
		cfg.Agent.OutputFormat = agentcmd.FormatGeminiJSON
		cfg.Budgets.MaxCostUSD = 5
		cfg.Model = "gemini-2.5-pro"
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusCompleted {
			t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		pro, _ := table.Cost("gemini-2.5-pro", llmprices.Usage{Input: 48000, CacheRead: 18000, Output: 2600, Reasoning: 1400, Requests: 4})
		flash, _ := table.Cost("gemini-2.5-flash", llmprices.Usage{Input: 6000, Output: 150, Requests: 1})
		m := run.Metrics
		if math.Abs(m.CostTotalUSD-(pro+flash)) > 1e-12 || m.CostReportedUSD != 0 || m.ReasoningTokens != 1400 || m.CachedTokens != 18000 ||
			math.Abs(m.ByModel["gemini-2.5-pro"].CostUSD-pro) > 1e-12 || math.Abs(m.ByModel["gemini-2.5-flash"].CostUSD-flash) > 1e-12 {
			t.Errorf("metrics %+v; want $%v + $%v from the table", m, pro, flash)
		}
	})
}

func TestUnknownUsageWaitsOnThePerson(t *testing.T) {
	table := llmprices.Default()
	for _, tc := range []struct {
		name, format, file string
		budgets            spec.Budgets
		model              string
		want               string // in the question
	}{
		{"claude's json declared codex-json, with a cost budget", agentcmd.FormatCodexJSON, "claude-json-pretty.json",
			spec.Budgets{MaxCostUSD: 5}, "gpt-5-codex", "looks like claude-json, not codex-json"},
		{"codex's events declared claude-json, with a token budget", agentcmd.FormatClaudeJSON, "codex-json.jsonl",
			spec.Budgets{MaxTotalTokens: 1_000_000}, "", "looks like codex-json, not claude-json"},
		{"a failed codex turn that reports no usage, with a cost budget", agentcmd.FormatCodexJSON, "codex-json-failed.jsonl",
			spec.Budgets{MaxCostUSD: 5}, "gpt-5-codex", "reports no token usage"},
		{"a model without a price named at run time, with a cost budget", agentcmd.FormatCodexJSON, "codex-json-legacy.jsonl",
			spec.Budgets{MaxCostUSD: 5}, "gpt-5-codex", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: table}})
			out := noPromise(t, tc.file)
			if tc.want == "" {
				// The CLI names a model the table lacks.
				out = strings.Replace(out, `"model":"gpt-5-codex"`, `"model":"gpt-9-codex-preview"`, 1)
				tc.want = `used "gpt-9-codex-preview", which has no price`
			}
			script, _ := fakeCLIOutput(t, out)
			cfg := commandRun(script, h.workdir("unknown"))
			cfg.Agent.OutputFormat = tc.format
			cfg.Budgets.MaxCostUSD, cfg.Budgets.MaxTotalTokens = tc.budgets.MaxCostUSD, tc.budgets.MaxTotalTokens
			cfg.Model = tc.model
			run := h.settled(h.create(cfg).ID)
			if run.Status != spec.StatusWaiting || run.Waiting == nil || run.Waiting.Reason != spec.WaitUsageUnknown || run.Iteration != 1 {
				t.Fatalf("run is %s %+v after %d iterations; want waiting on usage_unknown after the first\n%s", run.Status, run.Waiting, run.Iteration, h.eventDump(run.ID))
			}
			if q := strings.Join(run.Waiting.Questions, " "); !strings.Contains(q, "iteration 1") || !strings.Contains(q, tc.want) {
				t.Errorf("the question %q does not name the iteration and %q", q, tc.want)
			}
			if run.Metrics.CostTotalUSD != 0 && tc.format != agentcmd.FormatCodexJSON {
				t.Errorf("unknown usage was counted as a cost: %+v", run.Metrics)
			}
			// The person answers; the run goes on and waits again at the
			// next iteration it cannot count.
			if _, err := h.eng.Respond(h.ctx, h.admin.ID, run.ID, []string{"go on"}); err != nil {
				t.Fatal(err)
			}
			run = h.waitFor(run.ID, "the second wait", func(r *spec.Run) bool { return r.Status == spec.StatusWaiting && r.Iteration == 2 })
			if run.Waiting.Reason != spec.WaitUsageUnknown || !strings.Contains(strings.Join(run.Waiting.Questions, " "), "iteration 2") {
				t.Errorf("second wait %+v", run.Waiting)
			}
		})
	}

	t.Run("without a token or cost budget a mismatch is a warning that names the format, and the run goes on", func(t *testing.T) {
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: table}})
		script, _ := fakeCLIOutput(t, noPromise(t, "claude-json-pretty.json"))
		cfg := commandRun(script, h.workdir("nobudget"))
		cfg.Agent.OutputFormat = agentcmd.FormatCodexJSON
		cfg.Budgets.MaxIterations = 2
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopMaxIterations {
			t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		ws := ofType(h.events(run.ID), spec.EventAgentOutputWarning)
		if len(ws) != 2 || !strings.Contains(string(ws[0].Data), `"likely_format":"claude-json"`) {
			t.Errorf("warnings %v", ws)
		}
		if run.Metrics.TokensTotal != 0 || run.Metrics.LLMCalls != 0 {
			t.Errorf("usage recorded from output that could not be read: %+v", run.Metrics)
		}
	})
}

func TestBudgetsMustBindAtCreation(t *testing.T) {
	h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: llmprices.Default()}})
	wd := h.workdir("budgets")
	create := func(a spec.Agent, model string, b spec.Budgets) error {
		a.Workdir = wd
		_, err := h.eng.CreateRun(h.ctx, h.admin, spec.Config{Objective: "x", Executor: spec.ExecutorCommand, Model: model, Agent: &a, Budgets: b})
		return err
	}
	cost := spec.Budgets{MaxCostUSD: 1}
	for _, tc := range []struct {
		name  string
		agent spec.Agent
		model string
		b     spec.Budgets
		field string   // "" when accepted
		says  []string // in the message
	}{
		{"an unpriced model of a codex run with a cost budget is refused, naming the model and the price file",
			spec.Agent{Preset: agentcmd.PresetCodex}, "gpt-9-codex", cost, "budgets.max_cost_usd", []string{`"gpt-9-codex"`, "--prices"}},
		{"the model -m names in the argv is the one priced", spec.Agent{Argv: []string{"codex", "exec", "--json", "-m", "o3-pro-preview", "-"}, OutputFormat: agentcmd.FormatCodexJSON},
			"", cost, "budgets.max_cost_usd", []string{`"o3-pro-preview"`}},
		{"--model=X names it too", spec.Agent{Argv: []string{"gemini", "--model=gemini-9-ultra", "--output-format", "json"}, OutputFormat: agentcmd.FormatGeminiJSON},
			"", cost, "budgets.max_cost_usd", []string{`"gemini-9-ultra"`}},
		{"the codex preset's default model is priced", spec.Agent{Preset: agentcmd.PresetCodex}, "", cost, "", nil},
		{"the gemini preset's default model is priced", spec.Agent{Preset: agentcmd.PresetGemini}, "", cost, "", nil},
		{"a codex argv without a preset is priced as codex's default", spec.Agent{Argv: []string{"codex", "exec", "--json", "-"}, OutputFormat: agentcmd.FormatCodexJSON}, "", cost, "", nil},
		{"a priced model named with -m is accepted", spec.Agent{Argv: []string{"codex", "exec", "--json", "-m", "gpt-5.1-codex", "-"}, OutputFormat: agentcmd.FormatCodexJSON}, "", cost, "", nil},
		{"claude reports its own cost, so any model binds", spec.Agent{Argv: []string{"claude", "-p", "--model", "claude-future-9"}, OutputFormat: agentcmd.FormatClaudeJSON}, "", cost, "", nil},
		{"a script whose model is unknown cannot hold a cost budget", spec.Agent{Argv: []string{"bash", "agent.sh"}, OutputFormat: agentcmd.FormatCodexJSON},
			"", cost, "budgets.max_cost_usd", []string{"model is unknown"}},
		{"text output reports no usage, so a cost budget is refused", spec.Agent{Argv: []string{"bash", "agent.sh"}}, "", cost, "budgets.max_cost_usd", []string{"reports none"}},
		{"nor a token budget", spec.Agent{Argv: []string{"bash", "agent.sh"}}, "", spec.Budgets{MaxTotalTokens: 1000}, "budgets.max_total_tokens", []string{"reports none"}},
		{"text output without such budgets is fine", spec.Agent{Argv: []string{"bash", "agent.sh"}}, "", spec.Budgets{MaxIterations: 3}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := create(tc.agent, tc.model, tc.b)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var de *spec.Error
			if !errors.As(err, &de) || de.Code != spec.EINVALID || de.Field != tc.field {
				t.Fatalf("err = %v, want EINVALID on %s", err, tc.field)
			}
			for _, s := range tc.says {
				if !strings.Contains(de.Message, s) {
					t.Errorf("message %q does not say %q", de.Message, s)
				}
			}
		})
	}
}

func TestResolveModel(t *testing.T) {
	for _, tc := range []struct {
		cfg  spec.Config
		want string
	}{
		{spec.Config{Model: "gpt-5.2-codex", Agent: &spec.Agent{Argv: []string{"codex", "-m", "o3"}}}, "gpt-5.2-codex"},
		{spec.Config{Agent: &spec.Agent{Argv: []string{"codex", "exec", "-m", "o3", "--json"}}}, "o3"},
		{spec.Config{Agent: &spec.Agent{Argv: []string{"codex", "exec", "-c", `model="gpt-5.1-codex-max"`}}}, "gpt-5.1-codex-max"},
		{spec.Config{Agent: &spec.Agent{Argv: []string{"claude", "-p", "--model", "claude-opus-4-5-20251101"}}}, "claude-opus-4-5-20251101"},
		{spec.Config{Agent: &spec.Agent{Argv: []string{"/usr/local/bin/gemini", "--output-format", "json"}}}, "gemini-2.5-pro"},
		{spec.Config{Agent: &spec.Agent{Preset: agentcmd.PresetCodex, Argv: []string{"my-wrapper"}}}, "gpt-5-codex"},
		{spec.Config{Agent: &spec.Agent{Argv: []string{"bash", "agent.sh"}}}, ""},
		{spec.Config{Agent: &spec.Agent{Argv: []string{"bash", "agent.sh", "--", "-m", "x"}}}, ""},
	} {
		if got := agentcmd.ResolveModel(&tc.cfg); got != tc.want {
			t.Errorf("ResolveModel(%+v) = %q, want %q", tc.cfg.Agent, got, tc.want)
		}
	}
}

func TestABudgetAddedByContinueToATextRunWaits(t *testing.T) {
	h := newE2E(t, e2eConfig{exec: agentcmd.Options{Prices: llmprices.Default()}})
	script, _ := agent(t, `cat >/dev/null; echo "still working"`)
	cfg := commandRun(script, h.workdir("text"))
	cfg.Budgets.MaxIterations = 1
	run := h.settled(h.create(cfg).ID)
	if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopMaxIterations {
		t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
	}
	if _, err := h.eng.Continue(h.ctx, h.admin.ID, run.ID, &spec.Budgets{MaxIterations: 5, MaxCostUSD: 1}); err != nil {
		t.Fatal(err)
	}
	run = h.waitFor(run.ID, "the run to wait", func(r *spec.Run) bool { return r.Status == spec.StatusWaiting })
	if run.Waiting.Reason != spec.WaitUsageUnknown || run.Iteration != 2 || !strings.Contains(strings.Join(run.Waiting.Questions, " "), "iteration 2's output is read as text") {
		t.Errorf("run waits %+v after %d iterations; want usage_unknown after the second", run.Waiting, run.Iteration)
	}
}
