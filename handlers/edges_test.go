package handlers

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestOddRequestsAreAnsweredRight: a control byte in any search is a 400
// naming its field (the page says so in words), the transcript of an
// iteration that never ran is a 404, and a text transcript shows an
// agent's NUL and control bytes as escapes, never raw.
func TestOddRequestsAreAnsweredRight(t *testing.T) {
	if onBothStores(t, TestOddRequestsAreAnsweredRight) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	step := doneStep("done")
	step.Transcript = []scripted.Line{{Kind: spec.TranscriptOutput, Text: "nul\x00here \x1b[32mgreen\x1b[0m bell\a end"}}
	id := ts.createRun(t, alice, step)
	ts.waitStatus(t, alice, id, spec.StatusCompleted)

	for _, path := range []string{"/api/runs?q=%00", "/api/runs?q=a%01b", "/api/runs?q=%7F", "/api/search?q=x%00y", "/api/search?q=%1B"} {
		e := ts.expectError(t, alice, "GET", path, nil, http.StatusBadRequest, "invalid", "q")
		if !strings.Contains(e.Error.Message, "control characters") {
			t.Errorf("%s: message %q", path, e.Error.Message)
		}
	}
	pc := ts.signedIn(t, "page@example.com")
	resp, body := pc.get("/?q=%00")
	expectStatus(t, resp, body, http.StatusBadRequest, "")
	expectContains(t, body, "must not contain control characters")
	resp, body = pc.get("/runs/" + id + "/log-search?q=%00")
	if resp.StatusCode == http.StatusOK || strings.Contains(body, "\x00") {
		t.Errorf("log search with a NUL: %d %q", resp.StatusCode, body)
	}

	ts.expectError(t, alice, "GET", "/api/runs/"+id+"/iterations/99/transcript", nil, http.StatusNotFound, "not_found", "")
	ts.expectError(t, alice, "GET", "/api/runs/"+id+"/iterations/99/transcript?format=text", nil, http.StatusNotFound, "not_found", "")

	resp, raw := ts.request(t, alice, "GET", fmt.Sprintf("/api/runs/%s/iterations/1/transcript?format=text", id), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("text transcript: %d %s", resp.StatusCode, raw)
	}
	text := string(raw)
	if strings.ContainsAny(text, "\x00\a") {
		t.Errorf("the text transcript passes raw control bytes: %q", text)
	}
	// PostgreSQL cannot store a NUL: it keeps U+FFFD in its place.
	if !(strings.Contains(text, `nul\x00here`) || strings.Contains(text, "nul\ufffdhere")) || !strings.Contains(text, `bell\x07 end`) || !strings.Contains(text, "\x1b[32mgreen") {
		t.Errorf("the text transcript does not show the bytes as escapes (ANSI kept): %q", text)
	}
	// JSON keeps the bytes, escaped by JSON itself.
	lines, _ := ts.transcriptLines(t, alice, id, 1)
	found := false
	for _, l := range lines {
		found = found || strings.Contains(fmt.Sprint(l["text"]), "bell\a end")
	}
	if !found {
		t.Errorf("the JSON transcript lost the output: %v", lines)
	}
}

// TestTheDashboardFeedStartsAtNow: /api/events with no cursor sends only
// what happens after it connected; since=0 replays everything, since=ID
// from an id, and Last-Event-ID wins over both.
func TestTheDashboardFeedStartsAtNow(t *testing.T) {
	if onBothStores(t, TestTheDashboardFeedStartsAtNow) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	old := ts.createRun(t, alice, doneStep("done"))
	ts.waitStatus(t, alice, old, spec.StatusCompleted)

	feed := ts.openSSE(t, alice, "/api/events")
	// The feed's cursor was taken when it connected: a run created now is
	// the first thing it sends, whether it subscribed before or after.
	fresh := ts.createRun(t, alice, doneStep("done"))
	m, err := feed.NextEvent()
	if err != nil {
		t.Fatal(err)
	}
	if e := m.event(t); e.RunID != fresh || e.Type != spec.EventRunCreated {
		t.Fatalf("a feed with no cursor began with %s of %s, want run_created of the new run %s", e.Type, e.RunID, fresh)
	}
	ts.waitStatus(t, alice, fresh, spec.StatusCompleted)

	all := ts.openSSE(t, alice, "/api/events?since=0")
	m, err = all.NextEvent()
	if err != nil {
		t.Fatal(err)
	}
	first := m.event(t)
	if first.RunID != old || first.Type != spec.EventRunCreated {
		t.Fatalf("since=0 began with %s of %s, want the first run's run_created", first.Type, first.RunID)
	}
	from := ts.openSSE(t, alice, fmt.Sprintf("/api/events?since=%d", first.ID))
	m, err = from.NextEvent()
	if err != nil {
		t.Fatal(err)
	}
	if e := m.event(t); e.ID <= first.ID || e.RunID != old {
		t.Fatalf("since=%d began with %+v", first.ID, e)
	}
	ts.expectError(t, alice, "GET", "/api/events?since=-1", nil, http.StatusBadRequest, "invalid", "since", "Accept", "text/event-stream")
}
