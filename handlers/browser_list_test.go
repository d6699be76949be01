package handlers

import (
	"testing"

	"github.com/chromedp/chromedp"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestBrowserBulkActions selects runs in the run list and acts on them at
// once: two of three live runs canceled after one confirmation, the third
// untouched; then stopped and forecast-waiting runs continued with a raised
// budget.
func TestBrowserBulkActions(t *testing.T) {
	findChromium(t) // before any server starts: skip (or fail in CI) at once
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
	ada := ts.userID(t, "ada@example.com")
	create := func(t *testing.T, cfg spec.Config, steps ...scripted.Step) string {
		t.Helper()
		cfg.Executor, cfg.Script = spec.ExecutorScript, script(steps...)
		run, err := ts.Engine.CreateRun(ts.ctx, ada.User, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	status := func(id string) string {
		t.Helper()
		r, err := ts.Store.FindRun(ts.ctx, ada.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}

	t.Run("two of three live runs are canceled after one confirmation", func(t *testing.T) {
		slow := scripted.Step{Summary: "slow", SleepMS: 60_000}
		a := create(t, spec.Config{Objective: "Slow A"}, slow)
		b := create(t, spec.Config{Objective: "Waits B"}, askStep("Which one?"))
		c := create(t, spec.Config{Objective: "Slow C"}, slow)
		ts.waitStatus(t, ada, a, spec.StatusRunning)
		ts.waitStatus(t, ada, b, spec.StatusWaiting)
		ts.waitStatus(t, ada, c, spec.StatusRunning)
		do(t, ctx, "open the list and tick A and B",
			chromedp.Navigate(ts.URL+"/"),
			chromedp.WaitVisible(chromedp.CSS("#runs table")),
			chromedp.Click(chromedp.CSS(`#run-`+a+` input.run-select`)),
			chromedp.Click(chromedp.CSS(`#run-`+b+` input.run-select`)),
		)
		until(t, ctx, "the filters open on a wide screen", `document.querySelector("#filters").open`)
		until(t, ctx, "the count of selected runs", `document.querySelector("#bulk-count").textContent === "2 runs selected" && document.querySelector("#select-all").indeterminate`)
		shot(t, ctx, "run-list-selected.png")
		do(t, ctx, "cancel the selected", chromedp.Click(chromedp.CSS("#bulk-cancel")))
		until(t, ctx, "the dialog asking about 2 runs", `document.querySelector("#bulk-dialog").open && document.querySelector("#bulk-question").textContent.startsWith("Cancel 2 runs?")`)
		if status(a) == spec.StatusCanceled || status(b) == spec.StatusCanceled {
			t.Fatal("a run was canceled before the confirmation")
		}
		do(t, ctx, "confirm", chromedp.Click(chromedp.CSS("#bulk-yes")), chromedp.WaitVisible(chromedp.CSS("#bulk-summary")))
		if got := text(t, ctx, "#bulk-summary"); got != "2 runs canceled." {
			t.Fatalf("summary %q", got)
		}
		ts.waitStatus(t, ada, a, spec.StatusCanceled)
		ts.waitStatus(t, ada, b, spec.StatusCanceled)
		if s := status(c); s != spec.StatusRunning {
			t.Fatalf("the unselected run is %s", s)
		}
	})

	t.Run("stopped and waiting runs continue with a raised budget", func(t *testing.T) {
		spend := func(summary string) scripted.Step {
			return scripted.Step{Summary: summary, Status: &spec.Status{ProgressSummary: summary, RemainingWork: []string{"more"}},
				LLM: []spec.LLMCall{{Model: "m", PromptTokens: 100, CostUSD: 0.3, Priced: true}}}
		}
		waiting := create(t, spec.Config{Objective: "Spend in steps", Budgets: spec.Budgets{MaxCostUSD: 1, OnForecast: spec.ForecastAsk}},
			spend("one"), spend("two"), spend("three"), spend("four"), doneStep("done"))
		stopped := create(t, spec.Config{Objective: "Needs two", Budgets: spec.Budgets{MaxIterations: 1}}, scripted.Step{Summary: "one"}, doneStep("two"))
		if r := ts.waitStatus(t, ada, waiting, spec.StatusWaiting); r.Waiting == nil || r.Waiting.Reason != spec.WaitBudgetForecast {
			t.Fatalf("the run waits for %+v", r.Waiting)
		}
		ts.waitStatus(t, ada, stopped, spec.StatusStopped)
		do(t, ctx, "tick both and raise the budgets",
			chromedp.Navigate(ts.URL+"/"),
			chromedp.WaitVisible(chromedp.CSS("#runs table")),
			chromedp.Click(chromedp.CSS(`#run-`+waiting+` input.run-select`)),
			chromedp.Click(chromedp.CSS(`#run-`+stopped+` input.run-select`)),
			chromedp.Click(chromedp.CSS("#bulk-continue > summary")),
			chromedp.WaitVisible(chromedp.CSS("#bulk-max_iterations")),
			chromedp.SendKeys(chromedp.CSS("#bulk-max_iterations"), "5"),
			chromedp.SendKeys(chromedp.CSS("#bulk-max_cost_usd"), "3"),
			chromedp.Click(chromedp.CSS("#bulk-continue-go")),
		)
		until(t, ctx, "the dialog asking about 2 runs", `document.querySelector("#bulk-dialog").open && document.querySelector("#bulk-question").textContent.startsWith("Continue 2 runs")`)
		do(t, ctx, "confirm", chromedp.Click(chromedp.CSS("#bulk-yes")), chromedp.WaitVisible(chromedp.CSS("#bulk-summary")))
		shot(t, ctx, "bulk-continued.png")
		if got := text(t, ctx, "#bulk-summary"); got != "2 runs continued." {
			t.Fatalf("summary %q", got)
		}
		if r := ts.waitStatus(t, ada, waiting, spec.StatusCompleted); r.Metrics.Iterations != 5 {
			t.Fatalf("the waiting run completed after %d iterations, want 5", r.Metrics.Iterations)
		}
		ts.waitStatus(t, ada, stopped, spec.StatusCompleted)
	})

	t.Run("select all ticks every run on the page, and ticks survive a live update", func(t *testing.T) {
		do(t, ctx, "open the list", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#select-all")),
			chromedp.Click(chromedp.CSS("#select-all")))
		until(t, ctx, "every box ticked", `Array.from(document.querySelectorAll("input.run-select")).every(b => b.checked) && document.querySelector("#bulk-count").textContent === document.querySelectorAll("input.run-select").length + " runs selected"`)
		// A new run refreshes the list over the dashboard feed.
		fresh := create(t, spec.Config{Objective: "Arrives later"}, doneStep("done"))
		until(t, ctx, "the list swapped in the new run with the other ticks kept", `(() => {
			const boxes = Array.from(document.querySelectorAll("input.run-select"));
			const fresh = document.querySelector("#run-`+fresh+` input.run-select");
			return fresh && !fresh.checked && boxes.length === 6 && boxes.filter(b => b.checked).length === 5 &&
				document.querySelector("#bulk-count").textContent === "5 runs selected" && document.querySelector("#select-all").indeterminate;
		})()`)
	})
}

// TestBrowserNotificationsGroupedAndReadWhileViewing: the notifications
// page groups by run with counts; a run's page reads that run's
// notifications when opened and as new ones arrive while it is open, and
// the header's count is left with the other run's.
func TestBrowserNotificationsGroupedAndReadWhileViewing(t *testing.T) {
	findChromium(t) // before any server starts: skip (or fail in CI) at once
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
	ada := ts.userID(t, "ada@example.com")
	create := func(cfg spec.Config, steps ...scripted.Step) string {
		t.Helper()
		cfg.Executor, cfg.Script = spec.ExecutorScript, script(steps...)
		run, err := ts.Engine.CreateRun(ts.ctx, ada.User, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	unreadOf := func(runID string) int {
		t.Helper()
		items, err := ts.Store.ListNotifications(ts.ctx, ada.ID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, it := range items {
			if it.RunID == runID && it.ReadAt.IsZero() {
				n++
			}
		}
		return n
	}
	b := create(spec.Config{Objective: "Run B finishes"}, doneStep("done"))
	ts.waitStatus(t, ada, b, spec.StatusCompleted)
	a := create(spec.Config{Objective: "Run A stops", Budgets: spec.Budgets{MaxIterations: 1}}, scripted.Step{Summary: "one", SleepMS: 1500}, doneStep("two"))
	ts.waitStatus(t, ada, a, spec.StatusStopped)

	do(t, ctx, "open the notifications", chromedp.Navigate(ts.URL+"/notifications"), chromedp.WaitVisible(chromedp.CSS("#group-"+a)))
	until(t, ctx, "two groups, A's first, each with its count", `(() => {
		const groups = Array.from(document.querySelectorAll("details.notice-group"));
		return groups.length === 2 && groups[0].id === "group-`+a+`" && groups[1].id === "group-`+b+`" &&
			groups.every(g => g.open && g.querySelector(".group-count").textContent === "1 notification" && g.querySelector(".group-unread")) &&
			groups[0].querySelector(".group-title").textContent === "Run A stops" &&
			document.querySelector("#unread").textContent.trim().startsWith("2");
	})()`)
	do(t, ctx, "fold a group", chromedp.Click(chromedp.CSS("#group-"+b+" > summary")))
	until(t, ctx, "the group folded", `!document.querySelector("#group-`+b+`").open`)

	do(t, ctx, "open run A", chromedp.Navigate(ts.URL+"/runs/"+a), chromedp.WaitVisible(chromedp.CSS("#run-live")))
	until(t, ctx, "the count to leave out A's notification", `document.querySelector("#unread").textContent.trim().startsWith("1")`)
	if n := unreadOf(a); n != 0 {
		t.Fatalf("opening A left %d of its notifications unread", n)
	}

	// A new notification of A arrives while its page is open: it is read
	// there, and the count still shows only B's.
	if _, err := ts.Engine.Continue(ts.ctx, ada.ID, a, &spec.Budgets{MaxIterations: 3}); err != nil {
		t.Fatal(err)
	}
	ts.waitStatus(t, ada, a, spec.StatusCompleted)
	until(t, ctx, "A's page to show it completed", `document.querySelector("#run-live .badge").textContent === "Completed"`)
	waitUntil(t, "A's completion notification to be read on its open page", func() bool { return unreadOf(a) == 0 })
	until(t, ctx, "the count still B's alone", `document.querySelector("#unread").textContent.trim().startsWith("1") && document.querySelector("#unread").getAttribute("hx-get").endsWith("viewing=`+a+`")`)
	if n := unreadOf(b); n != 1 {
		t.Fatalf("B has %d unread, want 1", n)
	}

	do(t, ctx, "back to the notifications", chromedp.Navigate(ts.URL+"/notifications"), chromedp.WaitVisible(chromedp.CSS("#group-"+a)))
	until(t, ctx, "A's group read with two notifications, B's new", `(() => {
		const a = document.querySelector("#group-`+a+`"), b = document.querySelector("#group-`+b+`");
		return a.querySelector(".group-count").textContent === "2 notifications" && !a.querySelector(".group-unread") && !a.open &&
			b.querySelector(".group-unread").textContent === "1 new" && b.open;
	})()`)
}
