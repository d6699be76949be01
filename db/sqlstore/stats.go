package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"homework/engine/spec"
)

// StatsRows returns the user's runs selected by f, oldest first, with the
// figures the report needs: one indexed query over runs, their tags (a join
// on the tags' primary key) and whether a run_waiting_on_user event exists
// (a partial index makes that one seek per run). Another user's runs are
// never read.
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
	// The metrics, stop-reason and config JSON are read as text and decoded
	// in Go, which reads only the members the report needs: SQL functions
	// over them (the stop type, a budget search of the config) were a third
	// of the query's time. A run has one row per tag (none: one row, tag
	// NULL); a per-run string_agg subquery built a temporary b-tree for
	// every run.
	from := "runs r"
	cond := " WHERE " + strings.Join(where, " AND ")
	if f.Limit > 0 {
		// The limit counts runs, not their tag rows.
		from = `(SELECT r.id, r.created_at, r.objective, r.config, r.executor, r.mode, r.status, r.stop_reason, r.metrics
			FROM runs r` + cond + ` ORDER BY r.created_at, r.id LIMIT ?) r`
		args = append(args, f.Limit)
		cond = ""
	}
	q := `SELECT r.id, r.created_at, ` + detail + `, r.executor, r.mode, r.status, r.stop_reason, r.metrics, r.config,
		EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.type = '` + string(spec.EventRunWaitingOnUser) + `'),
		t.tag
		FROM ` + from + ` LEFT JOIN run_tags t ON t.run_id = r.id` + cond + ` ORDER BY r.created_at, r.id`
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
	var last *spec.StatsRow
	for rows.Next() {
		var row spec.StatsRow
		var created int64
		var stop, metrics, config []byte
		var tag sql.NullString
		if err := rows.Scan(&row.RunID, &created, &row.Objective, &row.Model, &row.Executor, &row.Mode, &row.Status,
			&stop, &metrics, &config, &row.Escalated, &tag); err != nil {
			return nil, fmt.Errorf("stats rows: %w", err)
		}
		if last != nil && last.RunID == row.RunID {
			// Another tag of the run before.
			last.Tags = append(last.Tags, tag.String)
			continue
		}
		if last != nil {
			last.Finish()
		}
		if err := decodeStatsRow(&row, stop, metrics, config); err != nil {
			return nil, err
		}
		row.CreatedAt = msTime(created)
		if tag.Valid {
			row.Tags = []string{tag.String}
		}
		if len(chunk) == cap(chunk) {
			chunks = append(chunks, chunk)
			chunk = make([]spec.StatsRow, 0, min(2*cap(chunk), 4096))
		}
		chunk = append(chunk, row)
		last = &chunk[len(chunk)-1]
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if last != nil {
		last.Finish()
	}
	return slices.Concat(append(chunks, chunk)...), nil
}

// decodeStatsRow fills row's figures from the run's stop reason, metrics
// and config JSON, as the SQL json_extract of each member would read them.
func decodeStatsRow(row *spec.StatsRow, stop, metrics, config []byte) error {
	if len(stop) > 0 {
		typ, _, err := jsonMember(stop, "type")
		if err != nil {
			return fmt.Errorf("run %s stop reason: %w", row.RunID, err)
		}
		if row.StopReason, err = jsonText(typ); err != nil {
			return fmt.Errorf("run %s stop reason: %w", row.RunID, err)
		}
		if row.StopReason == spec.StopBudgetCost || row.StopReason == spec.StopBudgetTokens {
			breaker, err := jsonPath(stop, "evidence", "breaker")
			if err != nil {
				return fmt.Errorf("run %s stop reason: %w", row.RunID, err)
			}
			row.StoppedByForecast = breaker == spec.BreakerForecast
		}
	}
	// The budgets object is looked for only when the config names a budget
	// the report counts overshoot of (a plain text match first: most runs
	// have none).
	if bytes.Contains(config, []byte(`"max_cost_usd"`)) || bytes.Contains(config, []byte(`"max_total_tokens"`)) {
		budgets, _, err := jsonMember(config, "budgets")
		if err != nil {
			return fmt.Errorf("run %s budgets: %w", row.RunID, err)
		}
		if bytes.Contains(budgets, []byte(`"max_cost_usd"`)) || bytes.Contains(budgets, []byte(`"max_total_tokens"`)) {
			var b statsBudgets
			if err := json.Unmarshal(budgets, &b); err != nil {
				return fmt.Errorf("run %s budgets: %w", row.RunID, err)
			}
			row.MaxCostUSD, row.MaxTotalTokens = b.MaxCostUSD, b.MaxTotalTokens
		}
	}
	var m statsMetrics
	if err := scanMetrics(metrics, &m); err != nil {
		return fmt.Errorf("run %s metrics: %w", row.RunID, err)
	}
	row.Iterations, row.RunningMS, row.CostUSD, row.TokensTotal = m.Iterations, m.RunningMS, m.CostTotalUSD, m.TokensTotal
	row.ToolCalls, row.FalseCompletionsBlocked = m.ToolCallsTotal, m.FalseCompletionsBlocked
	return nil
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
