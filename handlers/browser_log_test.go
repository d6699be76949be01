package handlers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestBrowserLogViewer reads transcripts in the run page as a person
// would: coloured output, permalinks to lines and ranges, a log that follows
// the live end until scrolled up, the download links; and the small things
// around it (the tokens page's create and revoke, the icon, Run again with
// a budget below a cent).
func TestBrowserLogViewer(t *testing.T) {
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
	ada, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	u := &testUser{User: ada}
	create := func(t *testing.T, cfg spec.Config, steps ...scripted.Step) string {
		t.Helper()
		cfg.Executor, cfg.Script = spec.ExecutorScript, script(steps...)
		run, err := ts.Engine.CreateRun(ts.ctx, ada, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}

	t.Run("an agent's coloured output shows styled and never as escape text", func(t *testing.T) {
		step := doneStep("coloured")
		step.Stream = "\x1b[31mFAIL\x1b[0m one \x1b[1;32mPASS\x1b[0m two \x1b[38;5;208mwarn\x1b[0m\n" +
			"downloading  10%\rdownloading  55%\rdownloading 100%\n<b>not bold</b>\n"
		id := create(t, spec.Config{Objective: "Print colours"}, step)
		ts.waitStatus(t, u, id, spec.StatusCompleted)
		do(t, ctx, "open the run", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#log-1 > summary")),
			chromedp.Click(chromedp.CSS("#log-1 > summary")))
		until(t, ctx, "the output's red, bold green and 256-colour spans", `(() => {
			const red = document.querySelector("#log-1 .lt span.term-fg31"), green = document.querySelector("#log-1 .lt span.term-fg32.term-fg1"),
				orange = document.querySelector("#log-1 .lt span.term-fgx208");
			return red && red.textContent === "FAIL" && getComputedStyle(red).color === "rgb(240, 82, 79)" &&
				green && green.textContent === "PASS" && getComputedStyle(green).fontWeight === "700" &&
				orange && getComputedStyle(orange).color === "rgb(255, 135, 0)";
		})()`)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#log-1 .log-lines").textContent`))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"\x1b", "[31m", "[0m", "10%", "55%"} {
			if strings.Contains(got, bad) {
				t.Fatalf("the log shows %q: %q", bad, got)
			}
		}
		until(t, ctx, "the progress line as a terminal leaves it, and markup as text", `(() => {
			const lines = Array.from(document.querySelectorAll("#log-1 .k-output .lt")).map(l => l.textContent);
			return lines.includes("downloading 100%") && lines.includes("<b>not bold</b>") && !document.querySelector("#log-1 .lt b");
		})()`)
		until(t, ctx, "no Jump to live on a finished iteration", `getComputedStyle(document.querySelector("#log-1 .jump-live")).display === "none"`)
	})

	t.Run("a permalink opens its iteration scrolled to the line and highlighted", func(t *testing.T) {
		// 24 iterations: the third is not among the rows the page shows at
		// first, so the permalink loads earlier rows to reach it.
		id := seedLogRun(t, ts, ada.ID, 24, 300)
		do(t, ctx, "open the permalink", chromedp.Navigate(ts.URL+"/runs/"+id+"#i3-L250"), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		until(t, ctx, "line 250 of iteration 3 highlighted and in view", `(() => {
			const l = document.getElementById("i3-L250"), box = l && l.closest(".log-lines");
			if (!l || !l.classList.contains("hl") || !document.getElementById("log-3").open) return false;
			const r = l.getBoundingClientRect(), b = box.getBoundingClientRect();
			return r.top >= b.top && r.bottom <= b.bottom && r.top >= 0 && r.bottom <= innerHeight &&
				l.textContent === "iteration 3 line 249" && document.querySelectorAll(".ll.hl").length === 1;
		})()`)
		do(t, ctx, "go to a range", chromedp.Evaluate[chromedp.Void](`location.hash = "#i3-L10-L12"`))
		until(t, ctx, "lines 10 to 12 highlighted", `Array.from(document.querySelectorAll(".ll.hl")).map(l => l.id).join() === "i3-L10,i3-L11,i3-L12"`)
		do(t, ctx, "click line 20's number", chromedp.Click(chromedp.CSS(`#i3-L20 > a.ln`)))
		until(t, ctx, "the line's link in the address bar, and only it highlighted",
			`location.hash === "#i3-L20" && Array.from(document.querySelectorAll(".ll.hl")).map(l => l.id).join() === "i3-L20"`)
		do(t, ctx, "shift-click line 23's number", chromedp.Evaluate[chromedp.Void](
			`document.querySelector("#i3-L23 > a.ln").dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, shiftKey: true}))`))
		until(t, ctx, "the range's link in the address bar", `location.hash === "#i3-L20-L23" && document.querySelectorAll(".ll.hl").length === 4`)
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		do(t, ctx, "open the range's link afresh", chromedp.Navigate(ts.URL+"/"), chromedp.Navigate(loc), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		until(t, ctx, "the range highlighted after a fresh load", `Array.from(document.querySelectorAll(".ll.hl")).map(l => l.id).join() === "i3-L20,i3-L21,i3-L22,i3-L23"`)
		until(t, ctx, "the run's and the iteration's download links", fmt.Sprintf(
			`document.querySelector("#download-log").getAttribute("href") === "/api/runs/%s/log" && document.querySelector("#log-3 a.download-log").getAttribute("href") === "/api/runs/%s/log?iteration=3"`, id, id))
	})

	t.Run("a running iteration's log follows its live end until scrolled up, then offers Jump to live", func(t *testing.T) {
		step := doneStep("ticked")
		step.Stream = "tick\n"
		step.StreamRepeat = 1200
		step.StreamEveryMS = 25
		id := create(t, spec.Config{Objective: "Tick for a while"}, step)
		t.Cleanup(func() { ts.Engine.Cancel(ts.ctx, ada.ID, id) })
		do(t, ctx, "open the run", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		until(t, ctx, "the running iteration's log", `document.querySelector("#iteration-1.running #log-1 > summary") !== null`)
		do(t, ctx, "open the log", chromedp.Click(chromedp.CSS("#log-1 > summary")))
		const box = `document.querySelector("#log-1 .log-lines")`
		const atEnd = `(b => b.scrollHeight - b.scrollTop - b.clientHeight < 8)(` + box + `)`
		until(t, ctx, "the log to overflow its box", box+`.scrollHeight > `+box+`.clientHeight + 200`)
		for i := range 3 {
			// Each time: more lines than before, and still at the end.
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#log-1 .ll").length`))
			if err != nil {
				t.Fatal(err)
			}
			until(t, ctx, fmt.Sprint("more lines, the log at its end (", i, ")"), fmt.Sprintf(`document.querySelectorAll("#log-1 .ll").length > %d && %s`, n+5, atEnd))
		}
		const jumpShown = `getComputedStyle(document.querySelector("#log-1 .jump-live")).display !== "none"`
		until(t, ctx, "no Jump to live while following", `!`+jumpShown)
		do(t, ctx, "scroll up", chromedp.Evaluate[chromedp.Void](box+`.scrollTop = 0`))
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#log-1 .ll").length`))
		if err != nil {
			t.Fatal(err)
		}
		until(t, ctx, "more lines while the log stays where the person scrolled, with Jump to live",
			fmt.Sprintf(`document.querySelectorAll("#log-1 .ll").length > %d && %s.scrollTop === 0 && %s`, n+10, box, jumpShown))
		do(t, ctx, "jump to live", chromedp.Click(chromedp.CSS("#log-1 .jump-live")))
		until(t, ctx, "the log at its end, the button gone", atEnd+` && !`+jumpShown)
		n, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#log-1 .ll").length`))
		if err != nil {
			t.Fatal(err)
		}
		until(t, ctx, "following again as lines arrive", fmt.Sprintf(`document.querySelectorAll("#log-1 .ll").length > %d && %s`, n+10, atEnd))
		lines, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#log-1 .ll")).map(l => l.id)`))
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range lines {
			if want := fmt.Sprintf("i1-L%d", i+1); id != want {
				t.Fatalf("line %d of the live log has the anchor %q, want %q", i+1, id, want)
			}
		}
	})

	t.Run("creating a token redirects, shows it once, and a reload creates nothing; revoking asks first", func(t *testing.T) {
		do(t, ctx, "create a token", chromedp.Navigate(ts.URL+"/settings/tokens"), chromedp.WaitVisible(chromedp.CSS("#token-name")),
			chromedp.SendKeys(chromedp.CSS("#token-name"), "laptop"), chromedp.Click(chromedp.CSS("#create")),
			chromedp.WaitVisible(chromedp.CSS("#new-token")))
		until(t, ctx, "the page a redirect led to", `location.search === "?done=created" && performance.getEntriesByType("navigation")[0].redirectCount === 1 && document.querySelector("#new-token").value.startsWith("hw_")`)
		do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#tokens")))
		until(t, ctx, "the secret gone after the reload", `document.querySelector("#new-token") === null && document.body.textContent.includes("is not shown again")`)
		toks, err := ts.Store.ListAPITokens(ts.ctx, ada.ID)
		if err != nil || len(toks) != 1 {
			t.Fatalf("after create and reload: %d tokens (%v), want 1", len(toks), err)
		}
		do(t, ctx, "refuse the confirmation", chromedp.Evaluate[chromedp.Void](`window.confirm = m => { sessionStorage.setItem("asked", m); return false; }`),
			chromedp.Click(chromedp.CSS("#tokens .revoke")))
		until(t, ctx, "the question asked, the token still active", `(sessionStorage.getItem("asked") || "").startsWith("Revoke the token “laptop”?") && document.querySelector("#tokens .state").textContent.trim() === "Active"`)
		do(t, ctx, "accept the confirmation", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`))
		loadedAfter(t, ctx, "#tokens .revoke", "done=revoked")
		until(t, ctx, "the token revoked", `document.querySelector("#tokens .state").textContent.includes("Revoked")`)
	})

	t.Run("the icon is served", func(t *testing.T) {
		until(t, ctx, "GET /favicon.ico to answer 200 with an icon",
			`window.__fav === 200 || (window.__fav === undefined && (window.__fav = 0, fetch("/favicon.ico").then(r => r.blob().then(b => { window.__fav = r.ok && b.type === "image/x-icon" ? r.status : -1; }))), false)`)
	})

	t.Run("Run again starts a run whose cost budget is below a cent", func(t *testing.T) {
		id := create(t, spec.Config{Objective: "Cheap", Budgets: spec.Budgets{MaxCostUSD: 0.005}}, doneStep("done"))
		ts.waitStatus(t, u, id, spec.StatusCompleted)
		do(t, ctx, "run again", chromedp.Navigate(ts.URL+"/runs/new?from="+id), chromedp.WaitVisible(chromedp.CSS("#max_cost_usd")),
			chromedp.Click(chromedp.CSS("#start")), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		again, _, _ := strings.Cut(strings.TrimPrefix(loc, ts.URL+"/runs/"), "?")
		r, err := ts.Store.FindRun(ts.ctx, ada.ID, again)
		if err != nil || again == id {
			t.Fatalf("Run again landed on %s: %v", loc, err)
		}
		if cfg, err := runConfigOf(r); err != nil || cfg.Budgets.MaxCostUSD != 0.005 {
			t.Fatalf("the new run's budgets %+v (%v), want $0.005", cfg, err)
		}
	})
}

// loadedAfter clicks sel and waits until the browser shows a page whose
// URL contains want.
func loadedAfter(t *testing.T, ctx context.Context, sel, want string) {
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
		time.Sleep(20 * time.Millisecond)
	}
	do(t, ctx, "load "+want, chromedp.WaitReady(chromedp.CSS("main")))
}
