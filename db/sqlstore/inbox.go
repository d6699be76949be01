package sqlstore

import (
	"context"
	"database/sql"
	"homework/engine/spec"
)

// InsertInbox queues an item for the run's next iteration.
func (tx *Tx) InsertInbox(ctx context.Context, it *spec.InboxItem) error {
	it.CreatedAt = tx.now
	return tx.c.QueryRow(ctx, `INSERT INTO inbox (run_id, kind, body, created_at) VALUES (?,?,?,?) RETURNING id`,
		it.RunID, it.Kind, it.Body, tx.now.UnixMilli()).Scan(&it.ID)
}

// PendingInbox returns the run's unconsumed items, oldest first.
func (r Reads) PendingInbox(ctx context.Context, runID string) ([]*spec.InboxItem, error) {
	rows, err := r.c.Query(ctx, `SELECT id, run_id, kind, body, created_at FROM inbox
		WHERE run_id = ? AND consumed_at IS NULL ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.InboxItem
	for rows.Next() {
		var it spec.InboxItem
		var created int64
		if err := rows.Scan(&it.ID, &it.RunID, &it.Kind, &it.Body, &created); err != nil {
			return nil, err
		}
		it.CreatedAt = msTime(created)
		out = append(out, &it)
	}
	return out, rows.Err()
}

// PendingInbox returns the run's unconsumed items as tx sees them, oldest
// first.
func (tx *Tx) PendingInbox(ctx context.Context, runID string) ([]*spec.InboxItem, error) {
	return Reads{c: tx.c, d: tx.d}.PendingInbox(ctx, runID)
}

// ConsumeInbox marks the run's items up to and including maxID consumed by
// iteration. An iteration reads its items before its beginning transaction
// (or, begun in the transaction that finished the one before, in it) and
// consumes up to the last it read: that misses none only while a run's
// items are inserted under the run's lock (the engine's transitions), so
// that their ids are given in commit order.
func (tx *Tx) ConsumeInbox(ctx context.Context, runID string, maxID int64, iteration int) error {
	_, err := tx.c.Exec(ctx, `UPDATE inbox SET consumed_at = ?, consumed_iteration = ?
		WHERE run_id = ? AND id <= ? AND consumed_at IS NULL`, tx.now.UnixMilli(), iteration, runID, maxID)
	return err
}

// ListInbox returns all of the user's run's inbox items, oldest first.
func (r Reads) ListInbox(ctx context.Context, userID int64, runID string) ([]*spec.InboxItem, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := r.c.Query(ctx, `SELECT id, run_id, kind, body, created_at, consumed_at, consumed_iteration
		FROM inbox WHERE run_id = ? ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.InboxItem
	for rows.Next() {
		var it spec.InboxItem
		var created int64
		var consumed, iter sql.NullInt64
		if err := rows.Scan(&it.ID, &it.RunID, &it.Kind, &it.Body, &created, &consumed, &iter); err != nil {
			return nil, err
		}
		it.CreatedAt, it.ConsumedAt, it.ConsumedIteration = msTime(created), fromMS(consumed), int(iter.Int64)
		out = append(out, &it)
	}
	return out, rows.Err()
}
