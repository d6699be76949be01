package handlers

import (
	"net/http"
	"net/url"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestRunPageShowsTheForecastAndAsksBeforeTheBudget: a run composed with a
// cost budget and "ask me" shows, once its next iteration would not fit,
// the numbers and the Continue form (not an answer box); the run page says
// how many more iterations fit at this pace; Continue with a raised budget
// from the page resumes it.
func TestRunPageShowsTheForecastAndAsksBeforeTheBudget(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	spend := func(summary string) scripted.Step {
		return scripted.Step{Summary: summary, Status: &spec.Status{ProgressSummary: summary, RemainingWork: []string{"more"}},
			LLM: []spec.LLMCall{{Model: "m", PromptTokens: 100, CostUSD: 0.3, Priced: true}}}
	}
	f := composeForm("Spend in steps", spend("one"), spend("two"), spend("three"), spend("four"), doneStep("done"))
	f.Set("max_cost_usd", "1")
	f.Set("on_forecast", "ask")
	id := pc.compose(t, f)
	r := ts.waitStatus(t, u, id, spec.StatusWaiting)
	if r.Waiting == nil || r.Waiting.Reason != spec.WaitBudgetForecast || r.Metrics.Iterations != 3 {
		t.Fatalf("run waits for %+v after %d iterations", r.Waiting, r.Metrics.Iterations)
	}
	_, body := pc.get("/runs/" + id)
	expectContains(t, body, `id="forecast"`, "Next iteration: about $0.300 and", "the next iteration does not fit in the budget",
		"the run asks you", "spent $0.900, next iteration forecast $0.300", `id="continue-form"`)
	expectLacks(t, body, `id="respond-form"`)

	resp, b := pc.post("/runs/"+id+"/continue", url.Values{"max_cost_usd": {"1.1"}})
	expectStatus(t, resp, b, http.StatusBadRequest, "")
	expectContains(t, b, `id="control-error"`, "at least $1.20")
	resp, b = pc.post("/runs/"+id+"/continue", url.Values{"max_cost_usd": {"3"}})
	expectStatus(t, resp, b, http.StatusSeeOther, "/runs/"+id+"?done=continued")
	if r = ts.waitStatus(t, u, id, spec.StatusCompleted); r.Metrics.Iterations != 5 {
		t.Fatalf("the continued run completed after %d iterations, want 5", r.Metrics.Iterations)
	}
	_, body = pc.get("/runs/" + id)
	expectContains(t, body, ">Completed<")

	// The composer offers the choice, and refuses a value it does not know.
	_, body = pc.get("/runs/new")
	expectContains(t, body, `name="on_forecast"`, "Ask me before it")
	f = composeForm("Bad choice", doneStep("done"))
	f.Set("on_forecast", "sometimes")
	pc.get("/runs/new")
	resp, b = pc.post("/runs", f)
	expectStatus(t, resp, b, http.StatusBadRequest, "")
	expectContains(t, b, "Must be one of stop, ask, off")
}
