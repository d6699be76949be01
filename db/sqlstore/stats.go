package sqlstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"homework/engine/spec"
)

// StatsRows returns the user's runs selected by f, oldest first, with the
// figures the report needs: one indexed query over runs, reading the
// metrics and stop-reason JSON, the tags, and whether a run_waiting_on_user
// event exists (a partial index makes that one seek per run). Another
// user's runs are never read.
func (r Reads) StatsRows(ctx context.Context, userID int64, f spec.StatsFilter) ([]spec.StatsRow, error) {
	where := []string{"r.user_id = ?"}
	args := []any{userID}
	if !f.Since.IsZero() {
		where = append(where, "r.created_at >= ?")
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		where = append(where, "r.created_at < ?")
		args = append(args, f.Until.UnixMilli())
	}
	if f.Executor != "" {
		where = append(where, "r.executor = ?")
		args = append(args, f.Executor)
	}
	if f.Mode != "" {
		where = append(where, "r.mode = ?")
		args = append(args, f.Mode)
	}
	if f.Model != "" {
		where = append(where, "coalesce("+r.d.JSONField("r.config", "model")+", '') = ?")
		args = append(args, f.Model)
	}
	if f.Tag != "" {
		where = append(where, "r.id IN (SELECT run_id FROM run_tags WHERE user_id = ? AND tag = ?)")
		args = append(args, userID, f.Tag)
	}
	detail := "'', ''"
	if f.Detail {
		detail = "r.objective, coalesce(" + r.d.JSONField("r.config", "model") + ", '')"
	}
	// The metrics and stop-reason JSON are decoded in Go: one pass over each
	// document instead of one JSON parse per extracted field.
	q := `SELECT r.id, r.created_at, ` + detail + `, r.executor, r.mode, r.status,
		coalesce(r.stop_type, ''), r.metrics,
		CASE WHEN ` + r.d.Contains("r.config", `"max_cost_usd"`) + ` OR ` + r.d.Contains("r.config", `"max_total_tokens"`) + `
			THEN coalesce(` + r.d.JSONField("r.config", "budgets") + `, '') ELSE '' END,
		CASE WHEN r.stop_type IN ('` + spec.StopBudgetCost + `', '` + spec.StopBudgetTokens + `')
			THEN coalesce(` + r.d.JSONField("r.stop_reason", "evidence.breaker") + `, '') ELSE '' END,
		EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.type = '` + string(spec.EventRunWaitingOnUser) + `'),
		coalesce((SELECT string_agg(tag, ',' ORDER BY tag) FROM run_tags t WHERE t.run_id = r.id), '')
		FROM runs r WHERE ` + strings.Join(where, " AND ") + ` ORDER BY r.created_at, r.id`
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := r.c.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("stats rows: %w", err)
	}
	defer rows.Close()
	// Rows are gathered in chunks and copied once into a slice of the
	// right size: appending ten thousand rows to one slice reallocated and
	// cleared it a dozen times, a fifth of the report's time.
	var chunks [][]spec.StatsRow
	chunk := make([]spec.StatsRow, 0, 256)
	for rows.Next() {
		var row spec.StatsRow
		var created int64
		var tags string
		var metrics []byte
		var budgets []byte
		var breaker string
		if err := rows.Scan(&row.RunID, &created, &row.Objective, &row.Model, &row.Executor, &row.Mode, &row.Status, &row.StopReason,
			&metrics, &budgets, &breaker, &row.Escalated, &tags); err != nil {
			return nil, fmt.Errorf("stats rows: %w", err)
		}
		// The budgets object is read (one parse of the config) only when
		// the config names a budget the report counts overshoot of (a plain
		// text match first: most runs have none), and decoded here.
		if bytes.Contains(budgets, []byte(`"max_cost_usd"`)) || bytes.Contains(budgets, []byte(`"max_total_tokens"`)) {
			var b statsBudgets
			if err := json.Unmarshal(budgets, &b); err != nil {
				return nil, fmt.Errorf("run %s budgets: %w", row.RunID, err)
			}
			row.MaxCostUSD, row.MaxTotalTokens = b.MaxCostUSD, b.MaxTotalTokens
		}
		row.StoppedByForecast = breaker == spec.BreakerForecast
		var m statsMetrics
		if err := scanMetrics(metrics, &m); err != nil {
			return nil, fmt.Errorf("run %s metrics: %w", row.RunID, err)
		}
		row.Iterations, row.RunningMS, row.CostUSD, row.TokensTotal = m.Iterations, m.RunningMS, m.CostTotalUSD, m.TokensTotal
		row.ToolCalls, row.FalseCompletionsBlocked = m.ToolCallsTotal, m.FalseCompletionsBlocked
		row.CreatedAt = msTime(created)
		row.Finish(tags)
		if len(chunk) == cap(chunk) {
			chunks = append(chunks, chunk)
			chunk = make([]spec.StatsRow, 0, min(2*cap(chunk), 4096))
		}
		chunk = append(chunk, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return slices.Concat(append(chunks, chunk)...), nil
}

// statsBudgets is the part of a run's budgets the report reads.
type statsBudgets struct {
	MaxCostUSD     float64 `json:"max_cost_usd"`
	MaxTotalTokens int64   `json:"max_total_tokens"`
}

// statsMetrics is the part of a run's Metrics the report reads.
type statsMetrics struct {
	Iterations              int     `json:"iterations"`
	RunningMS               int64   `json:"running_ms"`
	TokensTotal             int64   `json:"tokens_total"`
	CostTotalUSD            float64 `json:"cost_total_usd"`
	ToolCallsTotal          int     `json:"tool_calls_total"`
	FalseCompletionsBlocked int     `json:"false_completions_blocked"`
}
