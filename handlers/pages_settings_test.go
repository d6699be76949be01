package handlers

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var newTokenField = regexp.MustCompile(`id="new-token" readonly value="([^"]+)"`)

func TestTokensPage(t *testing.T) {
	if onBothStores(t, TestTokensPage) {
		return
	}
	ts := newPageServer(t)
	ann := ts.signedIn(t, "ann@example.com")
	bob := ts.signedIn(t, "bob@example.com")

	resp, body := ann.get("/settings/tokens")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, "No tokens yet", `action="/settings/tokens"`, `href="/settings/tokens"`)

	var secret string
	t.Run("a created token is shown once and works against the API", func(t *testing.T) {
		resp, body := ann.post("/settings/tokens", url.Values{"name": {"laptop"}})
		// Redirect after POST: the secret is in neither the URL nor a page
		// a reload would post again.
		expectStatus(t, resp, body, http.StatusSeeOther, "/settings/tokens?done=created")
		expectLacks(t, resp.Header.Get("Location"), "hw_")
		resp, body = ann.get("/settings/tokens?done=created")
		expectStatus(t, resp, body, http.StatusOK, "")
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Fatalf("the page with the secret may be cached: Cache-Control %q", cc)
		}
		m := newTokenField.FindStringSubmatch(body)
		if m == nil || !strings.HasPrefix(m[1], "hw_") {
			t.Fatalf("no new token on the page:\n%s", clipBody(body))
		}
		secret = m[1]
		expectContains(t, body, "shown only this once", "laptop", "never")

		// A reload of the page the create landed on creates nothing and
		// does not show the secret again.
		resp, body = ann.get("/settings/tokens?done=created")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectLacks(t, body, secret, `id="new-token"`)
		expectContains(t, body, "was shown once and is not shown again")
		if toks, err := ts.Store.ListAPITokens(ts.ctx, ts.userID(t, "ann@example.com").ID); err != nil || len(toks) != 1 {
			t.Fatalf("after a reload: tokens %v, %v; want the one created", toks, err)
		}
		// Nor is it shown to another person who lands on that address.
		_, body = bob.get("/settings/tokens?done=created")
		expectLacks(t, body, secret)

		req, _ := http.NewRequest("GET", ts.URL+"/api/runs", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("the new token: status %d", r.StatusCode)
		}
		_, body = ann.get("/settings/tokens")
		expectLacks(t, body, secret, "never")
		expectContains(t, body, "laptop", "Active", "<time")
	})

	t.Run("a token needs a name of sensible length", func(t *testing.T) {
		resp, body := ann.post("/settings/tokens", url.Values{"name": {"  "}})
		expectStatus(t, resp, body, http.StatusUnprocessableEntity, "")
		expectContains(t, body, "Give the token a name")
		resp, body = ann.post("/settings/tokens", url.Values{"name": {strings.Repeat("x", 101)}})
		expectStatus(t, resp, body, http.StatusUnprocessableEntity, "")
		expectContains(t, body, "at most 100")
	})

	t.Run("creating and revoking need the form's CSRF token", func(t *testing.T) {
		resp, body := ann.post("/settings/tokens", url.Values{"name": {"sneaky"}, "csrf": {"-"}})
		expectStatus(t, resp, body, http.StatusForbidden, "")
		_, body = ann.get("/settings/tokens")
		expectLacks(t, body, "sneaky")
	})

	id := ""
	toks, err := ts.Store.ListAPITokens(ts.ctx, ts.userID(t, "ann@example.com").ID)
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens %v %v", toks, err)
	}
	id = strconv.FormatInt(toks[0].ID, 10)

	t.Run("another person cannot see or revoke the token", func(t *testing.T) {
		_, body := bob.get("/settings/tokens")
		expectLacks(t, body, ">laptop<")
		expectContains(t, body, "No tokens yet")
		resp, body := bob.post("/settings/tokens/"+id+"/revoke", nil)
		expectStatus(t, resp, body, http.StatusNotFound, "")
	})

	t.Run("a revoked token is refused by the API", func(t *testing.T) {
		resp, body := ann.post("/settings/tokens/"+id+"/revoke", url.Values{"csrf": {"-"}})
		expectStatus(t, resp, body, http.StatusForbidden, "")
		resp, body = ann.post("/settings/tokens/"+id+"/revoke", nil)
		expectStatus(t, resp, body, http.StatusSeeOther, "/settings/tokens?done=revoked")
		_, body = ann.get("/settings/tokens?done=revoked")
		expectContains(t, body, "Token revoked", "Revoked")
		expectLacks(t, body, `class="link revoke"`)
		req, _ := http.NewRequest("GET", ts.URL+"/api/runs", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("the revoked token: status %d", r.StatusCode)
		}
		resp, body = ann.post("/settings/tokens/"+id+"/revoke", nil)
		expectStatus(t, resp, body, http.StatusNotFound, "")
	})
}
