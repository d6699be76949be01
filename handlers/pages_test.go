package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

func TestSetupLoginLogout(t *testing.T) {
	ts := newPageServer(t)
	pc := newPageClient(t, ts)

	t.Run("with no account every page leads to setup", func(t *testing.T) {
		resp, body := pc.get("/")
		expectStatus(t, resp, body, http.StatusSeeOther, "/setup")
		resp, body = pc.get("/login")
		expectStatus(t, resp, body, http.StatusSeeOther, "/setup")
		resp, body = pc.get("/runs/new", "HX-Request", "true")
		expectStatus(t, resp, body, http.StatusUnauthorized, "")
		if resp.Header.Get("HX-Redirect") != "/setup" {
			t.Fatalf("htmx request: HX-Redirect %q", resp.Header.Get("HX-Redirect"))
		}
	})
	t.Run("setup refuses a form without its CSRF token", func(t *testing.T) {
		resp, body := pc.get("/setup")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "Create account")
		resp, body = pc.post("/setup", url.Values{"csrf": {"-"}, "email": {"a@example.com"}, "password": {"longenough"}, "password2": {"longenough"}})
		expectStatus(t, resp, body, http.StatusForbidden, "")
		resp, body = pc.post("/setup", url.Values{"csrf": {"wrong-token-wrong-token-wrong-token"}, "email": {"a@example.com"}, "password": {"longenough"}, "password2": {"longenough"}})
		expectStatus(t, resp, body, http.StatusForbidden, "")
	})
	t.Run("setup shows field errors and keeps the email", func(t *testing.T) {
		pc.get("/setup")
		resp, body := pc.post("/setup", url.Values{"email": {"ada@example.com"}, "password": {"short"}, "password2": {"short"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "Use at least 8 characters.", `value="ada@example.com"`)
		resp, body = pc.post("/setup", url.Values{"email": {"not-an-email"}, "password": {"longenough"}, "password2": {"different1"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "Enter an email address", "The passwords do not match.")
	})
	t.Run("setup creates the admin and signs in with a Lax HttpOnly cookie", func(t *testing.T) {
		pc.get("/setup")
		resp, body := pc.post("/setup", url.Values{"email": {"ada@example.com"}, "password": {pagePassword}, "password2": {pagePassword}})
		expectStatus(t, resp, body, http.StatusSeeOther, "/runs/new")
		var cookie string
		for _, c := range resp.Header.Values("Set-Cookie") {
			if strings.HasPrefix(c, SessionCookie+"=") {
				cookie = c
			}
		}
		low := strings.ToLower(cookie)
		if !strings.Contains(low, "httponly") || !strings.Contains(low, "samesite=lax") || !strings.Contains(low, "path=/") {
			t.Fatalf("session cookie %q", cookie)
		}
		u, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
		if err != nil || !u.IsAdmin {
			t.Fatalf("first user: %+v, %v", u, err)
		}
		resp, body = pc.get("/")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "ada@example.com", "Sign out")
	})
	t.Run("setup is gone once an account exists", func(t *testing.T) {
		resp, body := newPageClient(t, ts).get("/setup")
		expectStatus(t, resp, body, http.StatusSeeOther, "/login")
		other := newPageClient(t, ts)
		other.get("/login")
		resp, body = other.post("/setup", url.Values{"email": {"eve@example.com"}, "password": {"longenough"}, "password2": {"longenough"}})
		expectStatus(t, resp, body, http.StatusSeeOther, "/login")
	})
	t.Run("sign-out needs the CSRF token and ends the session", func(t *testing.T) {
		resp, body := pc.post("/logout", url.Values{"csrf": {"-"}})
		expectStatus(t, resp, body, http.StatusForbidden, "")
		resp, body = pc.post("/logout", nil)
		expectStatus(t, resp, body, http.StatusSeeOther, "/login")
		resp, body = pc.get("/runs/new")
		expectStatus(t, resp, body, http.StatusSeeOther, "/login?next=%2Fruns%2Fnew")
	})
	t.Run("login with a wrong password is refused readably", func(t *testing.T) {
		body := pc.login("ada@example.com", "wrong password", http.StatusUnauthorized)
		expectContains(t, body, "Wrong email or password.", `value="ada@example.com"`)
	})
	t.Run("login goes back to next, only on this site", func(t *testing.T) {
		c := newPageClient(t, ts)
		c.get("/login?next=/runs/new")
		resp, body := c.post("/login", url.Values{"email": {"ada@example.com"}, "password": {pagePassword}, "next": {"/runs/new"}})
		expectStatus(t, resp, body, http.StatusSeeOther, "/runs/new")
		c2 := newPageClient(t, ts)
		c2.get("/login")
		resp, body = c2.post("/login", url.Values{"email": {"ada@example.com"}, "password": {pagePassword}, "next": {"//evil.example/"}})
		expectStatus(t, resp, body, http.StatusSeeOther, "/")
	})
}

func TestLoginIsRateLimited(t *testing.T) {
	ts := newPageServer(t)
	ts.signedIn(t, "ada@example.com")
	pc := newPageClient(t, ts)
	for i := 0; i < loginAttempts; i++ {
		pc.login("ada@example.com", "wrong password", http.StatusUnauthorized)
	}
	body := pc.login("ada@example.com", "wrong password", http.StatusTooManyRequests)
	expectContains(t, body, "Too many sign-in attempts")
	body = pc.login("ada@example.com", pagePassword, http.StatusTooManyRequests)
	expectContains(t, body, "Wait a minute")
	// Another account from the same address is not affected.
	ts.signedIn(t, "bob@example.com")
}

func TestComposer(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")

	t.Run("the form shows modes, the default model and the missing endpoint", func(t *testing.T) {
		resp, body := pc.get("/runs/new")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `name="objective"`, `value="interactive"`, "test-model (default)", "Advanced", `name="max_cost_usd"`,
			`name="write_mode"`, `name="check_commands"`, `name="pattern"`, `name="tasks_all_done"`, `name="doc_exists"`,
			`name="no_progress"`, "No model endpoint is configured", "HOMEWORK_LLM_BASE_URL", "in the background")
		expectLacks(t, body, `name="agent_argv"`) // not an admin, no command runs
	})
	t.Run("a missing objective is shown next to the field with the input kept", func(t *testing.T) {
		f := composeForm("", doneStep("x"))
		f.Set("max_iterations", "7")
		f.Set("pattern", "(?i)done")
		resp, body := pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="objective-error"`, "Objective is required.", `value="7"`, `value="(?i)done"`)
	})
	t.Run("a bad number opens Advanced with the message", func(t *testing.T) {
		f := composeForm("Write a haiku", doneStep("x"))
		f.Set("max_cost_usd", "lots")
		f.Set("objective", "Write a <b>haiku</b>")
		resp, body := pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="max_cost_usd-error"`, "Enter an amount in US dollars", `<details id="advanced" open`, "Write a &lt;b&gt;haiku&lt;/b&gt;")
	})
	t.Run("the engine's field errors land on the form", func(t *testing.T) {
		f := composeForm("Write a haiku", doneStep("x"))
		f.Set("max_iterations", "100000")
		resp, body := pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="max_iterations-error"`, "Must be between 1 and")
	})
	t.Run("a command check outside a command run is refused in the checks section", func(t *testing.T) {
		f := composeForm("Write a haiku", doneStep("x"))
		f.Set("check_commands", "go test './...'\n")
		resp, body := pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="checks-error"`, "go test &#39;./...&#39;")
		f.Set("check_commands", "go test 'unterminated")
		resp, body = pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="check_commands-error"`, "unterminated quote")
	})
	t.Run("without a model endpoint a model run is refused readably", func(t *testing.T) {
		resp, body := pc.post("/runs", url.Values{"objective": {"Write a haiku"}})
		if resp.StatusCode < 400 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		expectContains(t, body, `id="form-error"`, "not available", `Write a haiku</textarea>`)
	})
	t.Run("the CSRF token is required", func(t *testing.T) {
		f := composeForm("Write a haiku", doneStep("x"))
		f.Set("csrf", "-")
		resp, body := pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusForbidden, "")
	})
	t.Run("a valid run is created with its budgets and checks", func(t *testing.T) {
		f := composeForm("Write a haiku", doneStep("x"))
		f.Set("mode", "interactive")
		f.Set("max_iterations", "4")
		f.Set("max_minutes", "2")
		f.Set("max_cost_usd", "1.50")
		f.Set("max_tokens", "1000")
		f.Set("write_mode", "read_only")
		f.Set("pattern", "x")
		f.Set("pattern_target", "output")
		f.Set("tasks_all_done", "1")
		f.Set("doc_exists", "report.md")
		f.Set("no_progress", "4")
		f.Set("repeated_error", "6")
		id := pc.compose(t, f)
		u := ts.userID(t, "ada@example.com")
		r, err := ts.DB.FindRun(ts.ctx, u.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		cfg := mustConfig(t, r)
		b := cfg.Budgets
		if cfg.Mode != "interactive" || b.MaxIterations != 4 || b.MaxRunningMS != 120000 || b.MaxCostUSD != 1.5 || b.MaxTotalTokens != 1000 ||
			cfg.Permissions.WriteMode != "read_only" || len(cfg.Completion.Checks) != 3 || cfg.Breakers.NoProgress != 4 || cfg.Breakers.RepeatedError != 6 {
			t.Fatalf("config %+v", cfg)
		}
		if c := cfg.Completion.Checks[0]; c.Type != spec.CheckContentPattern || c.Pattern != "x" || c.Target != "output" {
			t.Fatalf("pattern check %+v", c)
		}
	})
	t.Run("ask follow-up prefills the parent and links the new run", func(t *testing.T) {
		parent := pc.compose(t, composeForm("First question", doneStep("x")))
		resp, body := pc.get("/runs/new?parent=" + parent)
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "Ask a follow-up", `name="parent_run_id" value="`+parent+`"`, "First question")
		f := composeForm("Second question", doneStep("x"))
		f.Set("parent_run_id", parent)
		child := pc.compose(t, f)
		r, err := ts.DB.FindRun(ts.ctx, ts.userID(t, "ada@example.com").ID, child)
		if err != nil || r.ParentRunID != parent {
			t.Fatalf("child %+v %v", r, err)
		}
		_, body = pc.get("/runs/" + child + "/lineage")
		expectContains(t, body, "Follow-up chain", `href="/runs/`+parent+`"`, "First question")
	})
	t.Run("another user's run cannot be a parent", func(t *testing.T) {
		other := ts.signedIn(t, "eve@example.com")
		parent := other.compose(t, composeForm("Eve's", doneStep("x")))
		resp, body := pc.get("/runs/new?parent=" + parent)
		expectStatus(t, resp, body, http.StatusNotFound, "")
		f := composeForm("Sneaky", doneStep("x"))
		f.Set("parent_run_id", parent)
		resp, body = pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "Parent run not found.")
	})
}

func TestCommandRunsOnlyForAdmins(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.CommandRunsEnabled = true; o.LLMConfigured = true })
	pc := newPageClient(t, ts)
	pc.get("/setup")
	resp, body := pc.post("/setup", url.Values{"email": {"root@example.com"}, "password": {pagePassword}, "password2": {pagePassword}})
	expectStatus(t, resp, body, http.StatusSeeOther, "/runs/new")
	_, body = pc.get("/runs/new")
	expectContains(t, body, `name="agent_argv"`, `name="agent_workdir"`, `value="command"`)
	expectLacks(t, body, "No model endpoint is configured", `name="script"`)
	_, body = ts.signedIn(t, "bob@example.com").get("/runs/new")
	expectLacks(t, body, `name="agent_argv"`)
}

func mustConfig(t testing.TB, r *spec.Run) *spec.Config {
	t.Helper()
	cfg, err := runConfigOf(r)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestRunListPage(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	done := pc.compose(t, composeForm("Finish <quickly>", doneStep("all done")))
	waiting := pc.compose(t, composeForm("Ask me something", askStep("Which colour?")))
	ts.waitStatus(t, u, done, spec.StatusCompleted)
	ts.waitStatus(t, u, waiting, spec.StatusWaiting)

	resp, body := pc.get("/")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, "Finish &lt;quickly&gt;", "Ask me something", ">Completed<", ">Waiting for you<",
		"of 3</strong> run slots busy", `sse-connect="/api/events?since_id=`, `hx-get="/runs/fragment?status=`, "<time datetime=")
	expectLacks(t, body, "Finish <quickly>")

	resp, body = pc.get("/?status=waiting_on_user")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, "Ask me something")
	expectLacks(t, body, "Finish &lt;quickly&gt;")

	resp, body = pc.get("/runs/fragment?status=completed")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, `id="runs"`, "Finish &lt;quickly&gt;")
	expectLacks(t, body, "<html", "Ask me something")

	resp, body = pc.get("/?cursor=garbage")
	expectStatus(t, resp, body, http.StatusBadRequest, "")
	expectContains(t, body, "Invalid cursor.")

	// Another user sees none of it.
	_, body = ts.signedIn(t, "eve@example.com").get("/")
	expectLacks(t, body, "Ask me something")
	expectContains(t, body, "No runs yet")
}

func TestRunListPaging(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	for i := 0; i < 26; i++ {
		ts.createRunAs(t, u, "paged objective")
	}
	_, body := pc.get("/")
	if n := strings.Count(body, `<tr id="run-`); n != 25 {
		t.Fatalf("first page has %d runs, want 25", n)
	}
	expectContains(t, body, "Next page →")
	i := strings.Index(body, `href="/?cursor=`)
	if i < 0 {
		t.Fatal("no next-page link")
	}
	next := body[i+len(`href="`):]
	next = strings.ReplaceAll(next[:strings.Index(next, `"`)], "&amp;", "&")
	_, body = pc.get(next)
	if n := strings.Count(body, `<tr id="run-`); n != 1 {
		t.Fatalf("second page has %d runs, want 1", n)
	}
	expectContains(t, body, "← First page")
}

// createRunAs creates a queued-or-waiting scripted run straight through the
// engine.
func (ts *testServer) createRunAs(t testing.TB, u *testUser, objective string, steps ...scripted.Step) string {
	t.Helper()
	if len(steps) == 0 {
		steps = []scripted.Step{askStep("?")}
	}
	r, err := ts.Engine.CreateRun(ts.ctx, u.User, spec.Config{Objective: objective, Executor: spec.ExecutorScript, Script: script(steps...)})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func TestShellSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"go test ./...", []string{"go", "test", "./..."}},
		{`bash -c 'echo "hi there"'`, []string{"bash", "-c", `echo "hi there"`}},
		{`a "b c" d\ e`, []string{"a", "b c", "d e"}},
		{`  spaced   out `, []string{"spaced", "out"}},
		{`empty "" arg`, []string{"empty", "", "arg"}},
		{`go vet ./... # and nothing else`, []string{"go", "vet", "./..."}},
	} {
		got, err := shellSplit(tc.in)
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("shellSplit(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`'open`, `"open`, `trailing\`} {
		if _, err := shellSplit(bad); err == nil {
			t.Errorf("shellSplit(%q) succeeded", bad)
		}
	}
}
