package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"homework/engine/spec"

	"homework/engine/scripted"
)

func TestNotificationsResolveThemselves(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	tok, _, err := ts.Store.CreateAPIToken(ts.ctx, u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	u.Token = tok
	var byID map[int64]NotificationJSON
	unread := func() (int, map[string]NotificationJSON) {
		t.Helper()
		var out NotificationList
		ts.expect(t, u, "GET", "/api/notifications", nil, http.StatusOK, &out)
		byRun := map[string]NotificationJSON{}
		byID = map[int64]NotificationJSON{}
		for _, n := range out.Notifications {
			if _, seen := byRun[n.RunID+n.Kind]; !seen {
				byRun[n.RunID+n.Kind] = n
			}
			byID[n.ID] = n
		}
		return out.Unread, byRun
	}

	t.Run("a waiting notification resolves once the run is answered", func(t *testing.T) {
		id := pc.compose(t, composeForm("Ask me", askStep("Which colour?"), askStep("And the size?")))
		ts.waitStatus(t, u, id, spec.StatusWaiting)
		n, byRun := unread()
		if w := byRun[id+"run_waiting_on_user"]; n != 1 || w.Read || w.ResolvedAt != nil {
			t.Fatalf("before: %d unread, %+v", n, w)
		}
		first := byRun[id+"run_waiting_on_user"].ID
		ts.expect(t, u, "POST", "/api/runs/"+id+"/respond", `{"answers":["blue"]}`, http.StatusOK, nil)
		// The run may already have asked its second question (a newer
		// notification of the same kind): look at the first one itself.
		n, _ = unread()
		if w := byID[first]; w.ResolvedAt == nil || !w.Read {
			t.Fatalf("after answering: %d unread, %+v", n, w)
		}
		// It asks again: a new notification that needs the person.
		ts.waitStatus(t, u, id, spec.StatusWaiting)
		if n, _ := unread(); n != 1 {
			t.Fatalf("the second question: %d unread", n)
		}
		ts.expect(t, u, "POST", "/api/runs/"+id+"/cancel", nil, http.StatusOK, nil)
		n, byRun = unread()
		// Cancel notifies (the run ended); the question no longer counts.
		if byRun[id+"run_canceled"].Read || n != 1 {
			t.Fatalf("after canceling: %d unread, %+v", n, byRun)
		}
		_, body := pc.get("/notifications")
		expectContains(t, body, "Resolved")
	})

	t.Run("opening a run reads its notifications and the badge counts what is left", func(t *testing.T) {
		a := pc.compose(t, composeForm("First", doneStep("done")))
		b := pc.compose(t, composeForm("Second", doneStep("done")))
		ts.waitStatus(t, u, a, spec.StatusCompleted)
		ts.waitStatus(t, u, b, spec.StatusCompleted)
		before, _ := unread()
		_, body := pc.get("/runs/" + a)
		if n, _ := unread(); n != before-1 {
			t.Fatalf("unread %d after opening a run, want %d", n, before-1)
		}
		// The page's own badge already leaves the run out.
		expectContains(t, body, `id="unread" class="count`)
		if !strings.Contains(body, ">"+strconv.Itoa(before-1)+"<span class=\"visually-hidden\">unread") {
			t.Fatalf("badge does not show %d:\n%s", before-1, clipBody(body))
		}
		// Live fragments do not count as opening the run.
		pc.get("/runs/" + b + "/live")
		if n, _ := unread(); n != before-1 {
			t.Fatalf("a fragment marked notifications read: %d", n)
		}
		// Another person's run id changes nothing and is a 404.
		resp, body := ts.signedIn(t, "eve@example.com").get("/runs/" + b)
		expectStatus(t, resp, body, http.StatusNotFound, "")
		if n, _ := unread(); n != before-1 {
			t.Fatalf("another user's visit changed the count: %d", n)
		}
	})

	t.Run("a stopped notification resolves once the run is continued", func(t *testing.T) {
		form := composeForm("Needs two", scripted.Step{Summary: "one"}, doneStep("two"))
		form.Set("max_iterations", "1")
		id := pc.compose(t, form)
		ts.waitStatus(t, u, id, spec.StatusStopped)
		ts.expect(t, u, "POST", "/api/runs/"+id+"/continue", `{"budgets":{"max_iterations":3}}`, http.StatusOK, nil)
		ts.waitStatus(t, u, id, spec.StatusCompleted)
		_, byRun := unread()
		if s := byRun[id+"run_stopped"]; s.ResolvedAt == nil {
			t.Fatalf("stopped notification after continue: %+v", s)
		}
		if c := byRun[id+"run_completed"]; c.Read || c.ResolvedAt != nil {
			t.Fatalf("the completion is new: %+v", c)
		}
	})
}
