package handlers

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// rowOrder returns the objectives' order of appearance in a run list body.
func rowOrder(body string, objectives ...string) []string {
	type at struct {
		i int
		s string
	}
	var found []at
	for _, o := range objectives {
		if i := strings.Index(body, ">"+o+"<"); i >= 0 {
			found = append(found, at{i, o})
		}
	}
	for i := range found {
		for j := i + 1; j < len(found); j++ {
			if found[j].i < found[i].i {
				found[i], found[j] = found[j], found[i]
			}
		}
	}
	var out []string
	for _, f := range found {
		out = append(out, f.s)
	}
	return out
}

func TestRunListSearchFiltersAndOrder(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	withDoc := doneStep("compared")
	withDoc.Docs = []scripted.Doc{{Path: "notes.md", Content: "The modernc driver is pure Go."}}
	costly := doneStep("wrote it")
	costly.LLM = []spec.LLMCall{{Role: "executor", Model: "m", PromptTokens: 10, CompletionTokens: 10, CostUSD: 0.5, Priced: true}}
	drivers := pc.compose(t, composeForm("Compare drivers", withDoc))
	haiku := pc.compose(t, composeForm("Write a haiku", costly))
	ask := pc.compose(t, composeForm("Ask me", askStep("Which colour?")))
	ts.waitStatus(t, u, drivers, spec.StatusCompleted)
	ts.waitStatus(t, u, haiku, spec.StatusCompleted)
	ts.waitStatus(t, u, ask, spec.StatusWaiting)
	all := []string{"Compare drivers", "Write a haiku", "Ask me"}

	cases := []struct {
		name, query string
		want        []string
	}{
		{"everything, newest first", "", []string{"Ask me", "Write a haiku", "Compare drivers"}},
		{"a word of a document", "q=modernc", []string{"Compare drivers"}},
		{"a word of the objective", "q=haiku", []string{"Write a haiku"}},
		{"stop reason", "stop=completed", []string{"Write a haiku", "Compare drivers"}},
		{"status and search", "status=waiting_on_user&q=ask", []string{"Ask me"}},
		{"executor", "executor=llm", nil},
		{"most expensive first", "sort=cost", []string{"Write a haiku", "Ask me", "Compare drivers"}},
		{"oldest first", "sort=oldest", []string{"Compare drivers", "Write a haiku", "Ask me"}},
		{"dates far in the past", "to=2000-01-01", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := pc.get("/?" + c.query)
			expectStatus(t, resp, body, http.StatusOK, "")
			if got := rowOrder(body, all...); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("rows %v, want %v", got, c.want)
			}
			if c.want == nil {
				expectContains(t, body, "No runs match")
			}
		})
	}

	t.Run("a word of an iteration summary written just before", func(t *testing.T) {
		// The SQLite store indexes summaries later than it writes them;
		// the list indexes what waits before it searches.
		if err := ts.DB.WriteTx(ts.ctx, func(tx spec.Tx) error {
			_, err := tx.PutDocument(ts.ctx, &spec.Document{RunID: drivers, Path: "iterations/009-summary.md", Kind: spec.DocSummary,
				Title: "Iteration 9 summary", Content: "The zeppelin benchmark ran."})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		resp, body := pc.get("/?q=zeppelin")
		expectStatus(t, resp, body, http.StatusOK, "")
		if got := rowOrder(body, all...); !reflect.DeepEqual(got, []string{"Compare drivers"}) {
			t.Fatalf("rows %v, want the run whose summary has the word", got)
		}
	})

	t.Run("the list shows duration, cost and stop reason and keeps its filters live", func(t *testing.T) {
		_, body := pc.get("/?q=haiku&sort=cost")
		expectContains(t, body, "$0.50", ">Completed<", "Duration", "Stop reason", `value="haiku"`,
			`hx-get="/runs/fragment?status=&amp;q=haiku&amp;sort=cost"`, `href="/runs/new?from=`+haiku+`"`,
			`id="sort-cost">Cost ↓`, `aria-sort="descending"`)
		_, body = pc.get("/runs/fragment?status=&q=haiku&sort=cost")
		if got := rowOrder(body, all...); !reflect.DeepEqual(got, []string{"Write a haiku"}) {
			t.Fatalf("fragment rows %v", got)
		}
	})

	t.Run("bad values are refused with a message", func(t *testing.T) {
		resp, body := pc.get("/?from=yesterday")
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "use YYYY-MM-DD")
		resp, body = pc.get("/?sort=random")
		expectStatus(t, resp, body, http.StatusBadRequest, "")
	})

	t.Run("the API filters the same way", func(t *testing.T) {
		var out struct {
			Runs []struct {
				ID string `json:"id"`
			} `json:"runs"`
		}
		tok := ts.user(t, "api@example.com")
		ts.expect(t, tok, "GET", "/api/runs?q=haiku", nil, http.StatusOK, &out)
		if len(out.Runs) != 0 {
			t.Fatalf("another user's runs: %+v", out.Runs)
		}
		ts.expectError(t, tok, "GET", "/api/runs?sort=random", nil, http.StatusBadRequest, "invalid", "sort")
		ts.expectError(t, tok, "GET", "/api/runs?from=1/2/2026", nil, http.StatusBadRequest, "invalid", "from")
	})
}

func TestRunAgainAndFollowUpCopySettings(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	form := composeForm("Count the words", doneStep("counted"))
	form.Set("max_iterations", "7")
	form.Set("max_cost_usd", "1.25")
	form.Set("doc_exists", "report.md")
	form.Set("pattern", "DONE")
	id := pc.compose(t, form)
	ts.waitStatus(t, u, id, spec.StatusStopped) // the checks never pass

	resp, body := pc.get("/runs/" + id)
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, `href="/runs/new?from=`+id+`" id="run-again"`, `href="/runs/new?parent=`+id+`" id="follow-up"`)

	resp, body = pc.get("/runs/new?from=" + id)
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, ">Count the words</textarea>", `value="7"`, `value="1.25"`, `value="report.md"`, `value="DONE"`, `<details id="advanced" open`)
	expectLacks(t, body, `name="parent_run_id"`)

	resp, body = pc.get("/runs/new?parent=" + id)
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, "Follow-up of", `name="parent_run_id" value="`+id+`"`, `value="7"`, `value="report.md"`)
	expectLacks(t, body, ">Count the words</textarea>")

	resp, body = ts.signedIn(t, "eve@example.com").get("/runs/new?from=" + id)
	expectStatus(t, resp, body, http.StatusNotFound, "")
}

func TestFormFromConfigRoundTrips(t *testing.T) {
	s := &Server{opts: Options{ScriptRunsEnabled: false, CommandRunsEnabled: true}}
	admin := &spec.User{IsAdmin: true}
	cfg := spec.Config{
		Objective: "Make the tests pass", Mode: spec.ModeAuto, Model: "m1", Executor: spec.ExecutorCommand,
		Budgets:     spec.Budgets{MaxIterations: 9, MaxRunningMS: 30 * 60_000, MaxCostUSD: 0.1 + 0.2, MaxTotalTokens: 50_000},
		Permissions: spec.Permissions{WriteMode: spec.WriteApprovePlan},
		Completion: spec.Completion{Token: "SHIPPED", Checks: []spec.CheckSpec{
			{Type: spec.CheckCommand, Name: "go test ./...", Argv: []string{"go", "test", "./..."}},
			{Type: spec.CheckCommand, Name: "sh -c test -f 'it''s here'", Argv: []string{"sh", "-c", "test -f 'it''s here'"}},
			{Type: spec.CheckContentPattern, Name: "pattern ok$", Pattern: "ok$", Target: "output"},
			{Type: spec.CheckDocumentExists, Name: "report.md exists", Path: "report.md"},
			{Type: spec.CheckTasksAllDone, Name: "all tasks done"},
		}},
		Breakers: spec.Breakers{NoProgress: 4, RepeatedError: 6},
		Agent:    &spec.Agent{Argv: []string{"./agent.sh", "--prompt file", ""}, Workdir: "proj"},
	}
	f := formFromConfig(&cfg)
	got, fe := s.configFromForm(admin, f)
	if len(fe) != 0 {
		t.Fatalf("form errors %v for %+v", fe, f)
	}
	// Check names are derived from argv when read back; compare the rest.
	for i := range got.Completion.Checks {
		got.Completion.Checks[i].Name = cfg.Completion.Checks[i].Name
	}
	a, _ := json.Marshal(cfg)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		t.Fatalf("round trip:\n got %s\nwant %s", b, a)
	}
}

func TestComposerBudgetsSayWhatEmptyMeansAndRefuseZero(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	_, body := pc.get("/runs/new")
	expectContains(t, body, `id="max_iterations" name="max_iterations" value="" placeholder="no limit"`,
		`placeholder="default 60"`, `id="max_cost_usd" name="max_cost_usd" value="" placeholder="no limit"`,
		"Leave a budget empty for no limit; time defaults to 60 minutes")
	expectLacks(t, body, `placeholder="20"`, `placeholder="2.50"`, `placeholder="500000"`)
	for _, c := range []struct{ field, value, want string }{
		{"max_iterations", "0", "0 is not a limit"},
		{"max_tokens", "0", "0 is not a limit"},
		{"max_cost_usd", "0", "$0 is not a limit"},
		{"no_progress", "0", "0 is not a limit"},
	} {
		form := composeForm("Zero budget", doneStep("done"))
		form.Set(c.field, c.value)
		resp, body := pc.post("/runs", form)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, c.want, `id="`+c.field+`-error"`)
	}
}
