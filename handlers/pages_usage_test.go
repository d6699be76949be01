package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/db"
	"homework/engine"
	"homework/engine/agentcmd"
	"homework/engine/llm/prices"
	"homework/engine/spec"
)

// TestRunPageShowsTokensAndCostWithTheirSource: each iteration shows its
// tokens split into input, cached, output and reasoning and its cost with
// where the cost comes from; the run shows its cost per model.
func TestRunPageShowsTokensAndCostWithTheirSource(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	ada, _ := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	id := fmt.Sprintf("usage-%d", time.Now().UnixNano())
	opus := spec.LLMCall{Model: "claude-opus-4-5-20251101", PromptTokens: 52003, CachedTokens: 40000, CacheWriteTokens: 12000, CompletionTokens: 1500,
		CostUSD: 0.132515, Priced: true, CostSource: spec.CostSourceCLI}
	codex := spec.LLMCall{Model: "gpt-5-codex", PromptTokens: 120000, CachedTokens: 100000, CompletionTokens: 3000, ReasoningTokens: 1800,
		CostUSD: 0.0675, Priced: true, CostSource: spec.CostSourceTable}
	var it1, it2, total spec.Metrics
	it1.AddLLMCall(opus)
	it2.AddLLMCall(codex)
	total.Add(it1)
	total.Add(it2)
	err := ts.DB.WriteTx(context.Background(), func(tx spec.Tx) error {
		run := &spec.Run{ID: id, UserID: ada.ID, Objective: "Fix the parser", Mode: "auto", Executor: "script",
			Config: json.RawMessage(`{"objective":"Fix the parser","executor":"script","script":{"steps":[{}]}}`),
			Status: spec.StatusRunning, Iteration: 3, StartedAt: tx.Now(), Metrics: total}
		if err := tx.InsertRun(ctx(), run); err != nil {
			return err
		}
		for i, m := range []spec.Metrics{it1, it2} {
			it := &spec.Iteration{RunID: id, Iteration: i + 1, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(), EndedAt: tx.Now(),
				Summary: "worked", Metrics: m}
			if err := tx.UpsertIteration(ctx(), it); err != nil {
				return err
			}
		}
		_, err := tx.AppendEvent(ctx(), id, "run_started", nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, page := pc.get("/runs/" + id)
	expectContains(t, page,
		// Iteration 1: claude's own cost, cache reads and writes.
		`$0.133 <span class="hint">(reported by the CLI)</span>`, `53.5k tokens: <span class="token-split">12.0k input (12.0k cache write) · 40.0k cached · 1500 output</span>`,
		// Iteration 2: codex priced from the table, with its reasoning.
		`$0.0675 <span class="hint">(price table)</span>`, `123.0k tokens: <span class="token-split">20.0k input · 100.0k cached · 1200 output · 1800 reasoning</span>`,
		// The run: both sources, and its cost per model.
		`id="cost-source">$0.133 reported by the CLI, $0.0675 from the price table</div>`, `id="by-model"`,
		`<code>claude-opus-4-5-20251101</code>`, `<code>gpt-5-codex</code>`)
}

func ctx() context.Context { return context.Background() }

// TestComposerShowsThePriceToBeUsed: the composer says what the chosen
// preset and model will be priced at, or that the model is unpriced and a
// cost budget will be refused.
func TestComposerShowsThePriceToBeUsed(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "work"), 0o755)
	table := prices.Default()
	table["my-local-model"] = prices.Price{Input: 0.5, Output: 1.5}
	ts := newTestServerWith(t, func(*db.DB, func() *engine.Engine) map[string]engine.Executor {
		return map[string]engine.Executor{spec.ExecutorCommand: agentcmd.New(agentcmd.Options{Root: root, Prices: table})}
	}, func(o *Options) {
		o.CommandRunsEnabled, o.LLMConfigured, o.DefaultModel, o.Prices = true, true, "gpt-4.1-mini", table
	})
	pc := newPageClient(t, ts)
	pc.get("/setup")
	pc.post("/setup", url.Values{"email": {"root@example.com"}, "password": {pagePassword}, "password2": {pagePassword}})

	for _, tc := range []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"the codex preset is priced as codex's default model", url.Values{"executor": {"command"}, "agent_preset": {"codex"}},
			[]string{"<code>gpt-5-codex</code> (codex&#39;s default): $1.25 input · $0.125 cached · $10.00 output per million tokens"}},
		{"a model named in the command wins over the preset's", url.Values{"executor": {"command"}, "agent_preset": {"codex"}, "agent_argv": {"codex exec --json -m gpt-5.2-codex -"}},
			[]string{"<code>gpt-5.2-codex</code> (named in the command): $1.75 input"}},
		{"an unpriced model says a cost budget will be refused", url.Values{"executor": {"command"}, "agent_preset": {"codex"}, "model": {"gpt-9-codex"}},
			[]string{"<code>gpt-9-codex</code> (the run&#39;s model) has no known price: a cost budget will be refused"}},
		{"claude's preset says its own cost report counts", url.Values{"executor": {"command"}, "agent_preset": {"claude"}, "model": {"claude-opus-4-5-20251101"}},
			[]string{"$5.00 input · $0.50 cached · $25.00 output per million tokens · $6.25 cache write", "The CLI&#39;s own cost report wins"}},
		{"a long-context tier is shown", url.Values{"executor": {"command"}, "agent_preset": {"gemini"}},
			[]string{"<code>gemini-2.5-pro</code> (gemini&#39;s default)", "above 200.0k prompt tokens $2.50 input · $15.00 output"}},
		{"text output can hold no budget", url.Values{"executor": {"command"}, "agent_argv": {"bash agent.sh"}},
			[]string{"This output format reports no tokens or cost: a cost or token budget will be refused"}},
		{"a model run is priced as the server's default model", url.Values{"executor": {"llm"}},
			[]string{"<code>gpt-4.1-mini</code> (the server&#39;s default): $0.40 input"}},
		{"a model of the server's price file is priced", url.Values{"executor": {"llm"}, "model": {"my-local-model"}},
			[]string{"<code>my-local-model</code> (the run&#39;s model): $0.50 input", "the server&#39;s price file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, body := pc.get("/runs/new/price?" + tc.query.Encode())
			expectContains(t, body, tc.want...)
		})
	}
	t.Run("the composer page shows the note for its form and asks again as the form changes", func(t *testing.T) {
		_, body := pc.get("/runs/new")
		expectContains(t, body, `id="price-preview" hx-get="/runs/new/price" hx-include="closest form"`, `id="price-note"`, "<code>gpt-4.1-mini</code>")
		if strings.Count(body, `id="price-note"`) != 1 {
			t.Errorf("the note is shown %d times", strings.Count(body, `id="price-note"`))
		}
	})
}
