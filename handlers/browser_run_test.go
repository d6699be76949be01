package handlers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/views"
)

// TestBrowserRunPage drives the run page as a person would: the transcript
// appends live, the page converges to the API's state after fast runs, and
// a waiting run puts its question first at phone width.
func TestBrowserRunPage(t *testing.T) {
	ts := newPageServer(t)
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
	ada, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	u := &testUser{User: ada}
	create := func(t *testing.T, objective string, maxIterations int, steps ...scripted.Step) string {
		t.Helper()
		run, err := ts.Engine.CreateRun(ts.ctx, ada, spec.Config{Objective: objective, Executor: spec.ExecutorScript,
			Script: script(steps...), Budgets: spec.Budgets{MaxIterations: maxIterations}})
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}

	t.Run("six run tabs share one event stream and all keep updating", func(t *testing.T) {
		do(t, ctx, "open the run list", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS("main")))
		waitUntil(t, "the first tab's feed", func() bool { return ts.Bus.Subscribers() >= 1 })
		baseline := ts.Bus.Subscribers()
		var ids []string
		for i := range 6 {
			step := scripted.Step{Summary: fmt.Sprint("tab step ", i), SleepMS: 700}
			ids = append(ids, create(t, fmt.Sprint("tab run ", i), 0, step, step, doneStep("done")))
		}
		var tabs []context.Context
		for i, id := range ids {
			tab, cancel := chromedp.NewContext(ctx)
			t.Cleanup(cancel)
			do(t, tab, fmt.Sprint("open tab ", i), chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#run-live")))
			tabs = append(tabs, tab)
		}
		if n := ts.Bus.Subscribers(); n > baseline {
			t.Fatalf("%d event subscriptions with seven tabs open, %d with one: the tabs do not share the stream", n, baseline)
		}
		for i, tab := range tabs {
			run := ts.waitStatus(t, u, ids[i], spec.StatusCompleted)
			until(t, tab, fmt.Sprint("tab ", i, " to show the completed run"), fmt.Sprintf(
				`document.querySelector("#run-live .badge").dataset.status === "completed" && document.querySelector("#iterations").textContent === "%d" && document.querySelectorAll("#timeline > li[id^=iteration-]").length === %d`,
				run.Metrics.Iterations, run.Metrics.Iterations))
		}
		if n := ts.Bus.Subscribers(); n > baseline {
			t.Fatalf("%d event subscriptions at the end, %d with one tab", n, baseline)
		}
	})

	t.Run("the transcript appends live, is searchable and downloadable", func(t *testing.T) {
		work := scripted.Step{Summary: "ticking", Stream: "tick\n", StreamRepeat: 6, StreamEveryMS: 400,
			Transcript: []scripted.Line{{Kind: spec.TranscriptAssistant, Text: "Looking for the needle."},
				{Kind: spec.TranscriptToolCall, Name: "workspace_search", Text: `{"query":"needle"}`}}}
		id := create(t, "Tick six times", 0, work, doneStep("done"))
		do(t, ctx, "open the run", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		until(t, ctx, "the first iteration's log", `document.querySelector("#log-1 > summary") !== null`)
		do(t, ctx, "open the log", chromedp.Click(chromedp.CSS("#log-1 > summary")))
		until(t, ctx, "the model's message in the log", `document.querySelector("#log-1 .k-assistant") && document.querySelector("#log-1 .k-assistant").textContent.includes("Looking for the needle.")`)
		// Some output while the iteration still runs: the log is live.
		until(t, ctx, "output while the iteration runs",
			`document.querySelector("#log-1 .k-output") !== null && document.querySelector("#iteration-1").classList.contains("running")`)
		until(t, ctx, "the run to complete", `document.querySelector("#run-live .badge").dataset.status === "completed"`)
		until(t, ctx, "all six ticks, each once", `(document.querySelector("#log-1 .log-lines").textContent.match(/tick/g) || []).length === 6`)
		seqs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#log-1 .log-entry")).map(l => l.dataset.seq)`))
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] && len(seqs[i]) <= len(seqs[i-1]) {
				t.Fatalf("log lines out of order or repeated: %v", seqs)
			}
		}
		do(t, ctx, "search the transcripts", chromedp.SendKeys(chromedp.CSS("#log-q"), "needle"))
		until(t, ctx, "a search hit", `document.querySelector("#log-hits") && document.querySelector("#log-hits").textContent.includes("Iteration 1")`)
		until(t, ctx, "a download link", `document.querySelector('#log-1 a.download-log').getAttribute("href") === "/api/runs/`+id+`/log?iteration=1" && document.querySelector("#download-log").getAttribute("href") === "/api/runs/`+id+`/log"`)
	})

	t.Run("after a dozen fast runs each page shows what the API says", func(t *testing.T) {
		for i := range 12 {
			var id string
			fast := scripted.Step{Summary: "fast", SleepMS: 30, Emit: 3, LLM: []spec.LLMCall{{Role: "executor", Model: "m", PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.01, Priced: true}},
				Transcript: []scripted.Line{{Kind: "note", Text: "quick"}}}
			switch i % 3 {
			case 0: // completes
				last := doneStep("done")
				last.SleepMS = 30
				id = create(t, fmt.Sprint("fast run ", i), 0, fast, fast, last)
			case 1: // stops at its iteration budget
				id = create(t, fmt.Sprint("fast run ", i), 3, fast)
			case 2: // waits for the person
				id = create(t, fmt.Sprint("fast run ", i), 0, fast, askStep("which?"))
			}
			do(t, ctx, "open fast run", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#run-live")))
			want := map[int]string{0: spec.StatusCompleted, 1: spec.StatusStopped, 2: spec.StatusWaiting}[i%3]
			run := ts.waitStatus(t, u, id, want)
			// The page has 3 s after the run settled to show the API's state.
			expr := fmt.Sprintf(`document.querySelector("#run-live .badge").dataset.status === %q && document.querySelector("#iterations").textContent === "%d" && document.querySelectorAll("#timeline > li[id^=iteration-]").length === %d && document.querySelector("#cost-total").textContent === %q && document.querySelectorAll("#timeline li.running").length === 0`,
				run.Status, run.Metrics.Iterations, run.Metrics.Iterations, views.Dollars(run.Metrics.CostTotalUSD))
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(3*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
				body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#run-page").innerText.slice(0, 1500)`))
				t.Fatalf("run %d (%s, %d iterations, $%.2f): the page did not converge within 3 s: %v\n%s", i, run.Status, run.Metrics.Iterations, run.Metrics.CostTotalUSD, err, body)
			}
		}
	})

	t.Run("a waiting run puts its question first at phone width and the banner goes when the state moves on", func(t *testing.T) {
		id := create(t, "Ask me", 0, askStep("Which colour?"), scripted.Step{Summary: "slow", SleepMS: 600}, doneStep("done"))
		ts.waitStatus(t, u, id, spec.StatusWaiting)
		do(t, ctx, "phone size", chromedp.EmulateViewport(390, 844), chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#respond-form")))
		until(t, ctx, "the question above the status, in the first screen",
			`(() => { const f = document.querySelector("#respond-form").getBoundingClientRect(), s = document.querySelector("#run-live").getBoundingClientRect(); return f.top < s.top && f.top < 844 && f.right <= 390 && document.querySelector("#run-answer").textContent.includes("Which colour?"); })()`)
		do(t, ctx, "answer", chromedp.SendKeys(chromedp.CSS("#answer-0"), "blue"))
		submitTo(t, ctx, "#respond", "done=answered")
		until(t, ctx, "the run to complete", `document.querySelector("#run-live .badge").dataset.status === "completed"`)
		until(t, ctx, "the stale banner and the answer form to be gone", `document.querySelector(".ok-box") === null && document.querySelector("#respond-form") === null`)
		until(t, ctx, "the question and the answer in the timeline",
			`document.querySelector("#timeline").textContent.includes("Asked you: Which colour?") && document.querySelector("#timeline").textContent.includes("You answered: blue")`)
		do(t, ctx, "desktop size", chromedp.EmulateViewport(1280, 1000))
	})

	t.Run("the timeline shows a message, a stop, a Continue with its budgets and a cancel with who", func(t *testing.T) {
		id := create(t, "Stop, go on, cancel", 1, scripted.Step{Summary: "one"}, askStep("Go on?"), scripted.Step{Summary: "forever", SleepMS: 60_000})
		ts.waitStatus(t, u, id, spec.StatusStopped)
		do(t, ctx, "open the stopped run", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#continue-form")))
		until(t, ctx, "the stop in the timeline", `document.querySelector("#timeline").textContent.includes("Stopped: Max iterations")`)
		do(t, ctx, "raise the iterations", chromedp.SendKeys(chromedp.CSS("#continue-form #max_iterations"), "3"))
		submitTo(t, ctx, "#continue", "done=continued")
		until(t, ctx, "the Continue in the timeline", `document.querySelector("#timeline").textContent.includes("Continued with budgets raised: iterations 3")`)
		ts.waitStatus(t, u, id, spec.StatusWaiting)
		do(t, ctx, "queue a message while the run waits", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#message-body")),
			chromedp.SendKeys(chromedp.CSS("#message-body"), "mind the licence"))
		submitTo(t, ctx, "#send-message", "done=message")
		do(t, ctx, "answer", chromedp.WaitVisible(chromedp.CSS("#answer-0")), chromedp.SendKeys(chromedp.CSS("#answer-0"), "yes"))
		submitTo(t, ctx, "#respond", "done=answered")
		until(t, ctx, "the message read by the next iteration", `document.querySelector("#timeline").textContent.includes("You queued a message: mind the licence — read by iteration 3")`)
		do(t, ctx, "answer the confirmation", chromedp.Evaluate[chromedp.Void](`window.confirm = function () { return true; }`))
		submitTo(t, ctx, "#cancel", "done=canceled")
		until(t, ctx, "the cancel with who in the timeline", `document.querySelector("#timeline").textContent.includes("Canceled by ada@example.com")`)
	})
}
