package handlers

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"homework/engine"
	"homework/engine/scripted"
	"homework/engine/spec"
)

// pagePassword is every page test account's password.
const pagePassword = "correct horse battery"

// pageClient is a browser without JavaScript: a cookie jar, no redirect
// following, and the session's CSRF token picked up from the last page.
type pageClient struct {
	t    testing.TB
	ts   *testServer
	http *http.Client
	csrf string
}

func newPageClient(t testing.TB, ts *testServer) *pageClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &pageClient{t: t, ts: ts, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]*)"`)

func (pc *pageClient) do(req *http.Request) (*http.Response, string) {
	pc.t.Helper()
	resp, err := pc.http.Do(req)
	if err != nil {
		pc.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		pc.t.Fatal(err)
	}
	body := string(b)
	if m := csrfField.FindStringSubmatch(body); m != nil {
		pc.csrf = m[1]
	}
	return resp, body
}

// get fetches path.
func (pc *pageClient) get(path string, header ...string) (*http.Response, string) {
	pc.t.Helper()
	req, err := http.NewRequest("GET", pc.ts.URL+path, nil)
	if err != nil {
		pc.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return pc.do(req)
}

// post submits form to path, adding the last CSRF token seen unless the
// form has a "csrf" value of its own (use "-" to send none).
func (pc *pageClient) post(path string, form url.Values) (*http.Response, string) {
	pc.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	switch form.Get("csrf") {
	case "":
		form.Set("csrf", pc.csrf)
	case "-":
		form.Del("csrf")
	}
	req, err := http.NewRequest("POST", pc.ts.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		pc.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return pc.do(req)
}

// expect checks a response's status and, when want is not empty, where it
// redirects to.
func expectStatus(t testing.TB, resp *http.Response, body string, status int, location string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body:\n%s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, clipBody(body))
	}
	if location != "" && resp.Header.Get("Location") != location {
		t.Fatalf("%s %s: Location %q, want %q", resp.Request.Method, resp.Request.URL.Path, resp.Header.Get("Location"), location)
	}
}

func expectContains(t testing.TB, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Fatalf("page lacks %q; body:\n%s", w, clipBody(body))
		}
	}
}

func expectLacks(t testing.TB, body string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(body, b) {
			t.Fatalf("page has %q; body:\n%s", b, clipBody(body))
		}
	}
}

func clipBody(s string) string {
	if len(s) > 6000 {
		return s[:6000] + "…"
	}
	return s
}

// newPageServer starts a test server whose composer offers the scripted
// executor.
func newPageServer(t testing.TB) *testServer {
	t.Helper()
	return newTestServer(t, func(o *Options) { o.ScriptRunsEnabled = true; o.DefaultModel = "test-model" })
}

// signedIn creates an account (admin when it is the first) with
// pagePassword and returns a client signed in as it.
func (ts *testServer) signedIn(t testing.TB, email string) *pageClient {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(pagePassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Store.CreateUser(ts.ctx, email, string(hash), false); err != nil {
		t.Fatal(err)
	}
	pc := newPageClient(t, ts)
	pc.login(email, pagePassword, http.StatusSeeOther)
	return pc
}

// login signs in through the form and checks the status.
func (pc *pageClient) login(email, password string, status int) string {
	pc.t.Helper()
	resp, body := pc.get("/login")
	expectStatus(pc.t, resp, body, http.StatusOK, "")
	resp, body = pc.post("/login", url.Values{"email": {email}, "password": {password}})
	expectStatus(pc.t, resp, body, status, "")
	if status == http.StatusSeeOther {
		pc.get("/") // pick up the session's CSRF token
	}
	return body
}

// composeForm is a composer form for a scripted run.
func composeForm(objective string, steps ...scripted.Step) url.Values {
	return url.Values{"objective": {objective}, "mode": {"auto"}, "script": {string(script(steps...))}}
}

// compose submits the composer and returns the new run's id.
func (pc *pageClient) compose(t testing.TB, form url.Values) string {
	t.Helper()
	pc.get("/runs/new")
	resp, body := pc.post("/runs", form)
	expectStatus(t, resp, body, http.StatusSeeOther, "")
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, "/runs/") {
		t.Fatalf("composer redirected to %q", loc)
	}
	return strings.TrimPrefix(loc, "/runs/")
}

// userID returns the id of the account email.
func (ts *testServer) userID(t testing.TB, email string) *testUser {
	t.Helper()
	u, err := ts.Store.FindUserByEmail(ts.ctx, email)
	if err != nil {
		t.Fatal(err)
	}
	return &testUser{User: u}
}

func runConfigOf(r *spec.Run) (*spec.Config, error) { return engine.RunConfig(r) }
