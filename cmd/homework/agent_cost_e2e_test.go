package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"homework/engine/llm/prices"
	"homework/engine/spec"
)

// fakeCLIs puts programs named like the agent CLIs first on PATH (for the
// server started next, and the agents it starts): each reads its prompt,
// records its arguments and prints a recording of engine/agentcmd/testdata
// without its completion promise, so a run goes on until a budget stops it.
// name → recording.
func fakeCLIs(t *testing.T, recordings map[string]string) (argsLog string) {
	t.Helper()
	bin := t.TempDir()
	argsLog = filepath.Join(t.TempDir(), "args")
	for name, rec := range recordings {
		path, err := filepath.Abs(filepath.Join("..", "..", "engine", "agentcmd", "testdata", rec))
		if err != nil {
			t.Fatal(err)
		}
		script := "#!/bin/sh\ncat >/dev/null\necho \"" + name + " $*\" >>'" + argsLog + "'\n" +
			"echo 'a notice on stderr' >&2\nsed 's#<promise>COMPLETE</promise>##' '" + path + "'\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return argsLog
}

// runWithIterations is GET /api/runs/{id}?include=iterations.
type runWithIterations struct {
	Status     string           `json:"status"`
	StopReason *spec.StopReason `json:"stop_reason"`
	Waiting    *spec.Waiting    `json:"waiting"`
	Metrics    spec.Metrics     `json:"metrics"`
	Iterations []struct {
		Iteration int          `json:"iteration"`
		Metrics   spec.Metrics `json:"metrics"`
	} `json:"iterations"`
}

func (s *server) runWithIterations(t *testing.T, token, id string) runWithIterations {
	t.Helper()
	var r runWithIterations
	if code := s.api(t, token, "GET", "/api/runs/"+id+"?include=iterations", nil, &r); code != 200 {
		t.Fatalf("run: %d", code)
	}
	return r
}

// TestAgentCostBudgetsThroughTheBinary: command runs of today's CLIs, as a
// new user starts them, stop on their cost budget at the cost the list
// prices give; a cost budget on a model without a price is refused; and
// output of another CLI's format makes the run wait on the person.
func TestAgentCostBudgetsThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	argsLog := fakeCLIs(t, map[string]string{"codex": "codex-json.jsonl", "claude": "claude-json-verbose.json"})
	root := t.TempDir()
	for _, d := range []string{"codex", "claude", "mismatch"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	dbPath := filepath.Join(t.TempDir(), "cost.db")
	s := startServer(t, bin, dbPath, "--allow-command-runs", root)
	token := adminToken(t, bin, dbPath)
	table := prices.Default()

	t.Run("a codex run on gpt-5-codex stops on its cost budget at the list price of its tokens", func(t *testing.T) {
		// The preset's command, its default model, a budget of $0.15.
		id := s.createRun(t, token, map[string]any{"objective": "fix the tests", "executor": "command",
			"agent": map[string]any{"preset": "codex", "workdir": "codex"}, "budgets": map[string]any{"max_cost_usd": 0.15, "max_iterations": 10}})
		waitRunStatus(t, s, token, id, "stopped")
		r := s.runWithIterations(t, token, id)
		perIteration, _ := table.Cost("gpt-5-codex", prices.Usage{Input: 120000, CacheRead: 100000, Output: 3000, Reasoning: 1800})
		if math.Abs(perIteration-0.0675) > 1e-12 {
			t.Fatalf("gpt-5-codex's list price of the recording is $%v, want $0.0675", perIteration)
		}
		// $0.135 after two; a third, forecast at $0.0675, would pass $0.15
		// and is not started.
		if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetCost || len(r.Iterations) != 2 || !strings.Contains(r.StopReason.Detail, "not started") {
			t.Fatalf("run %s %+v after %d iterations; want stopped on budget_cost by the forecast after 2", r.Status, r.StopReason, len(r.Iterations))
		}
		m := r.Metrics
		if math.Abs(m.CostTotalUSD-2*perIteration) > 1e-9 || m.CostTotalUSD > 0.15 || m.CostReportedUSD != 0 || m.UnpricedCalls != 0 ||
			m.ByModel["gpt-5-codex"].Calls != 2 || m.CachedTokens != 200000 || m.ReasoningTokens != 3600 {
			t.Errorf("metrics %+v; want 2 × $%v from the price table, on gpt-5-codex, within the budget", m, perIteration)
		}
		for _, it := range r.Iterations {
			if it.Metrics.PromptTokens != 120000 || it.Metrics.CachedTokens != 100000 || it.Metrics.CompletionTokens != 3000 ||
				it.Metrics.ReasoningTokens != 1800 || math.Abs(it.Metrics.CostTotalUSD-perIteration) > 1e-12 {
				t.Errorf("iteration %d metrics %+v", it.Iteration, it.Metrics)
			}
		}
		if b, _ := os.ReadFile(argsLog); !strings.Contains(string(b), "codex exec --json") {
			t.Errorf("the preset's command did not run: %s", b)
		}
	})

	t.Run("a claude-json run on claude-opus-4-5-20251101 stops on its cost budget at the cost the list prices give", func(t *testing.T) {
		id := s.createRun(t, token, map[string]any{"objective": "fix the parser", "executor": "command",
			"agent": map[string]any{"workdir": "claude", "output_format": "claude-json",
				"argv": []string{"claude", "-p", "--output-format", "json", "--verbose", "--model", "claude-opus-4-5-20251101"}},
			"budgets": map[string]any{"max_cost_usd": 0.30, "max_iterations": 10}})
		waitRunStatus(t, s, token, id, "stopped")
		r := s.runWithIterations(t, token, id)
		perIteration, _ := table.Cost("claude-opus-4-5-20251101", prices.Usage{Input: 52003, CacheRead: 40000, CacheWrite: 12000, Output: 1500})
		if math.Abs(perIteration-0.132515) > 1e-12 {
			t.Fatalf("claude-opus-4-5's list price of the recording is $%v, want the CLI's $0.132515", perIteration)
		}
		// $0.265 after two; a third would pass $0.30 and is not started.
		if r.StopReason == nil || r.StopReason.Type != spec.StopBudgetCost || len(r.Iterations) != 2 || !strings.Contains(r.StopReason.Detail, "not started") {
			t.Fatalf("run %s %+v after %d iterations; want stopped on budget_cost by the forecast after 2", r.Status, r.StopReason, len(r.Iterations))
		}
		m := r.Metrics
		opus := m.ByModel["claude-opus-4-5-20251101"]
		if math.Abs(m.CostTotalUSD-2*perIteration) > 1e-9 || m.CostTotalUSD > 0.30 || math.Abs(m.CostReportedUSD-m.CostTotalUSD) > 1e-9 || opus.Calls != 2 ||
			opus.CachedTokens != 80000 || opus.CacheWriteTokens != 24000 || len(m.ByModel) != 1 {
			t.Errorf("metrics %+v; want 2 × $%v, reported by the CLI, on claude-opus-4-5-20251101", m, perIteration)
		}
		// Its tool uses, the failed one with its error, are events.
		var failed []string
		for _, e := range runEvents(t, s, token, id) {
			if e.Type == "tool_result" {
				var d struct {
					OK     bool   `json:"ok"`
					Result string `json:"result"`
				}
				json.Unmarshal(e.Data, &d)
				if !d.OK {
					failed = append(failed, d.Result)
				}
			}
		}
		if len(failed) != 2 || !strings.Contains(failed[0], "nil pointer dereference") {
			t.Errorf("failed tool results %q, want one per iteration with its error", failed)
		}
	})

	t.Run("a cost budget on a model without a price is refused", func(t *testing.T) {
		var e struct {
			Error spec.Error `json:"error"`
		}
		code := s.api(t, token, "POST", "/api/runs", map[string]any{"objective": "x", "executor": "command", "model": "gpt-9-codex",
			"agent": map[string]any{"preset": "codex", "workdir": "codex"}, "budgets": map[string]any{"max_cost_usd": 1}}, &e)
		if code != 400 || e.Error.Field != "budgets.max_cost_usd" || !strings.Contains(e.Error.Message, `"gpt-9-codex"`) || !strings.Contains(e.Error.Message, "--prices") {
			t.Errorf("%d %+v; want 400 on budgets.max_cost_usd naming the model and the price file", code, e.Error)
		}
	})

	t.Run("claude's output declared codex-json waits on the person instead of counting $0", func(t *testing.T) {
		id := s.createRun(t, token, map[string]any{"objective": "fix the parser", "executor": "command",
			"agent":   map[string]any{"workdir": "mismatch", "output_format": "codex-json", "argv": []string{"claude", "-p", "--output-format", "json", "--verbose"}},
			"budgets": map[string]any{"max_cost_usd": 1, "max_iterations": 10}})
		waitRunStatus(t, s, token, id, "waiting_on_user")
		r := s.runWithIterations(t, token, id)
		if r.Waiting == nil || r.Waiting.Reason != spec.WaitUsageUnknown || len(r.Iterations) != 1 ||
			!strings.Contains(strings.Join(r.Waiting.Questions, " "), "looks like claude-json") {
			t.Fatalf("run %s %+v after %d iterations; want waiting on usage_unknown after the first", r.Status, r.Waiting, len(r.Iterations))
		}
		var warned bool
		for _, e := range runEvents(t, s, token, id) {
			warned = warned || e.Type == "agent_output_warning" && strings.Contains(string(e.Data), `"likely_format":"claude-json"`)
		}
		if !warned {
			t.Error("no agent_output_warning named claude-json")
		}
	})
}
