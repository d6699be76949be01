package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestJSONKeysAreExactAndUnknownNestedFieldsNamedByPath(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	for body, field := range map[string]string{
		`{"Objective": "x", "executor": "script", "script": {"steps": [{}]}}`:                             "Objective",
		`{"objective": "x", "budgets": {"max_iters": 3}}`:                                                 "budgets.max_iters",
		`{"objective": "x", "budgets": {"Max_Iterations": 3}}`:                                            "budgets.Max_Iterations",
		`{"objective": "x", "completion": {"checks": [{"type": "command", "argv": ["true"], "tmo": 1}]}}`: "completion.checks[0].tmo",
	} {
		e := ts.expectError(t, alice, "POST", "/api/runs", body, http.StatusBadRequest, spec.EINVALID, field)
		if e.Error.Message == "" {
			t.Errorf("%s: no message", body)
		}
	}
}

func TestWrongMethodAndHugeHeadersAnswerJSON(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	ts.expectError(t, alice, "PUT", "/api/runs", `{}`, http.StatusMethodNotAllowed, "method_not_allowed", "")
	ts.expectError(t, alice, "DELETE", "/api/events", nil, http.StatusMethodNotAllowed, "method_not_allowed", "")
	big := strings.Repeat("x", 64<<10)
	ts.expectError(t, alice, "GET", "/api/runs", nil, http.StatusRequestHeaderFieldsTooLarge, spec.EINVALID, "", "X-Big", big)
}

func TestComposerRefusesACommandRunToANonAdmin(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	pc.get("/runs/new")
	resp, body := pc.post("/runs", url.Values{"objective": {"Fix the build"}, "mode": {"auto"}, "executor": {"command"},
		"agent_argv": {"sh -c true"}, "agent_workdir": {"/tmp"}})
	if resp.StatusCode == http.StatusSeeOther {
		t.Fatalf("a non-admin's command run was created: %s", resp.Header.Get("Location"))
	}
	expectContains(t, body, "command executor is not available")
	page, err := ts.DB.ListRuns(ts.ctx, ts.userID(t, "ada@example.com").ID, spec.RunFilter{})
	if err != nil || len(page.Runs) != 0 {
		t.Fatalf("runs after the refusal: %+v %v", page, err)
	}
}
