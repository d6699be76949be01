package handlers

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// findChromium returns the browser to drive. A missing browser skips the
// test locally and fails it in CI (CI=true).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not on PATH and CI=true: install it (apt-get install chromium) to run the browser tests")
	}
	t.Skip("chromium is not on PATH; install it (apt-get install chromium) to run the browser tests, or set CI=true to fail instead of skipping")
	return ""
}

// newBrowser starts a headless chromium for the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := findChromium(t)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 150*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// do runs browser actions, failing the test with what was being done.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("%s: %v", what, time.Since(start)) }()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Location())
		t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

// until waits for a JavaScript condition on the page.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("%s: %v", what, time.Since(start)) }()
	chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`window.__why = ""`))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(40*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		body, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 3000) : ""`))
		// A condition may leave in window.__why what was not so yet.
		why, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`String(window.__why || "")`))
		t.Fatalf("waiting for %s: %v\nlast reason: %s\npage text:\n%s", what, err, why, body)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// submitTo clicks sel and waits until the browser has loaded a page whose
// URL contains want.
func submitTo(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	do(t, ctx, "click "+sel, chromedp.Click(chromedp.CSS(sel)))
	deadline := time.Now().Add(30 * time.Second)
	for {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err == nil && strings.Contains(loc, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after clicking %s the page is %s, want %s", sel, loc, want)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`true`, chromedp.WithPollingTimeout(time.Second))); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	do(t, ctx, "load "+want, chromedp.WaitVisible(chromedp.CSS("#run-live")))
}

// compose fills the composer with a scripted run and submits it, waiting
// for the run page.
func composeInBrowser(t *testing.T, ctx context.Context, base, objective string, maxIterations string, steps ...scripted.Step) {
	t.Helper()
	actions := []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + "/runs/new"),
		chromedp.WaitVisible(chromedp.CSS("#objective")),
		chromedp.SendKeys(chromedp.CSS("#objective"), objective),
		chromedp.Click(chromedp.CSS("#advanced > summary")),
		chromedp.WaitVisible(chromedp.CSS("#script")),
		chromedp.SetValue(chromedp.CSS("#script"), string(script(steps...))),
	}
	if maxIterations != "" {
		actions = append(actions, chromedp.SendKeys(chromedp.CSS("#max_iterations"), maxIterations))
	}
	actions = append(actions, chromedp.Click(chromedp.CSS("#start")), chromedp.WaitVisible(chromedp.CSS("#run-live")))
	do(t, ctx, "compose "+objective, actions...)
}

func TestBrowser(t *testing.T) {
	findChromium(t) // before any server starts: skip (or fail in CI) at once
	ts := newPageServer(t)
	ctx := newBrowser(t)
	base := ts.URL

	t.Run("a new server sends you to set up the first account", func(t *testing.T) {
		do(t, ctx, "set up",
			chromedp.Navigate(base+"/"),
			chromedp.WaitVisible(chromedp.CSS("#password2")),
			chromedp.SendKeys(chromedp.CSS("#email"), "ada@example.com"),
			chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
			chromedp.SendKeys(chromedp.CSS("#password2"), pagePassword),
			chromedp.Submit(chromedp.CSS("#password2")),
			chromedp.WaitVisible(chromedp.CSS("#objective")),
		)
		until(t, ctx, "htmx and its SSE extension to load under the CSP",
			`typeof htmx !== "undefined" && htmx.version.startsWith("2.0") && htmx.config.includeIndicatorStyles === false && !document.querySelector("style")`)
	})

	var runURL string
	t.Run("a run's page updates live until it completes", func(t *testing.T) {
		step := func(i int) scripted.Step {
			return scripted.Step{Summary: "step " + string(rune('0'+i)), SleepMS: 1200,
				LLM:  []spec.LLMCall{{Role: "executor", Model: "model-a", PromptTokens: 1000, CompletionTokens: 250, CostUSD: 0.02, Priced: true}},
				Docs: []scripted.Doc{{Path: "scratchpad.md", Content: "Notes after step " + string(rune('0'+i))}, {Path: "branches/b1/findings.md", Content: "# Findings"}},
				Emit: 2}
		}
		last := doneStep("all done")
		last.SleepMS = 1200
		last.Tasks = []scripted.Task{{Title: "Write the report", Status: "done"}}
		composeInBrowser(t, ctx, base, "Watch me work", "", step(1), step(2), last)
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		runURL = loc
		if got := text(t, ctx, "#unread"); !strings.HasPrefix(got, "0") {
			t.Fatalf("unread count before: %q", got)
		}
		do(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.__noReload = true; window.__unread = document.querySelector("#unread"); undefined`))
		do(t, ctx, "open the live view", chromedp.Click(chromedp.CSS("#open-live")), chromedp.WaitVisible(chromedp.CSS("#live-body")))
		until(t, ctx, "events in the live view", `document.querySelectorAll("#live-events li").length > 0`)
		until(t, ctx, "the scratchpad in the live view", `(document.querySelector("#live-scratchpad")||{}).textContent?.includes("Notes after step")`)
		until(t, ctx, "the branch in the live view", `(document.querySelector("#live-branch")||{}).textContent === "branches/b1"`)
		do(t, ctx, "close the live view", chromedp.Click(chromedp.CSS("#close-live")), chromedp.WaitNotVisible(chromedp.CSS("#live-modal")))
		until(t, ctx, "the first timeline row", `document.querySelector("#iteration-1") !== null`)
		until(t, ctx, "the cost to change", `document.querySelector("#cost-total").textContent !== "$0.00"`)
		until(t, ctx, "the report", `document.querySelector("#report") !== null && document.querySelector("#run-live .badge").textContent === "Completed"`)
		// The run's notification arrives while its page is open: the count
		// refreshes, reading it, and stays at 0.
		until(t, ctx, "the unread count to refresh, the run's notification read", `document.querySelector("#unread") !== window.__unread && document.querySelector("#unread").textContent.trim().startsWith("0")`)
		until(t, ctx, "the page not to have reloaded", `window.__noReload === true`)
		// Read in the page: a live refresh may swap the node between a
		// lookup and a read over the protocol.
		until(t, ctx, "the cost to be $0.0400", `document.querySelector("#cost-total").textContent.trim() === "$0.0400"`)
	})

	t.Run("the run list shows the run", func(t *testing.T) {
		do(t, ctx, "open the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#runs table")))
		if got := text(t, ctx, "#runs tbody tr .badge"); got != "Completed" {
			t.Fatalf("badge %q", got)
		}
	})

	t.Run("a waiting run is answered from its page", func(t *testing.T) {
		ask := askStep("Which colour?")
		ask.SleepMS = 300
		composeInBrowser(t, ctx, base, "Ask me", "", ask, doneStep("thanks"))
		do(t, ctx, "answer", chromedp.WaitVisible(chromedp.CSS("#answer-0")),
			chromedp.SendKeys(chromedp.CSS("#answer-0"), "blue"))
		submitTo(t, ctx, "#respond", "done=answered")
		until(t, ctx, "the answered run to complete", `document.querySelector("#run-live .badge").textContent === "Completed"`)
		until(t, ctx, "the answer in the timeline", `document.querySelector("#timeline").textContent.includes("answer: blue")`)
	})

	t.Run("a running run is canceled from its page", func(t *testing.T) {
		composeInBrowser(t, ctx, base, "Take forever", "", scripted.Step{Summary: "slow", SleepMS: 60_000})
		until(t, ctx, "the run to be running", `document.querySelector("#run-live .badge").textContent === "Running"`)
		// Cancel asks first; the browser's dialog is answered "yes" and its
		// question kept to check it.
		do(t, ctx, "answer the confirmation", chromedp.Evaluate[chromedp.Void](`window.confirm = function (m) { sessionStorage.setItem("asked", m); return true; }`))
		submitTo(t, ctx, "#cancel", "done=canceled")
		until(t, ctx, "the canceled badge", `document.querySelector("#run-live .badge").textContent === "Canceled" && !document.querySelector("#cancel")`)
		until(t, ctx, "the cancel to have asked", `(sessionStorage.getItem("asked") || "").startsWith("Cancel this run?")`)
	})

	t.Run("a stopped run is continued from its page", func(t *testing.T) {
		composeInBrowser(t, ctx, base, "Needs two", "1", scripted.Step{Summary: "one", SleepMS: 300}, doneStep("two"))
		do(t, ctx, "continue", chromedp.WaitVisible(chromedp.CSS("#continue-form")),
			chromedp.SendKeys(chromedp.CSS("#continue-form #max_iterations"), "3"))
		submitTo(t, ctx, "#continue", "done=continued")
		until(t, ctx, "the continued run to complete", `document.querySelector("#run-live .badge").textContent === "Completed"`)
	})

	t.Run("the run page looks right", func(t *testing.T) {
		var png []byte
		do(t, ctx, "screenshot", chromedp.Navigate(runURL), chromedp.WaitVisible(chromedp.CSS("#report")),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				png, err = chromedp.FullScreenshot(100)(ctx, tg)
				return err
			}))
		// Artifacts go to $ARTIFACTS_DIR when set (CI uploads it), else
		// under the system's temporary directory.
		dir := os.Getenv("ARTIFACTS_DIR")
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "homework-artifacts")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path, _ := filepath.Abs(filepath.Join(dir, "run-page.png"))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of the run page: %s", path)
		do(t, ctx, "phone size", chromedp.EmulateViewport(390, 844), chromedp.Navigate(runURL), chromedp.WaitVisible(chromedp.CSS("#report")),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				png, err = chromedp.FullScreenshot(100)(ctx, tg)
				return err
			}))
		phone, _ := filepath.Abs(filepath.Join(dir, "run-page-phone.png"))
		if err := os.WriteFile(phone, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot at phone size: %s", phone)
	})
}
