package sqlstore

import (
	"context"
	"fmt"

	"homework/engine/spec"
)

// RecentUsage implements spec.UsageReads.
func (tx *Tx) RecentUsage(ctx context.Context, runID string, n int) ([]spec.IterationUsage, error) {
	return recentUsage(ctx, tx.c, runID, n)
}

// FirstIterationUsage implements spec.UsageReads.
func (tx *Tx) FirstIterationUsage(ctx context.Context, userID int64, executor, model, exceptRunID string, n int) ([]spec.IterationUsage, error) {
	return firstIterationUsage(ctx, tx.c, tx.d, userID, executor, model, exceptRunID, n)
}

// RecentUsage implements spec.UsageReads.
func (r Reads) RecentUsage(ctx context.Context, runID string, n int) ([]spec.IterationUsage, error) {
	return recentUsage(ctx, r.c, runID, n)
}

// FirstIterationUsage implements spec.UsageReads.
func (r Reads) FirstIterationUsage(ctx context.Context, userID int64, executor, model, exceptRunID string, n int) ([]spec.IterationUsage, error) {
	return firstIterationUsage(ctx, r.c, r.d, userID, executor, model, exceptRunID, n)
}

// recentUsage reads the metrics of the run's last n finished iterations, by
// the iterations' primary key.
func recentUsage(ctx context.Context, c Conn, runID string, n int) ([]spec.IterationUsage, error) {
	rows, err := c.Query(ctx, `SELECT metrics FROM iterations WHERE run_id = ? AND status IN ('`+spec.IterSucceeded+`', '`+spec.IterFailed+`')
		ORDER BY iteration DESC LIMIT ?`, runID, n)
	if err != nil {
		return nil, fmt.Errorf("recent usage: %w", err)
	}
	return scanUsage(rows)
}

// firstIterationUsage reads the first iterations' metrics of the user's
// last n other runs of executor and model.
func firstIterationUsage(ctx context.Context, c Conn, d *Dialect, userID int64, executor, model, exceptRunID string, n int) ([]spec.IterationUsage, error) {
	rows, err := c.Query(ctx, `SELECT i.metrics FROM runs r JOIN iterations i ON i.run_id = r.id AND i.iteration = 1
		WHERE r.user_id = ? AND r.executor = ? AND r.id != ? AND coalesce(`+d.JSONField("r.config", "model")+`, '') = ?
		AND i.status IN ('`+spec.IterSucceeded+`', '`+spec.IterFailed+`')
		ORDER BY r.created_at DESC, r.id DESC LIMIT ?`, userID, executor, exceptRunID, model, n)
	if err != nil {
		return nil, fmt.Errorf("first iteration usage: %w", err)
	}
	return scanUsage(rows)
}

func scanUsage(rows Rows) ([]spec.IterationUsage, error) {
	defer rows.Close()
	var out []spec.IterationUsage
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		var m statsMetrics
		if err := scanMetrics(b, &m); err != nil {
			return nil, fmt.Errorf("iteration metrics: %w", err)
		}
		out = append(out, spec.IterationUsage{CostUSD: m.CostTotalUSD, Tokens: m.TokensTotal})
	}
	return out, rows.Err()
}
