package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestBulkActionsWithoutJavaScript drives POST /runs/bulk as a plain form:
// a confirmation page first, then each run acted on by itself with its own
// outcome; hostile and mistaken input is refused whole and readably.
func TestBulkActionsWithoutJavaScript(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	ada := ts.userID(t, "ada@example.com")
	ts.signedIn(t, "bob@example.com")
	bob := ts.userID(t, "bob@example.com")
	create := func(t *testing.T, u *testUser, objective string, maxIter int, steps ...scripted.Step) string {
		t.Helper()
		cfg := spec.Config{Objective: objective, Executor: spec.ExecutorScript, Script: script(steps...), Budgets: spec.Budgets{MaxIterations: maxIter}}
		run, err := ts.Engine.CreateRun(ts.ctx, u.User, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	slow := scripted.Step{Summary: "slow", SleepMS: 60_000}
	running := create(t, ada, "Slow <b>one</b>", 0, slow)
	finished := create(t, ada, "Quick one", 0, doneStep("done"))
	ts.waitStatus(t, ada, finished, spec.StatusCompleted)
	bobs := create(t, bob, "Bob's secret objective", 0, slow)

	t.Run("without runs, with too many, or with an unknown action nothing is done", func(t *testing.T) {
		pc.get("/")
		resp, body := pc.post("/runs/bulk", url.Values{"action": {"cancel"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="bulk-error"`, "Select at least one run first", "Nothing was changed.")

		many := url.Values{"action": {"cancel"}, "confirm": {"1"}}
		for i := range maxBulkRuns {
			many.Add("ids", fmt.Sprintf("r%d", i))
		}
		many.Add("ids", running)
		resp, body = pc.post("/runs/bulk", many)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "more than 200 runs at once")

		for _, bad := range []string{"a\x00b", "\xff\xfe", "r\x1b[31m"} {
			resp, body = pc.post("/runs/bulk", url.Values{"action": {"cancel"}, "confirm": {"1"}, "ids": {running, bad}})
			expectStatus(t, resp, body, http.StatusBadRequest, "")
			expectContains(t, body, "is not a run id")
			expectLacks(t, body, bad)
		}

		resp, body = pc.post("/runs/bulk", url.Values{"action": {"delete"}, "ids": {running}, "confirm": {"1"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "Choose Cancel selected or Continue selected.")

		resp, body = pc.post("/runs/bulk", url.Values{"action": {"continue"}, "ids": {running}, "confirm": {"1"}, "max_cost_usd": {"lots"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "Cost (USD): Enter an amount in US dollars")

		resp, body = pc.post("/runs/bulk", url.Values{"action": {"continue"}, "ids": {running}, "confirm": {"1"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "Enter at least one raised budget")

		resp, body = pc.post("/runs/bulk", url.Values{"action": {"cancel"}, "ids": {running}, "confirm": {"1"}, "csrf": {"-"}})
		expectStatus(t, resp, body, http.StatusForbidden, "")
		if r, err := ts.Store.FindRun(ts.ctx, ada.ID, running); err != nil || r.Status != spec.StatusRunning && r.Status != spec.StatusQueued {
			t.Fatalf("after refused requests the run is %v (%v)", r.Status, err)
		}
	})

	t.Run("the confirmation names the runs and acts on none", func(t *testing.T) {
		pc.get("/")
		resp, body := pc.post("/runs/bulk", url.Values{"action": {"cancel"}, "ids": {running, bobs, running}})
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `id="bulk-confirm"`, "Cancel 2 runs?", "Slow &lt;b&gt;one&lt;/b&gt;", "Not found: no run of yours has this id.",
			`name="confirm" value="1"`, `name="ids" value="`+running+`"`)
		expectLacks(t, body, "Bob&#39;s secret", "Bob's secret", "<b>one</b>")
		if r, _ := ts.Store.FindRun(ts.ctx, ada.ID, running); r.Status == spec.StatusCanceled {
			t.Fatal("asking to confirm canceled the run")
		}
	})

	t.Run("confirmed, each run is acted on by itself and says what happened", func(t *testing.T) {
		pc.get("/")
		hostile := `<script>alert(1)</script>` + strings.Repeat("x", 100)
		resp, body := pc.post("/runs/bulk", url.Values{"action": {"cancel"}, "confirm": {"1"}, "ids": {running, finished, bobs, hostile}})
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `id="bulk-summary"`, "1 run of 4 canceled", "<strong>Canceled</strong>",
			"<strong>Refused</strong>", "The run is already completed.", "Not found: no run of yours has this id.",
			"&lt;script&gt;alert(1)&lt;/script&gt;xxx")
		expectLacks(t, body, hostile, "Bob&#39;s secret", "Bob's secret")
		ts.waitStatus(t, ada, running, spec.StatusCanceled)
		if r, _ := ts.Store.FindRun(ts.ctx, bob.ID, bobs); r.Status == spec.StatusCanceled {
			t.Fatal("another user's run was canceled")
		}
		if r, _ := ts.Store.FindRun(ts.ctx, ada.ID, finished); r.Status != spec.StatusCompleted {
			t.Fatalf("the finished run is now %s", r.Status)
		}
	})

	t.Run("continue resumes stopped runs and refuses a budget not raised enough", func(t *testing.T) {
		one := create(t, ada, "Stops after one", 1, scripted.Step{Summary: "one"}, doneStep("two"))
		two := create(t, ada, "Also stops after one", 1, scripted.Step{Summary: "one"}, doneStep("two"))
		ts.waitStatus(t, ada, one, spec.StatusStopped)
		ts.waitStatus(t, ada, two, spec.StatusStopped)
		pc.get("/")
		resp, body := pc.post("/runs/bulk", url.Values{"action": {"continue"}, "confirm": {"1"}, "ids": {one}, "max_iterations": {"1"}})
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "<strong>Refused</strong>", "Raise budgets.max_iterations to continue.")
		if r, _ := ts.Store.FindRun(ts.ctx, ada.ID, one); r.Status != spec.StatusStopped {
			t.Fatalf("a refused continue left the run %s", r.Status)
		}
		resp, body = pc.post("/runs/bulk", url.Values{"action": {"continue"}, "confirm": {"1"}, "ids": {one, two, finished}, "max_iterations": {"3"}})
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "2 runs of 3 continued", "<strong>Continued</strong>", "Only a stopped run")
		ts.waitStatus(t, ada, one, spec.StatusCompleted)
		ts.waitStatus(t, ada, two, spec.StatusCompleted)
	})

	t.Run("the run list has a box per run and the bulk bar", func(t *testing.T) {
		_, body := pc.get("/")
		expectContains(t, body, `id="bulk"`, `action="/runs/bulk"`, `name="ids" value="`+running+`" form="bulk"`,
			"Cancel selected", "Continue selected with budget…", `id="bulk-dialog"`, `src="/static/js/list.js"`)
		if strings.Count(body, `class="run-select"`) < 4 {
			t.Fatalf("want a checkbox per run; body:\n%s", clipBody(body))
		}
	})
}
