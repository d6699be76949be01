package handlers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"homework/engine/scripted"
	"homework/engine/spec"
)

func TestCreateRun(t *testing.T) {
	if onBothStores(t, TestCreateRun) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	good := map[string]any{"objective": "do it", "executor": "script", "script": script(askStep("which?"))}

	t.Run("a valid run is created with 201, its id, status, url and Location", func(t *testing.T) {
		var out map[string]any
		resp := ts.expect(t, alice, "POST", "/api/runs", good, http.StatusCreated, &out)
		id, _ := out["run_id"].(string)
		if id == "" || out["status"] == "" || out["url"] != "/runs/"+id {
			t.Fatalf("body %v", out)
		}
		if loc := resp.Header.Get("Location"); loc != "/api/runs/"+id {
			t.Fatalf("Location %q", loc)
		}
	})

	bad := []struct {
		name, body, code, field string
		status                  int
	}{
		{"malformed JSON is 400", `{"objective":`, spec.EINVALID, "", 400},
		{"broken JSON syntax is 400", `{"objective" "x"}`, spec.EINVALID, "", 400},
		{"an unknown field is 400 naming it", `{"objective":"x","executor":"script","script":{"steps":[{}]},"bogus":1}`, spec.EINVALID, "bogus", 400},
		{"a wrong type is 400 naming the field", `{"objective":"x","budgets":{"max_iterations":"many"}}`, spec.EINVALID, "budgets.max_iterations", 400},
		{"a wrong top-level type is 400 naming the field", `{"objective":42}`, spec.EINVALID, "objective", 400},
		{"an out-of-range budget is 400 naming it", `{"objective":"x","executor":"script","script":{"steps":[{}]},"budgets":{"max_iterations":1000000}}`, spec.EINVALID, "budgets.max_iterations", 400},
		{"a negative cost budget is 400", `{"objective":"x","executor":"script","script":{"steps":[{}]},"budgets":{"max_cost_usd":-1}}`, spec.EINVALID, "budgets.max_cost_usd", 400},
		{"an empty objective is 400", `{"objective":"  ","executor":"script","script":{"steps":[{}]}}`, spec.EINVALID, "objective", 400},
		{"an unknown mode is 400", `{"objective":"x","mode":"turbo","executor":"script","script":{"steps":[{}]}}`, spec.EINVALID, "mode", 400},
		{"trailing data is 400", `{"objective":"x"} {}`, spec.EINVALID, "", 400},
		{"an empty body is 400", ``, spec.EINVALID, "", 400},
		{"an array body is 400", `[]`, spec.EINVALID, "", 400},
		{"a missing parent run is 400", `{"objective":"x","executor":"script","script":{"steps":[{}]},"parent_run_id":"nope"}`, spec.EINVALID, "parent_run_id", 400},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			ts.expectError(t, alice, "POST", "/api/runs", tc.body, tc.status, tc.code, tc.field)
		})
	}

	t.Run("a body that is not JSON by Content-Type is 415", func(t *testing.T) {
		ts.expectError(t, alice, "POST", "/api/runs", `{"objective":"x"}`, http.StatusUnsupportedMediaType, "unsupported_media_type", "", "Content-Type", "text/plain")
	})
	t.Run("a body over the limit is 413 as JSON", func(t *testing.T) {
		// Announce a 2 MiB body and send only the headers: the server must
		// answer from Content-Length alone (a client still writing the
		// body could see the connection reset instead of the answer).
		conn, err := net.Dial("tcp", ts.URL[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /api/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", alice.Token, 2<<20)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || eb.Error.Code != spec.ETOOLARGE || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("status %d, error %+v", resp.StatusCode, eb)
		}
	})
	t.Run("no credentials is 401", func(t *testing.T) {
		ts.expectError(t, nil, "POST", "/api/runs", good, http.StatusUnauthorized, spec.EUNAUTHORIZED, "")
	})
	t.Run("a wrong token is 401", func(t *testing.T) {
		ts.expectError(t, &testUser{Token: "hw_wrong"}, "POST", "/api/runs", good, http.StatusUnauthorized, spec.EUNAUTHORIZED, "")
	})
	t.Run("another user's parent run is 400 as if missing", func(t *testing.T) {
		bob := ts.user(t, "bob-parent@example.com")
		parent := ts.createRun(t, bob, askStep("q"))
		body := fmt.Sprintf(`{"objective":"x","executor":"script","script":{"steps":[{}]},"parent_run_id":%q}`, parent)
		ts.expectError(t, alice, "POST", "/api/runs", body, 400, spec.EINVALID, "parent_run_id")
	})
}

func TestListRuns(t *testing.T) {
	if onBothStores(t, TestListRuns) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	var ids []string
	for range 3 {
		ids = append(ids, ts.createRun(t, alice, askStep("q")))
	}
	ts.createRun(t, bob, askStep("q"))

	t.Run("pages through the caller's runs newest first", func(t *testing.T) {
		var got []string
		cursor := ""
		for range 5 {
			var page RunList
			ts.expect(t, alice, "GET", "/api/runs?limit=2&cursor="+cursor, nil, 200, &page)
			for _, r := range page.Runs {
				got = append(got, r.ID)
			}
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		want := []string{ids[2], ids[1], ids[0]}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("filters by status", func(t *testing.T) {
		ts.expect(t, alice, "POST", "/api/runs/"+ids[0]+"/cancel", nil, 200, nil)
		var page RunList
		ts.expect(t, alice, "GET", "/api/runs?status=canceled", nil, 200, &page)
		if len(page.Runs) != 1 || page.Runs[0].ID != ids[0] || page.Runs[0].Status != spec.StatusCanceled {
			t.Fatalf("page %+v", page)
		}
	})
	t.Run("another user's runs are not listed", func(t *testing.T) {
		var page RunList
		ts.expect(t, bob, "GET", "/api/runs", nil, 200, &page)
		if len(page.Runs) != 1 {
			t.Fatalf("bob sees %d runs", len(page.Runs))
		}
	})
	for _, q := range []struct{ query, field string }{
		{"status=sleeping", "status"}, {"limit=0", "limit"}, {"limit=201", "limit"}, {"limit=x", "limit"}, {"cursor=garbage", "cursor"},
	} {
		t.Run("rejects "+q.query, func(t *testing.T) {
			ts.expectError(t, alice, "GET", "/api/runs?"+q.query, nil, 400, spec.EINVALID, q.field)
		})
	}
}

func TestGetRun(t *testing.T) {
	if onBothStores(t, TestGetRun) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	step := doneStep("finished")
	step.Docs = []scripted.Doc{{Path: "report.md", Content: "# Report\nThe recommendation is modernc."}}
	step.Tasks = []scripted.Task{{Title: "write report", Status: "done"}}
	step.LLM = []spec.LLMCall{{Role: "executor", Model: "gpt-test", PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.01, Priced: true}}
	id := ts.createRun(t, alice, step)
	ts.waitStatus(t, alice, id, spec.StatusCompleted)

	t.Run("has the documented shape", func(t *testing.T) {
		var raw map[string]json.RawMessage
		ts.expect(t, alice, "GET", "/api/runs/"+id, nil, 200, &raw)
		for _, k := range []string{"id", "status", "objective", "mode", "executor", "iteration", "created_at", "started_at",
			"completed_at", "stop_reason", "waiting", "metrics", "budgets", "report", "parent_run_id"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("missing %q in %s", k, raw)
			}
		}
		if _, ok := raw["iterations"]; ok {
			t.Errorf("iterations present without include")
		}
		var r struct {
			Status      string `json:"status"`
			CompletedAt string `json:"completed_at"`
			StopReason  struct {
				Type spec.EventType `json:"type"`
			} `json:"stop_reason"`
			Metrics map[string]json.RawMessage `json:"metrics"`
		}
		ts.expect(t, alice, "GET", "/api/runs/"+id, nil, 200, &r)
		if r.Status != spec.StatusCompleted || r.StopReason.Type != "completed" || r.CompletedAt == "" {
			t.Fatalf("run %+v", r)
		}
		for _, k := range []string{"iterations", "running_ms", "tokens_total", "cost_total_usd", "tool_calls_total",
			"false_completions_blocked", "by_model", "unpriced_calls"} {
			if _, ok := r.Metrics[k]; !ok {
				t.Errorf("metrics lacks %q", k)
			}
		}
		if string(r.Metrics["tokens_total"]) != "120" {
			t.Errorf("tokens_total %s", r.Metrics["tokens_total"])
		}
	})
	t.Run("includes iterations and the workspace when asked", func(t *testing.T) {
		var r RunJSON
		ts.expect(t, alice, "GET", "/api/runs/"+id+"?include=iterations,workspace", nil, 200, &r)
		if r.Iterations == nil || len(*r.Iterations) != 1 {
			t.Fatalf("iterations %v", r.Iterations)
		}
		it := (*r.Iterations)[0]
		var gate struct {
			Decision string   `json:"decision"`
			Reasons  []string `json:"reasons"`
		}
		if err := json.Unmarshal(it.Gate, &gate); err != nil || gate.Decision != spec.DecisionComplete {
			t.Fatalf("gate %s: %v", it.Gate, err)
		}
		if it.Iteration != 1 || it.StartedAt == nil || it.EndedAt == nil {
			t.Fatalf("iteration %+v", it)
		}
		if r.Workspace == nil || len(r.Workspace.Tasks) != 1 {
			t.Fatalf("workspace %+v", r.Workspace)
		}
		found := false
		for _, d := range r.Workspace.Documents {
			if d.Content != nil {
				t.Errorf("document %s has content in the tree", d.Path)
			}
			found = found || d.Path == "report.md"
		}
		if !found {
			t.Fatalf("report.md missing from %+v", r.Workspace.Documents)
		}
	})
	t.Run("an unknown include is 400", func(t *testing.T) {
		ts.expectError(t, alice, "GET", "/api/runs/"+id+"?include=everything", nil, 400, spec.EINVALID, "include")
	})
	t.Run("another user's run is 404", func(t *testing.T) {
		ts.expectError(t, bob, "GET", "/api/runs/"+id, nil, 404, spec.ENOTFOUND, "")
		ts.expectError(t, bob, "GET", "/api/runs/"+id+"/documents", nil, 404, spec.ENOTFOUND, "")
		ts.expectError(t, bob, "GET", "/api/runs/"+id+"/events", nil, 404, spec.ENOTFOUND, "")
	})
	t.Run("a missing run is 404", func(t *testing.T) {
		ts.expectError(t, alice, "GET", "/api/runs/nope", nil, 404, spec.ENOTFOUND, "")
	})
	t.Run("an unknown API path is a JSON 404", func(t *testing.T) {
		ts.expectError(t, alice, "GET", "/api/nothing/here", nil, 404, spec.ENOTFOUND, "")
	})
}

func TestRunActions(t *testing.T) {
	if onBothStores(t, TestRunActions) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")

	t.Run("respond answers a waiting run, which then completes", func(t *testing.T) {
		id := ts.createRun(t, alice, askStep("which driver?"), doneStep("done"))
		ts.waitStatus(t, alice, id, spec.StatusWaiting)
		ts.expectError(t, bob, "POST", "/api/runs/"+id+"/respond", `{"answers":["x"]}`, 404, spec.ENOTFOUND, "")
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/respond", `{"answers":[" "]}`, 400, spec.EINVALID, "answers")
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/respond", `{"answers":"x"}`, 400, spec.EINVALID, "answers")
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/respond", `{"reply":"x"}`, 400, spec.EINVALID, "reply")
		var r RunJSON
		ts.expect(t, alice, "POST", "/api/runs/"+id+"/respond", `{"answer":"modernc"}`, 200, &r)
		if r.ID != id {
			t.Fatalf("answer %+v", r)
		}
		ts.waitStatus(t, alice, id, spec.StatusCompleted)
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/respond", `{"answers":["again"]}`, 409, spec.ECONFLICT, "")
	})
	t.Run("message queues for an active run and refuses a finished one", func(t *testing.T) {
		id := ts.createRun(t, alice, askStep("q"))
		ts.waitStatus(t, alice, id, spec.StatusWaiting)
		ts.expect(t, alice, "POST", "/api/runs/"+id+"/message", `{"body":"also check FTS"}`, 200, nil)
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/message", `{"body":""}`, 400, spec.EINVALID, "body")
		ts.expectError(t, bob, "POST", "/api/runs/"+id+"/message", `{"body":"hi"}`, 404, spec.ENOTFOUND, "")
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/message", `hello`, 400, spec.EINVALID, "")
		ts.expect(t, alice, "POST", "/api/runs/"+id+"/cancel", nil, 200, nil)
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/message", `{"body":"late"}`, 409, spec.ECONFLICT, "")
	})
	t.Run("cancel ends a run once; another user's is 404", func(t *testing.T) {
		id := ts.createRun(t, alice, askStep("q"))
		ts.expectError(t, bob, "POST", "/api/runs/"+id+"/cancel", nil, 404, spec.ENOTFOUND, "")
		var r RunJSON
		ts.expect(t, alice, "POST", "/api/runs/"+id+"/cancel", nil, 200, &r)
		if r.Status != spec.StatusCanceled || r.CompletedAt == nil {
			t.Fatalf("canceled run %+v", r)
		}
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/cancel", nil, 409, spec.ECONFLICT, "")
	})
	t.Run("continue resumes a stopped run with raised budgets", func(t *testing.T) {
		work := scripted.Step{Summary: "working", Status: &spec.Status{ProgressSummary: "working", RemainingWork: []string{"more"}}}
		var out struct {
			RunID string `json:"run_id"`
		}
		ts.expect(t, alice, "POST", "/api/runs", map[string]any{"objective": "x", "executor": "script",
			"script": script(work, doneStep("done")), "budgets": map[string]any{"max_iterations": 1}}, 201, &out)
		id := out.RunID
		ts.waitStatus(t, alice, id, spec.StatusStopped)
		ts.expectError(t, bob, "POST", "/api/runs/"+id+"/continue", nil, 404, spec.ENOTFOUND, "")
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/continue", `{"budgets":{"max_iterations":"two"}}`, 400, spec.EINVALID, "budgets.max_iterations")
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/continue", nil, 400, spec.EINVALID, "budgets.max_iterations")
		ts.expect(t, alice, "POST", "/api/runs/"+id+"/continue", `{"budgets":{"max_iterations":2}}`, 200, nil)
		ts.waitStatus(t, alice, id, spec.StatusCompleted)
		ts.expectError(t, alice, "POST", "/api/runs/"+id+"/continue", ``, 409, spec.ECONFLICT, "")
	})
}

func TestDocumentsAndSearch(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	step := askStep("q")
	step.Docs = []scripted.Doc{{Path: "notes/sqlite.md", Content: "modernc is a pure Go SQLite driver"}}
	id := ts.createRun(t, alice, step)
	ts.waitStatus(t, alice, id, spec.StatusWaiting)

	var list struct {
		Documents []DocumentJSON `json:"documents"`
	}
	ts.expect(t, alice, "GET", "/api/runs/"+id+"/documents", nil, 200, &list)
	var docID string
	for _, d := range list.Documents {
		if d.Content != nil {
			t.Errorf("listing has content for %s", d.Path)
		}
		if d.Path == "notes/sqlite.md" {
			docID = d.ID
		}
	}
	if docID == "" {
		t.Fatalf("document missing from %+v", list)
	}

	t.Run("a document comes with its content", func(t *testing.T) {
		var d DocumentJSON
		ts.expect(t, alice, "GET", "/api/documents/"+docID, nil, 200, &d)
		if d.Content == nil || !strings.Contains(*d.Content, "pure Go") || d.RunID != id {
			t.Fatalf("document %+v", d)
		}
	})
	t.Run("another user's document is 404", func(t *testing.T) {
		ts.expectError(t, bob, "GET", "/api/documents/"+docID, nil, 404, spec.ENOTFOUND, "")
	})
	t.Run("search finds the caller's documents only", func(t *testing.T) {
		var res struct {
			Results []SearchHitJSON `json:"results"`
		}
		ts.expect(t, alice, "GET", "/api/search?q=pure+driver", nil, 200, &res)
		if len(res.Results) != 1 || res.Results[0].ID != docID || !strings.Contains(res.Results[0].Snippet, "[") {
			t.Fatalf("results %+v", res)
		}
		ts.expect(t, bob, "GET", "/api/search?q=pure+driver", nil, 200, &res)
		if len(res.Results) != 0 {
			t.Fatalf("bob found %+v", res)
		}
		ts.expectError(t, bob, "GET", "/api/search?q=pure&run_id="+id, nil, 404, spec.ENOTFOUND, "")
	})
	t.Run("search rejects an empty query and a bad limit", func(t *testing.T) {
		ts.expectError(t, alice, "GET", "/api/search?q=", nil, 400, spec.EINVALID, "q")
		ts.expectError(t, alice, "GET", "/api/search?q=%20%20", nil, 400, spec.EINVALID, "q")
		ts.expectError(t, alice, "GET", "/api/search?q=x&limit=1000", nil, 400, spec.EINVALID, "limit")
	})
	t.Run("search input is never FTS syntax", func(t *testing.T) {
		ts.expect(t, alice, "GET", `/api/search?q=%22unbalanced+AND+(+NEAR`, nil, 200, nil)
	})
}

func TestNotifications(t *testing.T) {
	if onBothStores(t, TestNotifications) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	for range 3 {
		id := ts.createRun(t, alice, doneStep("done"))
		ts.waitStatus(t, alice, id, spec.StatusCompleted)
	}

	var first NotificationList
	ts.expect(t, alice, "GET", "/api/notifications?limit=2", nil, 200, &first)
	if len(first.Notifications) != 2 || first.NextCursor == nil || first.Unread != 3 {
		t.Fatalf("first page %+v", first)
	}
	var second NotificationList
	ts.expect(t, alice, "GET", "/api/notifications?limit=2&cursor="+*first.NextCursor, nil, 200, &second)
	if len(second.Notifications) != 1 || second.NextCursor != nil || second.Notifications[0].ID >= first.Notifications[1].ID {
		t.Fatalf("second page %+v", second)
	}
	n := first.Notifications[0]
	if n.Read || n.RunID == "" || n.Kind != "run_completed" || n.ActionURL == "" {
		t.Fatalf("notification %+v", n)
	}

	t.Run("another user's notification is 404", func(t *testing.T) {
		ts.expectError(t, bob, "POST", fmt.Sprintf("/api/notifications/%d/read", n.ID), nil, 404, spec.ENOTFOUND, "")
		var empty NotificationList
		ts.expect(t, bob, "GET", "/api/notifications", nil, 200, &empty)
		if len(empty.Notifications) != 0 || empty.Unread != 0 {
			t.Fatalf("bob sees %+v", empty)
		}
	})
	t.Run("a malformed id is 404 and bad paging is 400", func(t *testing.T) {
		ts.expectError(t, alice, "POST", "/api/notifications/abc/read", nil, 404, spec.ENOTFOUND, "")
		ts.expectError(t, alice, "GET", "/api/notifications?cursor=-1", nil, 400, spec.EINVALID, "cursor")
		ts.expectError(t, alice, "GET", "/api/notifications?limit=0", nil, 400, spec.EINVALID, "limit")
	})
	t.Run("marking read lowers the unread count", func(t *testing.T) {
		var out struct {
			Unread int `json:"unread"`
		}
		ts.expect(t, alice, "POST", fmt.Sprintf("/api/notifications/%d/read", n.ID), nil, 200, &out)
		if out.Unread != 2 {
			t.Fatalf("unread %d", out.Unread)
		}
		ts.expect(t, alice, "POST", "/api/notifications/read-all", nil, 200, &out)
		if out.Unread != 0 {
			t.Fatalf("unread after read-all %d", out.Unread)
		}
		var page NotificationList
		ts.expect(t, alice, "GET", "/api/notifications", nil, 200, &page)
		if !page.Notifications[0].Read || page.Notifications[0].ReadAt == nil {
			t.Fatalf("still unread: %+v", page.Notifications[0])
		}
	})
}

func TestEventsPage(t *testing.T) {
	if onBothStores(t, TestEventsPage) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	bob := ts.user(t, "bob@example.com")
	id := ts.createRun(t, alice, doneStep("done"))
	ts.waitStatus(t, alice, id, spec.StatusCompleted)
	all, err := ts.Store.ListRunEvents(ts.ctx, alice.ID, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("pages through the run's events in seq order", func(t *testing.T) {
		var seqs []int64
		since := int64(0)
		for {
			var page EventPage
			ts.expect(t, alice, "GET", fmt.Sprintf("/api/runs/%s/events?since_seq=%d&limit=3", id, since), nil, 200, &page)
			for _, e := range page.Events {
				seqs = append(seqs, e.Seq)
				if e.RunID != id || e.Type == "" || e.ID == 0 || len(e.Data) == 0 || e.CreatedAt.IsZero() {
					t.Fatalf("event %+v", e)
				}
			}
			since = page.NextSinceSeq
			if !page.HasMore {
				break
			}
		}
		if len(seqs) != len(all) {
			t.Fatalf("got %d events, want %d", len(seqs), len(all))
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("seq %d at %d", s, i)
			}
		}
	})
	t.Run("the user feed pages by global id", func(t *testing.T) {
		var page UserEventPage
		ts.expect(t, alice, "GET", "/api/events?limit=1000", nil, 200, &page)
		if len(page.Events) != len(all) || page.HasMore || page.NextSinceID != all[len(all)-1].ID {
			t.Fatalf("feed has %d events, want %d", len(page.Events), len(all))
		}
		ts.expect(t, bob, "GET", "/api/events", nil, 200, &page)
		if len(page.Events) != 0 {
			t.Fatalf("bob sees %d events", len(page.Events))
		}
	})
	for _, q := range []struct{ query, field string }{
		{"since_seq=-1", "since_seq"}, {"since_seq=x", "since_seq"}, {"limit=0", "limit"}, {"limit=1001", "limit"},
	} {
		t.Run("rejects "+q.query, func(t *testing.T) {
			ts.expectError(t, alice, "GET", "/api/runs/"+id+"/events?"+q.query, nil, 400, spec.EINVALID, q.field)
		})
	}
}

func TestMetricsParse(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	id := ts.createRun(t, alice, doneStep("done"))
	ts.waitStatus(t, alice, id, spec.StatusCompleted)
	c := ts.openSSE(t, alice, "/api/runs/"+ts.createRun(t, alice, askStep("q"))+"/events")
	if _, err := c.NextEvent(); err != nil {
		t.Fatal(err)
	}

	resp, body := ts.request(t, nil, "GET", "/metrics", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	for _, name := range []string{"homework_runs", "homework_iterations_total", "homework_iteration_duration_seconds",
		"homework_llm_tokens_total", "homework_llm_cost_usd_total", "homework_sse_subscribers", "homework_queue_depth"} {
		if fams[name] == nil {
			t.Errorf("missing %s", name)
		}
	}
	completed := -1.0
	for _, m := range fams["homework_runs"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "status" && l.GetValue() == spec.StatusCompleted {
				completed = m.GetGauge().GetValue()
			}
		}
	}
	if completed != 1 {
		t.Errorf("homework_runs{status=completed} = %v, want 1", completed)
	}
	if v := fams["homework_sse_subscribers"].GetMetric()[0].GetGauge().GetValue(); v < 1 {
		t.Errorf("homework_sse_subscribers = %v with a stream open", v)
	}
	if v := fams["homework_iterations_total"].GetMetric()[0].GetCounter().GetValue(); v < 1 {
		t.Errorf("homework_iterations_total = %v", v)
	}
}
