package db

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
)

// StatsRows returns the user's runs selected by f, oldest first, with the
// figures the report needs: one indexed query over runs, reading the
// metrics and stop-reason JSON, the tags, and whether a run_waiting_on_user
// event exists (a partial index makes that one seek per run). Another
// user's runs are never read.
func (d *DB) StatsRows(ctx context.Context, userID int64, f StatsFilter) ([]StatsRow, error) {
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
		where = append(where, "coalesce(json_extract(r.config, '$.model'), '') = ?")
		args = append(args, f.Model)
	}
	if f.Tag != "" {
		where = append(where, "r.id IN (SELECT run_id FROM run_tags WHERE user_id = ? AND tag = ?)")
		args = append(args, userID, f.Tag)
	}
	q := `SELECT r.id, r.created_at, r.objective, r.executor, r.mode,
		coalesce(json_extract(r.config, '$.model'), ''), r.status,
		coalesce(json_extract(r.stop_reason, '$.type'), ''),
		coalesce(json_extract(r.metrics, '$.iterations'), 0),
		coalesce(json_extract(r.metrics, '$.running_ms'), 0),
		coalesce(json_extract(r.metrics, '$.cost_total_usd'), 0),
		coalesce(json_extract(r.metrics, '$.tokens_total'), 0),
		coalesce(json_extract(r.metrics, '$.tool_calls_total'), 0),
		coalesce(json_extract(r.metrics, '$.false_completions_blocked'), 0),
		EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.type = 'run_waiting_on_user'),
		coalesce((SELECT group_concat(tag, ',') FROM run_tags t WHERE t.run_id = r.id), '')
		FROM runs r WHERE ` + strings.Join(where, " AND ") + ` ORDER BY r.created_at, r.id`
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := d.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("stats rows: %w", err)
	}
	defer rows.Close()
	var out []StatsRow
	for rows.Next() {
		var r StatsRow
		var created int64
		var tags string
		if err := rows.Scan(&r.RunID, &created, &r.Objective, &r.Executor, &r.Mode, &r.Model, &r.Status, &r.StopReason,
			&r.Iterations, &r.RunningMS, &r.CostUSD, &r.TokensTotal, &r.ToolCalls, &r.FalseCompletionsBlocked,
			&r.Escalated, &tags); err != nil {
			return nil, fmt.Errorf("stats rows: %w", err)
		}
		r.CreatedAt = fromMS(sql.NullInt64{Int64: created, Valid: true})
		r.Tags = []string{}
		if tags != "" {
			r.Tags = strings.Split(tags, ",")
			sort.Strings(r.Tags)
		}
		if r.StopReason == "" && r.Ended() {
			r.StopReason = r.Status
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
