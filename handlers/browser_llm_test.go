package handlers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"homework/db"
	"homework/engine"
	"homework/engine/llm"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// TestBrowserLLMRun composes a run in the browser against the scripted
// OpenAI-compatible endpoint (the LLM executor, not the script executor)
// and watches its page update live, without a reload, until it completes:
// timeline rows appear, the cost changes, the report shows the narrative.
func TestBrowserLLMRun(t *testing.T) {
	findChromium(t) // before any server starts: skip (or fail in CI) at once
	slow := 700 * time.Millisecond
	endpoint := llmtest.New(t,
		// Iteration 1: research notes and a task, then more to do.
		llmtest.Reply{Delay: slow, ToolCalls: []llmtest.Call{
			llmtest.ToolCall("workspace_write", map[string]any{"path": "notes/drivers.md", "content": "# Drivers\n\nmodernc is pure Go; mattn needs cgo."}),
			llmtest.ToolCall("tasks_add", map[string]any{"title": "Compare the drivers", "status": "doing"}),
		}, PromptTokens: 1200, CompletionTokens: 300},
		llmtest.Reply{Delay: slow, ToolCalls: []llmtest.Call{llmtest.ToolCall("report_status", map[string]any{
			"exit_signal": false, "progress_summary": "Wrote notes on both drivers.", "remaining_work": []string{"write the recommendation"}})},
			PromptTokens: 1400, CompletionTokens: 80},
		// Iteration 2: the deliverable, then completion with evidence.
		llmtest.Reply{Delay: slow, ToolCalls: []llmtest.Call{
			llmtest.ToolCall("workspace_write", map[string]any{"path": "report.md", "content": "# Recommendation\n\nUse modernc.org/sqlite."}),
			llmtest.ToolCall("tasks_update", map[string]any{"id": "Compare the drivers", "status": "done"}),
		}, PromptTokens: 1500, CompletionTokens: 200},
		llmtest.Reply{Delay: slow, ToolCalls: []llmtest.Call{llmtest.ToolCall("report_status", map[string]any{
			"exit_signal": true, "progress_summary": "Recommended modernc.org/sqlite in report.md.",
			"completion_evidence": []string{"report.md holds the recommendation"}})},
			PromptTokens: 1600, CompletionTokens: 60},
		// The summarizer's narrative.
		llmtest.Text("Homework compared the two drivers and recommends modernc.org/sqlite."),
	)
	ts := newTestServerWith(t, func(d *db.DB, eng func() *engine.Engine) map[string]engine.Executor {
		x, err := llm.New(llm.Options{Store: d, BaseURL: endpoint.URL, APIKey: "test", DefaultModel: "gpt-4o-mini",
			RecordNarration: func(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
				return eng().RecordLLMCall(ctx, run, c)
			}})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]engine.Executor{spec.ExecutorLLM: x}
	}, func(o *Options) { o.LLMConfigured = true; o.DefaultModel = "gpt-4o-mini" })
	ctx := newBrowser(t)

	do(t, ctx, "set up",
		chromedp.Navigate(ts.URL+"/setup"),
		chromedp.WaitVisible(chromedp.CSS("#password2")),
		chromedp.SendKeys(chromedp.CSS("#email"), "ada@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
		chromedp.SendKeys(chromedp.CSS("#password2"), pagePassword),
		chromedp.Submit(chromedp.CSS("#password2")),
		chromedp.WaitVisible(chromedp.CSS("#objective")),
	)
	do(t, ctx, "compose an LLM run",
		chromedp.Navigate(ts.URL+"/runs/new"),
		chromedp.WaitVisible(chromedp.CSS("#objective")),
		chromedp.SendKeys(chromedp.CSS("#objective"), "Compare the Go SQLite drivers and recommend one"),
		chromedp.Click(chromedp.CSS("#start")),
		chromedp.WaitVisible(chromedp.CSS("#run-live")),
	)
	// Mark the page: a reload would lose the mark.
	do(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.__noReload = true`))
	until(t, ctx, "the first iteration's row in the timeline", `document.body.innerText.includes("Wrote notes on both drivers.")`)
	until(t, ctx, "a cost above zero", `/\$0\.0*[1-9]/.test(document.querySelector("#run-live").innerText)`)
	until(t, ctx, "the run to complete", `document.querySelector("#run-live .badge") && document.querySelector("#run-live .badge").textContent === "Completed"`)
	until(t, ctx, "the report with its narrative", `document.body.innerText.includes("recommends modernc.org/sqlite")`)
	// Each part of the page refreshes on its own events, so the timeline's
	// last row may still be on its way when the status says completed: the
	// page must come to show all of it, without a reload.
	for _, want := range []string{"Iteration 2", "Recommendation document", "Drivers document", "gpt-4o-mini", "Compare the drivers"} {
		until(t, ctx, "the finished run page to show "+want, `document.body.innerText.includes(`+strconv.Quote(want)+`)`)
	}
	until(t, ctx, "no reload happened", `window.__noReload === true`)
	if n := endpoint.Unscripted(); n != 0 {
		t.Errorf("%d requests beyond the script", n)
	}
}
