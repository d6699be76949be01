package handlers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestBrowserNoSidewaysScrollOnAPhone visits every page at 390 px wide, the
// width of a common phone, with content chosen to push it wider (words far
// longer than the screen in objectives, reports, documents, logs and token
// names), and checks that the page never scrolls sideways: long words wrap,
// wide tables and code scroll inside their own box.
func TestBrowserNoSidewaysScrollOnAPhone(t *testing.T) {
	findChromium(t) // before any server starts: skip (or fail in CI) at once
	ts := newPageServer(t)
	ctx := newBrowser(t)
	const width = 390
	do(t, ctx, "phone size", chromedp.EmulateViewport(width, 844))
	fits := func(t *testing.T, path, ready string) {
		t.Helper()
		do(t, ctx, "open "+path, chromedp.Navigate(ts.URL+path), chromedp.WaitVisible(chromedp.CSS(ready)))
		widest, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
			// The innermost elements that stick out, to say what to fix.
			const out = el => el.getBoundingClientRect().right > window.innerWidth + 0.5;
			const name = el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
				(typeof el.className === "string" && el.className.trim() ? "." + el.className.trim().replace(/\s+/g, ".") : "");
			return [...document.querySelectorAll("body *")].filter(el => out(el) && ![...el.children].some(out))
				.slice(0, 5).map(el => name(el) + " (right " + Math.round(el.getBoundingClientRect().right) + ", parent " + name(el.parentElement) + ")").join("; ");
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		sw, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if sw > width {
			t.Errorf("%s is %d px wide at %d px; sticking out: %s", path, sw, width, widest)
		}
		shot(t, ctx, "phone-"+strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(strings.TrimPrefix(t.Name(), "TestBrowserNoSidewaysScrollOnAPhone/"))+".png")
	}
	long := strings.Repeat("Pneumonoultramicroscopicsilicovolcanoconiosis", 4)

	t.Run("the first-account page", func(t *testing.T) { fits(t, "/setup", "#password2") })
	do(t, ctx, "set up",
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
	done := doneStep("Summary " + long)
	done.Status.CompletionEvidence = []string{"Evidence " + long}
	done.Output = "Output " + long
	done.Docs = []scripted.Doc{{Path: "report.md", Content: "# Report " + long + "\n\nText " + long + "\n\n```\ncode " + long + "\n```\n\n| a | b |\n|---|---|\n| " + long + " | " + long + " |\n\n<https://example.com/" + long + ">\n"}}
	done.Transcript = []scripted.Line{{Kind: "assistant", Text: "Said " + long}, {Kind: "tool_call", Name: "search", Text: `{"q":"` + long + `"}`}}
	done.Tasks = []scripted.Task{{Title: "Task " + long, Status: "done"}}
	done.LLM = []spec.LLMCall{{Role: "executor", Model: "model-" + long[:60], PromptTokens: 1000, CompletionTokens: 250, CostUSD: 0.02, Priced: true}}
	id := create(spec.Config{Objective: "Objective " + long, Tags: []string{"nightly"}}, done)
	ts.waitStatus(t, ada, id, spec.StatusCompleted)
	waiting := create(spec.Config{Objective: "Waits " + long}, askStep("Question "+long+"?"))
	ts.waitStatus(t, ada, waiting, spec.StatusWaiting)
	stopped := create(spec.Config{Objective: "Stops " + long, Budgets: spec.Budgets{MaxIterations: 1}}, scripted.Step{Summary: "one " + long}, doneStep("two"))
	ts.waitStatus(t, ada, stopped, spec.StatusStopped)
	docs, err := ts.Store.ListRunDocuments(ts.ctx, ada.ID, id)
	if err != nil || len(docs) == 0 {
		t.Fatalf("documents: %v %v", docs, err)
	}
	if _, _, err := ts.Store.CreateAPIToken(ts.ctx, ada.ID, "token-"+long[:90]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ts.Store.CreateAPIToken(ts.ctx, ada.ID, "laptop"); err != nil {
		t.Fatal(err)
	}

	t.Run("the run list, its filters folded so that the runs start on the first screen", func(t *testing.T) {
		fits(t, "/", "#runs table")
		until(t, ctx, "the filters folded and the list on the first screen",
			`!document.querySelector("#filters").open && document.querySelector("#runs table").getBoundingClientRect().top < 844`)
		do(t, ctx, "unfold the filters", chromedp.Click(chromedp.CSS("#filters > summary")), chromedp.WaitVisible(chromedp.CSS("#f-status")))
	})
	t.Run("the run list, filtered, says how many filters are on", func(t *testing.T) {
		fits(t, "/?status=completed&tag=nightly&q=Objective", "#runs")
		if got := text(t, ctx, "#active-filters"); got != "2 active" {
			t.Errorf("active filters %q", got)
		}
	})
	t.Run("the composer", func(t *testing.T) { fits(t, "/runs/new", "#objective") })
	t.Run("a finished run with its report", func(t *testing.T) {
		fits(t, "/runs/"+id, "#report")
		do(t, ctx, "open its log", chromedp.Click(chromedp.CSS("#log-1 > summary")), chromedp.WaitVisible(chromedp.CSS("#log-1 .log-lines")))
		if sw, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); err != nil || sw > width {
			t.Errorf("with its log open the run page is %d px wide (%v)", sw, err)
		}
	})
	t.Run("a waiting run", func(t *testing.T) { fits(t, "/runs/"+waiting, "#run-live") })
	t.Run("a stopped run", func(t *testing.T) { fits(t, "/runs/"+stopped, "#continue-form") })
	t.Run("a document", func(t *testing.T) { fits(t, "/runs/"+id+"/documents/"+docs[0].ID, "main") })
	t.Run("the notifications", func(t *testing.T) { fits(t, "/notifications", ".notice-group") })
	t.Run("the reports", func(t *testing.T) { fits(t, "/reports", "#finished-reports") })
	t.Run("the API tokens and webhooks", func(t *testing.T) { fits(t, "/settings/tokens", "#tokens") })
	t.Run("a page that is not there", func(t *testing.T) { fits(t, "/runs/no-such-run", "main") })
	t.Run("the bulk action's answer", func(t *testing.T) {
		do(t, ctx, "select and cancel", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#runs table")),
			chromedp.Click(chromedp.CSS("#run-"+waiting+" input.run-select")),
			chromedp.Click(chromedp.CSS("#run-"+id+" input.run-select")),
			chromedp.Click(chromedp.CSS("#bulk-cancel")),
			chromedp.WaitVisible(chromedp.CSS("#bulk-yes")),
			chromedp.Click(chromedp.CSS("#bulk-yes")),
			chromedp.WaitVisible(chromedp.CSS("#bulk-summary")))
		if sw, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); err != nil || sw > width {
			t.Errorf("the bulk answer is %d px wide (%v)", sw, err)
		}
	})
	t.Run("the sign-in page", func(t *testing.T) {
		do(t, ctx, "sign out", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS("form[action='/logout'] button")),
			chromedp.Click(chromedp.CSS("form[action='/logout'] button")), chromedp.WaitVisible(chromedp.CSS("#password")))
		fits(t, "/login", "#password")
	})
}

// shot saves a full-page screenshot under $ARTIFACTS_DIR (CI uploads it),
// else under the system's temporary directory, to look at what a test saw.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	do(t, ctx, "screenshot", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		png, err = chromedp.FullScreenshot(100)(ctx, tg)
		return err
	}))
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "homework-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
