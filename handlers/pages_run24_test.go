package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
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
