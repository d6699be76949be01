package handlers

import (
	"net/http"
	"net/url"
	"testing"

	"homework/engine/spec"

	"homework/engine/scripted"
)

func TestLocalPathRefusesWhatBrowsersTurnIntoAnotherSite(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/runs/new", "/runs/new"},
		{"/runs/x?done=created#report", "/runs/x?done=created#report"},
		{"", "/"},
		{"https://evil.example/", "/"},
		{"//evil.example/", "/"},
		{"/\\evil.example/", "/"},
		// Browsers drop tabs and line breaks anywhere in a URL, so these
		// become //evil.example.
		{"/\t/evil.example/", "/"},
		{"/\n/evil.example/", "/"},
		{"/\r/evil.example/", "/"},
		{"/\t\\evil.example/", "/"},
		{"/runs/\x00", "/"},
		{"/runs/\x7f", "/"},
	} {
		if got := localPath(tc.in); got != tc.want {
			t.Errorf("localPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLoginNextWithATabStaysOnThisSite(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")

	t.Run("after signing in", func(t *testing.T) {
		c := newPageClient(t, ts)
		c.get("/login")
		resp, body := c.post("/login", url.Values{"email": {"ada@example.com"}, "password": {pagePassword}, "next": {"/\t/evil.example/"}})
		expectStatus(t, resp, body, http.StatusSeeOther, "/")
	})
	t.Run("when already signed in", func(t *testing.T) {
		resp, body := pc.get("/login?next=%2F%09%2Fevil.example%2F")
		expectStatus(t, resp, body, http.StatusSeeOther, "/")
	})
}

// hugeMinutes times 60,000 wraps around int64 to exactly one hour of
// milliseconds (60 + 2^59 minutes), which the engine would accept.
const hugeMinutes = "576460752303423548"

func TestBudgetMinutesThatOverflowAreRefused(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")

	t.Run("in the composer", func(t *testing.T) {
		f := composeForm("Write a haiku", doneStep("x"))
		f.Set("max_minutes", hugeMinutes)
		pc.get("/runs/new")
		resp, body := pc.post("/runs", f)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="max_minutes-error"`, `value="`+hugeMinutes+`"`)
		page, err := ts.DB.ListRuns(ts.ctx, u.ID, spec.RunFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Runs) != 0 {
			t.Fatalf("a run was created: %+v", page.Runs[0])
		}
	})
	t.Run("in the continue form", func(t *testing.T) {
		f := composeForm("Two steps", scripted.Step{Summary: "step one"}, doneStep("step two"))
		f.Set("max_iterations", "1")
		id := pc.compose(t, f)
		ts.waitStatus(t, u, id, spec.StatusStopped)
		pc.get("/runs/" + id)
		resp, body := pc.post("/runs/"+id+"/continue", url.Values{"max_iterations": {"3"}, "max_minutes": {hugeMinutes}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="control-error"`)
		r, err := ts.DB.FindRun(ts.ctx, u.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != spec.StatusStopped {
			t.Fatalf("run is %s, want it still stopped", r.Status)
		}
	})
}

func TestSearchWithAControlByteIsABadRequest(t *testing.T) {
	ts := newTestServer(t, nil)
	u := ts.user(t, "ada@example.com")
	ts.expectError(t, u, "GET", "/api/search?q=a%00b", nil, http.StatusBadRequest, spec.EINVALID, "q")
	ts.expectError(t, u, "GET", "/api/search?q=a%01b", nil, http.StatusBadRequest, spec.EINVALID, "q")
	ts.expect(t, u, "GET", "/api/search?q=a%20b", nil, http.StatusOK, nil)
}
