package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"homework/engine/spec"

	"homework/db"
)

// BenchmarkStats measures GET /api/stats (through the HTTP server, with
// group_by=week) over 10,000 runs with 200,000 iterations, against a plain
// aggregate SQL query over the same runs rows and JSON fields in the same
// run, and reports both and the ratio (target: within 2×). The figures come
// from the runs' metrics, which already sum their iterations, so neither
// side reads the iterations table; they are there so that the database has
// its real size.
//
//	go test ./handlers -run '^$' -bench Stats -benchtime 20x
func BenchmarkStats(b *testing.B) {
	const runs, itersPerRun = 10_000, 20
	ts := newTestServer(b, nil)
	alice := ts.user(b, "alice@example.com")
	bob := ts.user(b, "bob@example.com")
	seedStats(b, ts.DB, alice.ID, runs, itersPerRun)
	seedStats(b, ts.DB, bob.ID, 1000, 5) // another user's rows in the same tables

	plain := func() {
		var n, ended, completed, fcb, tools, iters int64
		var cost float64
		var tokens int64
		err := ts.DB.Reader().QueryRow(`SELECT COUNT(*),
			SUM(status IN ('completed','stopped','canceled','failed')), SUM(status = 'completed'),
			SUM(json_extract(metrics, '$.false_completions_blocked')), SUM(json_extract(metrics, '$.tool_calls_total')),
			SUM(json_extract(metrics, '$.iterations')), SUM(json_extract(metrics, '$.cost_total_usd')),
			SUM(json_extract(metrics, '$.tokens_total'))
			FROM runs WHERE user_id = ?`, alice.ID).Scan(&n, &ended, &completed, &fcb, &tools, &iters, &cost, &tokens)
		if err != nil || n != runs {
			b.Fatalf("plain query: %d runs, %v", n, err)
		}
	}
	api := func() {
		var s StatsJSON
		resp, body := ts.request(b, alice, "GET", "/api/stats?group_by=week", nil)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("stats: %d %s", resp.StatusCode, body)
		}
		if err := json.Unmarshal(body, &s); err != nil || s.Runs != runs {
			b.Fatalf("stats: %d runs, %v", s.Runs, err)
		}
	}
	plain()
	api() // warm both paths (page cache, statement preparation)

	b.ResetTimer()
	var tPlain, tAPI time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		plain()
		tPlain += time.Since(start)
		start = time.Now()
		api()
		tAPI += time.Since(start)
	}
	b.StopTimer()
	perPlain := float64(tPlain.Microseconds()) / 1000 / float64(b.N)
	perAPI := float64(tAPI.Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(perAPI, "api-ms/op")
	b.ReportMetric(perPlain, "plain-sql-ms/op")
	b.ReportMetric(perAPI/perPlain, "ratio")
	b.Logf("runs=%d iterations=%d: GET /api/stats %.1f ms, plain aggregate SQL %.1f ms, ratio %.2f×", runs, runs*itersPerRun, perAPI, perPlain, perAPI/perPlain)
}

// seedStats writes n finished runs of user with iters iterations each,
// their tags, some events and, for every seventh run, a
// run_waiting_on_user event, straight into the tables in one transaction.
func seedStats(b *testing.B, d *db.DB, userID int64, n, iters int) {
	b.Helper()
	ctx := context.Background()
	tx, err := d.Writer().BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	insRun, _ := tx.Prepare(`INSERT INTO runs (id, user_id, objective, mode, executor, config, status, iteration, stop_reason, metrics, created_at, updated_at)
		VALUES (?, ?, ?, 'auto', ?, ?, ?, ?, ?, ?, ?, ?)`)
	insIter, _ := tx.Prepare(`INSERT INTO iterations (run_id, iteration, status, started_at, ended_at, summary, gate, checks, fingerprint, metrics)
		VALUES (?, ?, 'succeeded', ?, ?, 'did some work', ?, '[]', 'fp', ?)`)
	insTag, _ := tx.Prepare(`INSERT INTO run_tags (run_id, user_id, tag) VALUES (?, ?, ?)`)
	insEvent, _ := tx.Prepare(`INSERT INTO events (run_id, user_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, '{}', ?)`)
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	statuses := []string{"completed", "completed", "stopped", "canceled", "failed", "stopped", "completed"}
	reasons := []string{"completed", "completed", "no_progress", "canceled", "error", "max_iterations", "completed"}
	gate := `{"decision":"continue","reasons":["work remains"],"signals":{"progress":"0123456789abcdef","check_score":100,"summary":"did some work"}}`
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%d-run-%06d", userID, i)
		k := i % len(statuses)
		executor := []string{"llm", "command"}[i%2]
		cfg := fmt.Sprintf(`{"objective":"objective %d","mode":"auto","executor":"%s","model":"model-%d","budgets":{"max_iterations":50},"tags":["class-%d"]}`, i, executor, i%3, i%4)
		m := spec.Metrics{Iterations: iters, RunningMS: int64(1000 * (i%90 + 1)), PromptTokens: 1000, CompletionTokens: 200,
			TokensTotal: 1200, CostTotalUSD: 0.01 * float64(i%50), LLMCalls: iters, ToolCallsTotal: 3 * iters,
			FalseCompletionsBlocked: i % 3 / 2, ByModel: map[string]spec.ModelUsage{fmt.Sprintf("model-%d", i%3): {Calls: iters, PromptTokens: 1000, CompletionTokens: 200}}}
		metrics, _ := json.Marshal(m)
		created := base + int64(i)*60_000
		if _, err := insRun.Exec(id, userID, fmt.Sprintf("objective %d", i), executor, cfg, statuses[k], iters,
			fmt.Sprintf(`{"type":%q,"detail":"because"}`, reasons[k]), string(metrics), created, created); err != nil {
			b.Fatal(err)
		}
		im, _ := json.Marshal(spec.Metrics{Iterations: 1, RunningMS: 1000, TokensTotal: 60, ToolCallsTotal: 3})
		for it := 1; it <= iters; it++ {
			if _, err := insIter.Exec(id, it, created+int64(it), created+int64(it)+1000, gate, string(im)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := insTag.Exec(id, userID, fmt.Sprintf("class-%d", i%4)); err != nil {
			b.Fatal(err)
		}
		types := []string{"run_created", "run_started", "iteration_started", "iteration_completed", "run_completed"}
		if i%7 == 0 {
			types[2] = "run_waiting_on_user"
		}
		for seq, typ := range types {
			if _, err := insEvent.Exec(id, userID, seq+1, typ, created); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}
