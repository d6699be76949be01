package handlers

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"homework/engine/scripted"
)

func TestReportsPage(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	ada := ts.userID(t, "ada@example.com")
	apiUser := ts.user(t, "api@example.com") // another user's runs must not show
	other := ts.createRunWith(t, apiUser, nil, doneStep("other"))
	ts.waitStatus(t, apiUser, other, "completed")

	form := composeForm("Finish quickly", doneStep("done"))
	form.Set("tags", "before")
	done := pc.compose(t, form)
	form = composeForm("Spin in place", scripted.Step{Summary: "same", Progress: "same"})
	form.Set("tags", "after")
	form.Set("no_progress", "4")
	stalled := pc.compose(t, form)
	ts.waitStatus(t, ada, done, "completed")
	ts.waitStatus(t, ada, stalled, "stopped")

	t.Run("the report shows figures and charts above the finished runs", func(t *testing.T) {
		resp, body := pc.get("/reports?group_by=tag")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `id="figures"`, `id="chart-outcomes"`, `id="chart-stop-reasons"`, `id="chart-iterations"`,
			`id="chart-cost"`, "<svg", "no_progress", `id="groups"`, `id="finished-reports"`, "Finish quickly")
		if !strings.Contains(body, `<div class="value">2</div>`) {
			t.Fatalf("the run count is not 2 (another user's run counted?):\n%s", clipBody(body))
		}
		if i, j := strings.Index(body, `id="effectiveness"`), strings.Index(body, `id="finished-reports"`); i < 0 || j < i {
			t.Fatal("the finished runs list must stay below the report")
		}
	})

	t.Run("two tags compare side by side", func(t *testing.T) {
		resp, body := pc.get("/reports?a_tag=before&b_tag=after")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `id="compare"`, "tag before", "tag after", `id="chart-compare"`, "100%")
	})

	t.Run("the what-if form replays the window", func(t *testing.T) {
		resp, body := pc.get("/reports?whatif=1&wi_no_progress=2")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `id="whatif-totals"`, `id="whatif-runs"`, "stopped_earlier", "at 2 (no_progress)")
		resp, body = pc.get("/reports?whatif=1&wi_no_progress=x")
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="whatif-error"`, "breakers.no_progress")
	})

	t.Run("a bad window is explained on the page", func(t *testing.T) {
		resp, body := pc.get("/reports?since=2026-11-10&until=2026-11-01")
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="report-error"`, "until", `id="finished-reports"`)
		day := time.Now().UTC().AddDate(0, 0, 2).Format(time.DateOnly)
		resp, body = pc.get("/reports?since=" + day)
		expectStatus(t, resp, body, http.StatusOK, "")
		expectLacks(t, body, `id="chart-outcomes"`)
	})

	t.Run("the export links carry the selection", func(t *testing.T) {
		_, body := pc.get("/reports?tag=after")
		expectContains(t, body, `/api/stats/runs?format=csv&amp;tag=after`)
		resp, csv := pc.get("/api/stats/runs?format=csv&tag=after")
		expectStatus(t, resp, csv, http.StatusOK, "")
		if lines := strings.Split(strings.TrimSpace(csv), "\n"); len(lines) != 2 || !strings.Contains(lines[1], stalled) {
			t.Fatalf("csv export = %q", csv)
		}
	})
}
