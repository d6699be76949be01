package handlers

import (
	"io"
	"net/http"
	"regexp"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestABudgetBelowACent runs a run whose cost budget is half a cent (the
// API accepts any amount above zero) until the budget stops it: its page
// tells the amounts with three significant digits, when it ended, and
// "Run again" gives a form the composer accepts with that budget.
func TestABudgetBelowACent(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	spend := scripted.Step{Summary: "spending", LLM: []spec.LLMCall{{Role: "executor", Model: "m", PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.003, Priced: true}}}
	run, err := ts.Engine.CreateRun(ts.ctx, u.User, spec.Config{Objective: "Spend half a cent", Executor: spec.ExecutorScript,
		Script: script(spend, spend, spend), Budgets: spec.Budgets{MaxCostUSD: 0.005, OnForecast: spec.ForecastOff}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := ts.waitStatus(t, u, run.ID, spec.StatusStopped)
	if stopped.StopReason == nil || stopped.StopReason.Type != spec.StopBudgetCost {
		t.Fatalf("stop reason %+v, want the cost budget", stopped.StopReason)
	}

	resp, body := pc.get("/runs/" + run.ID)
	expectStatus(t, resp, body, http.StatusOK, "")
	t.Run("the stop text and the Continue placeholder show the amounts, not $0.00", func(t *testing.T) {
		expectContains(t, body, "Used the cost budget ($0.00600 of $0.00500).", `placeholder="now 0.00500"`)
		expectLacks(t, body, "of $0.00)")
	})
	t.Run("a stopped run shows when it ended", func(t *testing.T) {
		ended := regexp.MustCompile(`<dd id="ended">(.*?)</dd>`).FindStringSubmatch(body)
		if ended == nil || !regexp.MustCompile(`<time datetime="\d{4}-`).MatchString(ended[1]) {
			t.Fatalf("the Ended fact of a stopped run: %q, want its time", ended)
		}
	})
	t.Run("Run again keeps the budget and the composer accepts it", func(t *testing.T) {
		resp, body := pc.get("/runs/new?from=" + run.ID)
		expectStatus(t, resp, body, http.StatusOK, "")
		// step="any": the browser itself would refuse 0.005 with step 0.01.
		expectContains(t, body, `name="max_cost_usd" value="0.005"`, `min="0" step="any"`)
		form := composeForm("Spend half a cent again", spend)
		form.Set("max_cost_usd", "0.005")
		again := pc.compose(t, form)
		r, err := ts.Store.FindRun(ts.ctx, u.ID, again)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := runConfigOf(r)
		if err != nil || cfg.Budgets.MaxCostUSD != 0.005 {
			t.Fatalf("the run again's cost budget: %+v, %v; want 0.005", cfg.Budgets, err)
		}
	})
}

// TestFaviconAndRunsAddress checks the addresses people and browsers try
// on their own: /favicon.ico is an icon, /runs is the run list.
func TestFaviconAndRunsAddress(t *testing.T) {
	ts := newPageServer(t)
	resp, err := http.Get(ts.URL + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/x-icon" || len(b) < 22 || string(b[:4]) != "\x00\x00\x01\x00" {
		t.Fatalf("/favicon.ico: %d %q, %d bytes starting %q; want an icon", resp.StatusCode, resp.Header.Get("Content-Type"), len(b), b[:min(4, len(b))])
	}
	pc := ts.signedIn(t, "ada@example.com")
	resp, body := pc.get("/runs")
	expectStatus(t, resp, body, http.StatusFound, "/")
	resp, body = pc.get("/runs?status=running")
	expectStatus(t, resp, body, http.StatusFound, "/?status=running")
}
