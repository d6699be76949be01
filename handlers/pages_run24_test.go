package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

// seedCostRun stores a finished run of executor with the given spend, a
// report and a cost budget, and one iteration with a three-record
// transcript; its id.
func seedCostRun(t *testing.T, ts *testServer, userID int64, executor string, m spec.Metrics) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("cost-%s-%d", executor, time.Now().UnixNano())
	err := ts.Store.WriteTx(ctx, func(tx spec.Tx) error {
		m.Iterations = 1
		run := &spec.Run{ID: id, UserID: userID, Objective: "Spend", Mode: "auto", Executor: executor,
			Config: json.RawMessage(`{"objective":"Spend","executor":"` + executor + `","budgets":{"max_cost_usd":2}}`),
			Status: spec.StatusCompleted, Iteration: 1, StartedAt: tx.Now(), CompletedAt: tx.Now(), Metrics: m,
			Report: &spec.Report{Title: "Spent", Status: spec.StatusCompleted,
				Metrics: spec.ReportMetrics{Iterations: 1, TotalCostUSD: m.CostTotalUSD, TotalTokens: m.TokensTotal}}}
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		it := &spec.Iteration{RunID: id, Iteration: 1, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(),
			EndedAt: tx.Now().Add(time.Second), Metrics: m}
		if err := tx.UpsertIteration(ctx, it); err != nil {
			return err
		}
		// Three records, five lines.
		_, _, err := tx.AppendTranscript(ctx, id, 1, 1<<20, []*spec.TranscriptLine{
			{Kind: spec.TranscriptOutput, Name: "stdout", Text: "one\ntwo\n"},
			{Kind: spec.TranscriptOutput, Name: "stdout", Text: "three\nfour\n"},
			{Kind: spec.TranscriptOutput, Name: "stdout", Text: "five\n"}}, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRunPageCostsReadOneWay: every cost of a run page is in one format —
// "not measured" everywhere for a command run that reported no usage, and
// at least three significant digits for a spend below a dollar — and the
// transcript's size says records, which is what it counts.
func TestRunPageCostsReadOneWay(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	costs := regexp.MustCompile(`(?s)id="cost-total">([^<]*)<.*?budget-use">([^<]*)<.*?id="report".*?tokens · ([^<\n]*?)\s*<.*?id="live-cost">([^<]*)<`)

	t.Run("a command run that reported no usage is not measured everywhere on its page", func(t *testing.T) {
		id := seedCostRun(t, ts, u.ID, spec.ExecutorCommand, spec.Metrics{})
		body := runPageWithModal(t, pc, id)
		m := costs.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("the page's costs not found; body:\n%s", clipBody(body))
		}
		if m[1] != "not measured" || m[2] != "not measured of $2.00" || m[3] != "not measured" || m[4] != "not measured" {
			t.Fatalf("costs: overview %q, budget %q, report %q, live view %q; want not measured in each", m[1], m[2], m[3], m[4])
		}
		expectLacks(t, body, "$0.00<", "$0.00 ")
	})
	t.Run("a spend below a dollar keeps three significant digits everywhere", func(t *testing.T) {
		id := seedCostRun(t, ts, u.ID, spec.ExecutorCommand, spec.Metrics{LLMCalls: 1, CostTotalUSD: 0.0123, CostReportedUSD: 0.0123, TokensTotal: 900,
			ByModel: map[string]spec.ModelUsage{"agent-model": {Calls: 1, CostUSD: 0.0123, CostReportedUSD: 0.0123}}})
		body := runPageWithModal(t, pc, id)
		m := costs.FindStringSubmatch(body)
		if m == nil || m[1] != "$0.0123" || m[2] != "$0.0123 of $2.00" || m[3] != "$0.0123" || m[4] != "$0.0123" {
			t.Fatalf("costs %q; want $0.0123 in each", m)
		}
		expectContains(t, body, `· $0.0123`)     // the iteration's row
		expectLacks(t, body, "$0.01<", "$0.01 ") // the by-model table and anywhere else
	})
	t.Run("the transcript's size counts records, as they are", func(t *testing.T) {
		id := seedCostRun(t, ts, u.ID, spec.ExecutorLLM, spec.Metrics{})
		_, body := pc.get("/runs/" + id)
		expectContains(t, body, "3 records · ")
		expectLacks(t, body, "3 lines")
	})
}

// runPageWithModal returns the run's page followed by its live modal's
// content (fetched when the modal opens).
func runPageWithModal(t *testing.T, pc *pageClient, id string) string {
	t.Helper()
	resp, page := pc.get("/runs/" + id)
	expectStatus(t, resp, page, http.StatusOK, "")
	resp, modal := pc.get("/runs/" + id + "/modal")
	expectStatus(t, resp, modal, http.StatusOK, "")
	return page + modal
}

// TestRunEventsAndLineageFragments: the event history's and the lineage's
// fragments answer hostile input with a readable 400 and another user's
// run with 404, and the history's filter and pages hold only what they
// say.
func TestRunEventsAndLineageFragments(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	id := seedHistoryRun(t, ts, u.ID, "", "Events", spec.StatusCompleted, []seededIteration{{took: time.Second, records: 1}}, 3, 2)
	base := "/runs/" + id + "/events"

	t.Run("bad parameters are a readable 400", func(t *testing.T) {
		for _, tc := range []struct{ query, want string }{
			{"?type=no_such_type", "There is no event type “no_such_type”"},
			{"?type=%3Cscript%3E", "There is no event type “&lt;script&gt;”"},
			{"?type=" + strings.Repeat("x", 300), "type must be the name of an event type"},
			{"?type=%00", "type must be the name of an event type"},
			{"?before=abc", "before must be a whole number"},
			{"?before=-1", "before must be a whole number"},
			{"?before=0", "before must be a whole number"},
			{"?before=99999999999999999999", "before must be a whole number"},
		} {
			resp, body := pc.get(base + tc.query)
			expectStatus(t, resp, body, http.StatusBadRequest, "")
			expectContains(t, body, tc.want)
			expectLacks(t, body, "<script>")
		}
	})
	t.Run("a filter and a page hold only what they say", func(t *testing.T) {
		_, body := pc.get(base + "?type=check_result")
		if n := strings.Count(body, `data-type="check_result"`); n != 2 || strings.Contains(body, `data-type="tool_call"`) {
			t.Fatalf("check_result filter: %d rows; body:\n%s", n, clipBody(body))
		}
		expectContains(t, body, `<option value="check_result" selected>`, "{\n  &#34;iteration&#34;: 2,")
		_, body = pc.get(base + "?before=3")
		if got := regexp.MustCompile(`id="event-(\d+)"`).FindAllStringSubmatch(body, -1); len(got) != 2 || got[0][1] != "2" || got[1][1] != "1" {
			t.Fatalf("the page before seq 3: %v", got)
		}
	})
	t.Run("another user's run is not found", func(t *testing.T) {
		eve := ts.signedIn(t, "eve@example.com")
		for _, p := range []string{base, "/runs/" + id + "/lineage"} {
			resp, body := eve.get(p)
			expectStatus(t, resp, body, http.StatusNotFound, "")
		}
	})
	t.Run("the chain of parents is bounded", func(t *testing.T) {
		parent := ""
		var chain []string
		for i := range 7 {
			parent = seedHistoryRun(t, ts, u.ID, parent, fmt.Sprintf("Run %d of the chain", i), spec.StatusCompleted, nil, 0, 0)
			chain = append(chain, parent)
		}
		_, body := pc.get("/runs/" + chain[6] + "/lineage")
		for i, id := range chain[:6] {
			if shown := strings.Contains(body, `id="lineage-`+id+`"`); shown != (i >= 1) {
				t.Errorf("ancestor %d shown: %v, want %v", i, shown, i >= 1)
			}
		}
		expectContains(t, body, "Earlier runs in the chain are not shown.", `class="this-run"`)
	})
	t.Run("many follow-ups are counted, as a lower bound past the store's list", func(t *testing.T) {
		root := seedHistoryRun(t, ts, u.ID, "", "A run with many follow-ups", spec.StatusCompleted, nil, 0, 0)
		for i := range 25 {
			seedHistoryRun(t, ts, u.ID, root, fmt.Sprintf("Follow-up %d", i), spec.StatusCompleted, nil, 0, 0)
		}
		_, body := pc.get("/runs/" + root + "/lineage")
		expectContains(t, body, "and 5 more follow-ups")
		expectLacks(t, body, "at least")
		for i := 25; i < 55; i++ {
			seedHistoryRun(t, ts, u.ID, root, fmt.Sprintf("Follow-up %d", i), spec.StatusCompleted, nil, 0, 0)
		}
		_, body = pc.get("/runs/" + root + "/lineage")
		expectContains(t, body, "and at least 30 more follow-ups")
	})
	t.Run("a run with neither parent nor follow-ups has no lineage", func(t *testing.T) {
		resp, body := pc.get("/runs/" + id + "/lineage")
		expectStatus(t, resp, body, http.StatusOK, "")
		if strings.TrimSpace(body) != "" {
			t.Fatalf("lineage of a lone run: %q", body)
		}
	})
}
