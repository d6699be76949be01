package handlers

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// richStep writes a document and a task, spends tokens and completes.
func richStep() scripted.Step {
	s := doneStep("Wrote the findings")
	s.LLM = []spec.LLMCall{{Role: "executor", Model: "model-a", PromptTokens: 1200, CompletionTokens: 300, CostUSD: 0.0123, Priced: true}}
	s.Docs = []scripted.Doc{{Path: "notes/findings.md", Content: "# Findings\n\n<script>alert(1)</script>\n\nIt is **bold**. [A link](https://example.com)\n\n<img src=x onerror=alert(2)>"}}
	s.Tasks = []scripted.Task{{Title: "Write <the> haiku", Status: "done"}}
	return s
}

var docLink = regexp.MustCompile(`href="(/runs/[^"]+/documents/[^"]+)"`)

func TestRunPage(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	f := composeForm("Research <haiku>", richStep())
	f.Set("max_cost_usd", "1")
	id := pc.compose(t, f)
	ts.waitStatus(t, u, id, spec.StatusCompleted)

	resp, body := pc.get("/runs/" + id)
	expectStatus(t, resp, body, http.StatusOK, "")
	t.Run("it shows overview, cost, budgets, timeline, outputs, tree, tasks and report", func(t *testing.T) {
		expectContains(t, body, "Research &lt;haiku&gt;", ">Completed<", `id="cost-total">$0.0123<`, "model-a", ">1500<", "<progress",
			`id="iteration-1"`, "Wrote the findings", "Why we stopped: complete", `id="outputs"`, "findings.md", `id="tree"`,
			"Write &lt;the&gt; haiku", "☑", `id="report"`, "Stopping reason", "Ask follow-up",
			// The settings panel: the full objective, executor, model, modes, budgets, breakers.
			`<details class="card settings" id="settings">`, `class="objective-full">Research &lt;haiku&gt;`, "Write mode", "Breakers", "no progress 3 (default)")
		expectLacks(t, body, "Research <haiku>", "Write <the> haiku", `id="cancel"`, `sse-connect="/api/runs/`)
	})
	t.Run("the live fragments render alone", func(t *testing.T) {
		for path, want := range map[string]string{"/live": `id="cost-total"`, "/controls": `id="follow-up-hint"`, "/modal": `id="live-iteration"`,
			"/timeline?from=1": `id="iteration-1"`, "/work": `id="tree"`, "/iterations/1/log": `class="log-entry`} {
			resp, body := pc.get("/runs/" + id + path)
			expectStatus(t, resp, body, http.StatusOK, "")
			expectContains(t, body, want)
			expectLacks(t, body, "<html")
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Fatalf("%s: Cache-Control %q", path, cc)
			}
		}
	})
	t.Run("a document renders as sanitised markdown", func(t *testing.T) {
		m := docLink.FindStringSubmatch(body)
		if m == nil {
			t.Fatal("no document link")
		}
		resp, doc := pc.get(m[1])
		expectStatus(t, resp, doc, http.StatusOK, "")
		expectContains(t, doc, "<h1", "Findings", "<strong>bold</strong>", `href="https://example.com"`, `rel="nofollow noreferrer noopener"`)
		expectLacks(t, doc, "<script>alert", "onerror", "alert(2)")
		// The update time renders as a <time>, not as template source.
		expectContains(t, doc, "updated ", "<time datetime=")
		expectLacks(t, doc, "@Time(")
	})
	t.Run("another user's run, fragments, controls and documents are 404", func(t *testing.T) {
		eve := ts.signedIn(t, "eve@example.com")
		m := docLink.FindStringSubmatch(body)
		for _, p := range []string{"/runs/" + id, "/runs/" + id + "/live", "/runs/" + id + "/controls", "/runs/" + id + "/modal", "/runs/" + id + "/timeline",
			"/runs/" + id + "/work", "/runs/" + id + "/answer", "/runs/" + id + "/iterations/1/log", "/runs/" + id + "/log-search?q=x", m[1]} {
			resp, b := eve.get(p)
			expectStatus(t, resp, b, http.StatusNotFound, "")
			expectLacks(t, b, "haiku")
		}
		for _, p := range []string{"/cancel", "/continue", "/respond", "/message"} {
			resp, b := eve.post("/runs/"+id+p, url.Values{"answer": {"x"}, "body": {"x"}})
			expectStatus(t, resp, b, http.StatusNotFound, "")
		}
		resp, b := pc.get("/runs/no-such-run")
		expectStatus(t, resp, b, http.StatusNotFound, "")
		expectContains(t, b, "Not found")
	})
	t.Run("reports list the finished run by its report title", func(t *testing.T) {
		resp, body := pc.get("/reports")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "/runs/"+id+"#report", "Research &lt;haiku&gt;")
	})
}

func TestRunControls(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")

	t.Run("a waiting run shows its questions and takes an answer", func(t *testing.T) {
		id := pc.compose(t, composeForm("Ask first", askStep("Which <colour>?"), doneStep("thanks")))
		ts.waitStatus(t, u, id, spec.StatusWaiting)
		_, body := pc.get("/runs/" + id)
		expectContains(t, body, "Waiting for you", "Which &lt;colour&gt;?", `id="respond-form"`, `id="message-form"`, `id="cancel"`, `id="live-modal"`,
			// One event stream per tab: the page follows the run on the feed the layout holds.
			`sse-connect="/api/events?since_id=`, `data-run-id="`+id+`"`, `data-live-on="`, `data-confirm="Cancel this run?`)
		expectLacks(t, body, `id="continue-form"`, `sse-connect="/api/runs/`)
		resp, b := pc.post("/runs/"+id+"/respond", url.Values{"answer": {"   "}})
		expectStatus(t, resp, b, http.StatusBadRequest, "")
		expectContains(t, b, "At least one non-empty answer is required.")
		resp, b = pc.post("/runs/"+id+"/respond", url.Values{"csrf": {"-"}, "answer": {"blue"}})
		expectStatus(t, resp, b, http.StatusForbidden, "")
		expectContains(t, b, "CSRF")
		resp, b = pc.post("/runs/"+id+"/respond", url.Values{"answer": {"blue"}})
		expectStatus(t, resp, b, http.StatusSeeOther, "/runs/"+id+"?done=answered")
		r := ts.waitStatus(t, u, id, spec.StatusCompleted)
		if r.Metrics.Iterations != 2 {
			t.Fatalf("iterations %d", r.Metrics.Iterations)
		}
		_, body = pc.get("/runs/" + id + "?done=answered")
		expectContains(t, body, "Answer sent; the run resumes.", "inbox: answer: blue")
	})
	t.Run("a message is queued and a run is canceled once", func(t *testing.T) {
		id := pc.compose(t, composeForm("Wait for me", askStep("?")))
		ts.waitStatus(t, u, id, spec.StatusWaiting)
		resp, b := pc.post("/runs/"+id+"/message", url.Values{"body": {""}})
		expectStatus(t, resp, b, http.StatusBadRequest, "")
		expectContains(t, b, "Message is empty.")
		resp, b = pc.post("/runs/"+id+"/message", url.Values{"body": {"also this"}})
		expectStatus(t, resp, b, http.StatusSeeOther, "/runs/"+id+"?done=message")
		resp, b = pc.post("/runs/"+id+"/cancel", url.Values{"csrf": {"-"}})
		expectStatus(t, resp, b, http.StatusForbidden, "")
		resp, b = pc.post("/runs/"+id+"/cancel", nil)
		expectStatus(t, resp, b, http.StatusSeeOther, "/runs/"+id+"?done=canceled")
		resp, b = pc.post("/runs/"+id+"/cancel", nil)
		expectStatus(t, resp, b, http.StatusConflict, "")
		expectContains(t, b, `id="control-error"`, "The run is already canceled.", ">Canceled<")
		expectLacks(t, b, `id="cancel"`)
	})
	t.Run("a stopped run continues with a raised budget", func(t *testing.T) {
		f := composeForm("Two steps", scripted.Step{Summary: "step one"}, doneStep("step two"))
		f.Set("max_iterations", "1")
		id := pc.compose(t, f)
		r := ts.waitStatus(t, u, id, spec.StatusStopped)
		if r.StopReason == nil || r.StopReason.Type != "max_iterations" {
			t.Fatalf("stop reason %+v", r.StopReason)
		}
		_, body := pc.get("/runs/" + id)
		expectContains(t, body, ">Stopped<", `id="continue-form"`, "now 1", "Max iterations")
		resp, b := pc.post("/runs/"+id+"/continue", nil)
		expectStatus(t, resp, b, http.StatusBadRequest, "")
		expectContains(t, b, `id="control-error"`, "max_iterations")
		resp, b = pc.post("/runs/"+id+"/continue", url.Values{"max_iterations": {"many"}})
		expectStatus(t, resp, b, http.StatusBadRequest, "")
		expectContains(t, b, "Enter a whole number")
		resp, b = pc.post("/runs/"+id+"/continue", url.Values{"max_iterations": {"3"}})
		expectStatus(t, resp, b, http.StatusSeeOther, "/runs/"+id+"?done=continued")
		ts.waitStatus(t, u, id, spec.StatusCompleted)
		resp, b = pc.post("/runs/"+id+"/continue", url.Values{"max_iterations": {"5"}})
		expectStatus(t, resp, b, http.StatusConflict, "")
		expectContains(t, b, "Only a stopped run, or one waiting on its budget forecast, can be continued")
	})
}

func TestStalledRunShowsEvidence(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	f := composeForm("Spin", scripted.Step{Summary: "spinning <again>", Progress: "same"})
	f.Set("no_progress", "2")
	id := pc.compose(t, f)
	r := ts.waitStatus(t, u, id, spec.StatusStopped)
	if r.StopReason == nil || r.StopReason.Type != "no_progress" {
		t.Fatalf("stop reason %+v", r.StopReason)
	}
	_, body := pc.get("/runs/" + id)
	expectContains(t, body, `class="badge stalled"`, ">Stalled<", "No progress", "Breaker <code>", "Last summaries", "spinning &lt;again&gt;", "Fingerprints")
	_, body = pc.get("/")
	expectContains(t, body, ">Stalled<")
}

func TestNotificationPages(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	a := pc.compose(t, composeForm("First", doneStep("one")))
	ts.waitStatus(t, u, a, spec.StatusCompleted)
	b := pc.compose(t, composeForm("Second", doneStep("two")))
	ts.waitStatus(t, u, b, spec.StatusCompleted)

	resp, body := pc.get("/notifications")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, "Homework complete", `href="/runs/`+a+`"`, `href="/runs/`+b+`"`, `id="read-all"`, `<span id="unread" class="count"`)
	resp, body = pc.get("/notifications/count")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, ">2<")
	if !regexp.MustCompile(`hx-trigger="[^"]*sse:notification_created`).MatchString(body) {
		t.Errorf("the count is not fetched again on notification_created: %s", body)
	}

	_, page := pc.get("/notifications")
	ids := regexp.MustCompile(`action="/notifications/(\d+)/read"`).FindAllStringSubmatch(page, -1)
	if len(ids) != 2 {
		t.Fatalf("mark-read forms: %v", ids)
	}
	resp, body = pc.post("/notifications/"+ids[0][1]+"/read", url.Values{"csrf": {"-"}})
	expectStatus(t, resp, body, http.StatusForbidden, "")
	resp, body = pc.post("/notifications/"+ids[0][1]+"/read", nil)
	expectStatus(t, resp, body, http.StatusSeeOther, "/notifications")
	_, body = pc.get("/notifications/count")
	expectContains(t, body, ">1<")

	eve := ts.signedIn(t, "eve@example.com")
	resp, body = eve.post("/notifications/"+ids[1][1]+"/read", nil)
	expectStatus(t, resp, body, http.StatusNotFound, "")

	resp, body = pc.post("/notifications/read-all", nil)
	expectStatus(t, resp, body, http.StatusSeeOther, "/notifications")
	_, body = pc.get("/notifications")
	expectContains(t, body, `class="count zero"`)
	expectLacks(t, body, `id="read-all"`)
}

func TestPagesSendTheContentSecurityPolicy(t *testing.T) {
	ts := newPageServer(t)
	pc := newPageClient(t, ts)
	for _, p := range []string{"/setup", "/static/vendor/htmx-2.0.11.min.js", "/static/vendor/htmx-ext-sse-2.2.4.min.js", "/static/js/app.js", "/static/css/app.css"} {
		resp, body := pc.get(p)
		expectStatus(t, resp, body, http.StatusOK, "")
		if csp := resp.Header.Get("Content-Security-Policy"); csp == "" || !regexp.MustCompile(`script-src 'self';`).MatchString(csp) {
			t.Fatalf("%s: CSP %q", p, csp)
		}
	}
	_, body := pc.get("/setup")
	expectContains(t, body, `"includeIndicatorStyles":false`)
	expectLacks(t, body, "style=", "onclick", "<script>")
}
