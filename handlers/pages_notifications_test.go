package handlers

import (
	"net/http"
	"net/url"
	"testing"

	"homework/engine/spec"
)

// TestUnreadCountWhileViewingARun: the count a run's page refreshes names
// the run and reads its notifications; any other id (another user's, an
// unknown or an overlong one) reads nothing and is not echoed back.
func TestUnreadCountWhileViewingARun(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	eve := ts.signedIn(t, "eve@example.com")
	a := pc.compose(t, composeForm("First", doneStep("one")))
	b := pc.compose(t, composeForm("Second", doneStep("two")))
	ts.waitStatus(t, u, a, spec.StatusCompleted)
	ts.waitStatus(t, u, b, spec.StatusCompleted)

	_, body := pc.get("/")
	expectContains(t, body, `hx-get="/notifications/count"`)
	resp, body := eve.get("/notifications/count?viewing="+a, "HX-Request", "true")
	expectStatus(t, resp, body, http.StatusOK, "")
	_, body = pc.get("/notifications/count?viewing="+url.QueryEscape(`x" onmouseover="alert(1)`), "HX-Request", "true")
	expectContains(t, body, ">2<", `hx-get="/notifications/count?viewing=x%22+onmouseover%3D%22alert%281%29"`)

	// A plain GET (a link from anywhere, which cannot send HX-Request)
	// reads nothing; the page's own refresh does.
	resp, body = pc.get("/notifications/count?viewing=" + a)
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, ">2<")
	resp, body = pc.get("/notifications/count?viewing="+a, "HX-Request", "true")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, ">1<", `hx-get="/notifications/count?viewing=`+a+`"`)
	_, body = pc.get("/notifications")
	expectContains(t, body, `id="group-`+a+`"`, `id="group-`+b+`"`, "1 new")
	_, body = pc.get("/runs/" + b)
	expectContains(t, body, ">0<", `hx-get="/notifications/count?viewing=`+b+`"`)
}
