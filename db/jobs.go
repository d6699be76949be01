package db

import (
	"context"
	"homework/engine/spec"
	"time"
)

// QueueDepth returns how many iterate jobs wait to be worked.
func (d *DB) QueueDepth(ctx context.Context) (int, error) {
	var n int
	err := d.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM river_job WHERE state IN ('available', 'retryable', 'scheduled')`).Scan(&n)
	return n, err
}

// RunningRunIDs returns the ids of runs in status running with their lease
// owner and lease end.
func (d *DB) RunningRuns(ctx context.Context) ([]spec.RunLease, error) {
	rows, err := d.reader.QueryContext(ctx, `SELECT id, COALESCE(lease_owner, ''), COALESCE(lease_until, 0) FROM runs WHERE status = 'running' ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spec.RunLease
	for rows.Next() {
		var l spec.RunLease
		var until int64
		if err := rows.Scan(&l.RunID, &l.Owner, &until); err != nil {
			return nil, err
		}
		if until > 0 {
			l.Until = time.UnixMilli(until).UTC()
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
