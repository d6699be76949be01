package sqlstore

import (
	"context"
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
	detail := ""
	if f.Detail {
		detail = "r.objective, coalesce(" + r.d.JSONField("r.config", "model") + ", ''), "
	}
	// The metrics, stop-reason and config JSON are read as text and decoded
	// in Go, which reads only the members the report needs: SQL functions
	// over them (the stop type, a budget search of the config) were a third
	// of the query's time. A run has one row per tag (none: one row, tag
	// ''); a per-run string_agg subquery built a temporary b-tree for every
	// run.
	from := "runs r"
	cond := " WHERE " + strings.Join(where, " AND ")
	if f.Limit > 0 {
		// The limit counts runs, not their tag rows.
		from = `(SELECT r.id, r.created_at, r.objective, r.config, r.executor, r.mode, r.status, r.stop_reason, r.metrics
			FROM runs r` + cond + ` ORDER BY r.created_at, r.id LIMIT ?) r`
		args = append(args, f.Limit)
		cond = ""
	}
	q := `SELECT ` + detail + `r.id, r.created_at, r.executor, r.mode, r.status, coalesce(r.stop_reason, ''), r.metrics, r.config,
		EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.type = '` + string(spec.EventRunWaitingOnUser) + `'),
		coalesce(t.tag, '')
		FROM ` + from + ` LEFT JOIN run_tags t ON t.run_id = r.id` + cond + ` ORDER BY r.created_at, r.id`
	rows, err := r.c.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("stats rows: %w", err)
	}
	defer rows.Close()
	// Every row is scanned into the same variables (strings: SQLite's text
	// is not copied again), so that a row costs no allocation of its own.
	var (
		id, objective, model, executor, mode, status, stop, metrics, config, tag string
		created                                                                  int64
		escalated                                                                bool
	)
	dest := []any{&id, &created, &executor, &mode, &status, &stop, &metrics, &config, &escalated, &tag}
	if f.Detail {
		dest = append([]any{&objective, &model}, dest...)
	}
	// Rows are gathered in chunks and copied once into a slice of the
	// right size: appending ten thousand rows to one slice reallocated and
	// cleared it a dozen times, a fifth of the report's time.
	var chunks [][]spec.StatsRow
	chunk := make([]spec.StatsRow, 0, 256)
	var last *spec.StatsRow
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("stats rows: %w", err)
		}
		if last != nil && last.RunID == id {
			// Another tag of the run before.
			last.Tags = append(last.Tags, tag)
			continue
		}
		if last != nil {
			last.Finish()
		}
		if len(chunk) == cap(chunk) {
			chunks = append(chunks, chunk)
			chunk = make([]spec.StatsRow, 0, min(2*cap(chunk), 4096))
		}
		chunk = append(chunk, spec.StatsRow{RunID: id, CreatedAt: msTime(created), Objective: objective, Model: model,
			Executor: executor, Mode: mode, Status: status, Escalated: escalated})
		last = &chunk[len(chunk)-1]
		if tag != "" { // a tag is never empty
			last.Tags = []string{tag}
		}
		if err := decodeStatsRow(last, stop, metrics, config); err != nil {
			return nil, err
		}
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
func decodeStatsRow(row *spec.StatsRow, stop, metrics, config string) error {
	if stop != "" {
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
	if namesBudget(config) {
		budgets, _, err := jsonMember(config, "budgets")
		if err != nil {
			return fmt.Errorf("run %s budgets: %w", row.RunID, err)
		}
		if namesBudget(budgets) {
			var b statsBudgets
			if err := json.Unmarshal([]byte(budgets), &b); err != nil {
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

// namesBudget reports whether s holds "max_cost_usd" or
// "max_total_tokens" (quotes included): one pass over a config, not two.
func namesBudget(s string) bool {
	for {
		i := strings.Index(s, `"max_`)
		if i < 0 {
			return false
		}
		s = s[i+len(`"max_`):]
		if strings.HasPrefix(s, `cost_usd"`) || strings.HasPrefix(s, `total_tokens"`) {
			return true
		}
	}
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
