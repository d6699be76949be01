package handlers

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"homework/engine/scripted"
)

// TestBrowserReports opens the effectiveness report in a real browser at
// desktop and phone widths and checks that its charts are drawn and fit.
func TestBrowserReports(t *testing.T) {
	ts := newPageServer(t)
	ctx := newBrowser(t)
	hash, err := bcrypt.GenerateFromPassword([]byte(pagePassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ts.DB.CreateUser(ts.ctx, "grace@example.com", string(hash), false)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := ts.DB.CreateAPIToken(ts.ctx, u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	grace := &testUser{User: u, Token: tok}
	done := ts.createRunWith(t, grace, map[string]any{"tags": []string{"before"}}, doneStep("done"))
	stalled := ts.createRunWith(t, grace, map[string]any{"tags": []string{"after"}}, scripted.Step{Summary: "same", Progress: "same", LLM: llmCall(0.05)})
	ts.waitStatus(t, grace, done, "completed")
	ts.waitStatus(t, grace, stalled, "stopped")

	do(t, ctx, "sign in",
		chromedp.Navigate(ts.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS("#password")),
		chromedp.SendKeys(chromedp.CSS("#email"), "grace@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
		chromedp.Submit(chromedp.CSS("#password")),
		chromedp.WaitVisible(chromedp.CSS("#runs")),
	)

	for _, width := range []int64{1280, 390} {
		t.Run("the report and its charts at "+itoa(width)+" px", func(t *testing.T) {
			do(t, ctx, "open the report", chromedp.EmulateViewport(width, 900),
				chromedp.Navigate(ts.URL+"/reports?group_by=tag&a_tag=before&b_tag=after"),
				chromedp.WaitVisible(chromedp.CSS("#chart-stop-reasons svg")))
			until(t, ctx, "the figures", `document.querySelector("#fig-runs .value").textContent.trim() === "2"`)
			until(t, ctx, "bars in the stop-reason chart",
				`document.querySelectorAll("#chart-stop-reasons rect").length === 2 && [...document.querySelectorAll("#chart-stop-reasons rect")].every(r => r.getBoundingClientRect().width > 0)`)
			until(t, ctx, "a drawn outcomes chart", `document.querySelectorAll("#chart-outcomes rect.c-completed").length >= 1`)
			until(t, ctx, "the comparison chart", `document.querySelectorAll("#chart-compare rect").length === 6`)
			until(t, ctx, "the charts to fit the width",
				`[...document.querySelectorAll(".chart svg")].every(s => s.getBoundingClientRect().right <= window.innerWidth + 0.5) && document.documentElement.scrollWidth <= window.innerWidth`)
			until(t, ctx, "chart labels readable (at least 10 px tall)",
				`[...document.querySelectorAll("#chart-stop-reasons .c-label")].every(l => l.getBoundingClientRect().height >= 10)`)
			until(t, ctx, "no chart's labels, values or legend overlapping its drawing or each other", chartsDoNotOverlap)
			until(t, ctx, "the outcome legend under the plot", `(() => {
				const svg = document.querySelector("#chart-outcomes > svg").getBoundingClientRect();
				const items = [...document.querySelectorAll("#chart-outcomes .legend li")];
				return items.length === 5 && items.every(li => li.getBoundingClientRect().top >= svg.bottom - 0.5 && li.getBoundingClientRect().right <= window.innerWidth);
			})()`)
			until(t, ctx, "the finished runs below", `document.querySelector("#finished-reports").getBoundingClientRect().top > document.querySelector("#chart-cost").getBoundingClientRect().top`)
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
			path := filepath.Join(dir, "reports-"+itoa(width)+".png")
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot of the report: %s", path)
		})
	}

	t.Run("the what-if form replays from the page", func(t *testing.T) {
		do(t, ctx, "replay", chromedp.EmulateViewport(390, 900), chromedp.Navigate(ts.URL+"/reports"),
			chromedp.WaitVisible(chromedp.CSS("#wi_no_progress")),
			chromedp.SendKeys(chromedp.CSS("#wi_no_progress"), "2"),
			chromedp.Click(chromedp.CSS("#run-whatif")),
			chromedp.WaitVisible(chromedp.CSS("#whatif-totals")),
		)
		until(t, ctx, "the replay's totals", `(document.querySelector("#wi-earlier .value")||{}).textContent === "1 of 2"`)
	})
}

// chartsDoNotOverlap holds when, in every chart on the page, no label,
// value or legend entry overlaps a bar, a segment or another of them.
const chartsDoNotOverlap = `(() => {
	const meets = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
	const charts = [...document.querySelectorAll("figure.chart")];
	if (charts.length === 0) return false;
	for (const fig of charts) {
		const words = [...fig.querySelectorAll(":scope > svg text, .legend li")].map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
		const shapes = [...fig.querySelectorAll(":scope > svg rect")].map(e => e.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
		for (let i = 0; i < words.length; i++) {
			if (shapes.some(s => meets(words[i], s))) return false;
			for (let j = i + 1; j < words.length; j++) if (meets(words[i], words[j])) return false;
		}
	}
	return true;
})()`
