package pg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"homework/engine/spec"
)

// InsertInbox queues an item for the run's next iteration.
func (tx *Tx) InsertInbox(ctx context.Context, it *spec.InboxItem) error {
	it.CreatedAt = tx.now
	return tx.QueryRow(ctx, `INSERT INTO inbox (run_id, kind, body, created_at) VALUES ($1,$2,$3,$4) RETURNING id`,
		it.RunID, it.Kind, it.Body, tx.now.UnixMilli()).Scan(&it.ID)
}

// PendingInbox returns the run's unconsumed items, oldest first.
func (tx *Tx) PendingInbox(ctx context.Context, runID string) ([]*spec.InboxItem, error) {
	rows, err := tx.Query(ctx, `SELECT id, run_id, kind, body, created_at, consumed_at, consumed_iteration FROM inbox
		WHERE run_id = $1 AND consumed_at IS NULL ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	return scanInbox(rows)
}

func scanInbox(rows pgx.Rows) ([]*spec.InboxItem, error) {
	defer rows.Close()
	var out []*spec.InboxItem
	for rows.Next() {
		var it spec.InboxItem
		var created int64
		var consumed, iter *int64
		if err := rows.Scan(&it.ID, &it.RunID, &it.Kind, &it.Body, &created, &consumed, &iter); err != nil {
			return nil, err
		}
		it.CreatedAt, it.ConsumedAt = time.UnixMilli(created).UTC(), fromMS(consumed)
		if iter != nil {
			it.ConsumedIteration = int(*iter)
		}
		out = append(out, &it)
	}
	return out, rows.Err()
}

// ConsumeInbox marks the run's items up to and including maxID consumed by
// iteration.
func (tx *Tx) ConsumeInbox(ctx context.Context, runID string, maxID int64, iteration int) error {
	_, err := tx.Exec(ctx, `UPDATE inbox SET consumed_at = $1, consumed_iteration = $2
		WHERE run_id = $3 AND id <= $4 AND consumed_at IS NULL`, tx.now.UnixMilli(), iteration, runID, maxID)
	return err
}

// ListInbox returns all of the user's run's inbox items, oldest first.
func (d *DB) ListInbox(ctx context.Context, userID int64, runID string) ([]*spec.InboxItem, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, `SELECT id, run_id, kind, body, created_at, consumed_at, consumed_iteration
		FROM inbox WHERE run_id = $1 ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	return scanInbox(rows)
}

const taskCols = `id, run_id, title, detail, status, passes, position, created_at, updated_at`

func scanTasks(rows pgx.Rows) ([]*spec.Task, error) {
	defer rows.Close()
	var out []*spec.Task
	for rows.Next() {
		var t spec.Task
		var created, updated int64
		if err := rows.Scan(&t.ID, &t.RunID, &t.Title, &t.Detail, &t.Status, &t.Passes, &t.Position, &created, &updated); err != nil {
			return nil, err
		}
		t.CreatedAt, t.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
		out = append(out, &t)
	}
	return out, rows.Err()
}

// InsertTask adds a task at the end of the run's checklist.
func (tx *Tx) InsertTask(ctx context.Context, t *spec.Task) error {
	if t.ID == "" {
		t.ID = uuid.Must(uuid.NewV7()).String()
	}
	if t.Status == "" {
		t.Status = spec.TaskTodo
	}
	t.CreatedAt, t.UpdatedAt = tx.now, tx.now
	return tx.QueryRow(ctx, `INSERT INTO tasks (`+taskCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, (SELECT COALESCE(MAX(position), 0) + 1 FROM tasks WHERE run_id = $2), $7, $7) RETURNING position`,
		t.ID, t.RunID, t.Title, t.Detail, t.Status, t.Passes, tx.now.UnixMilli()).Scan(&t.Position)
}

// UpdateTask writes a task's title, detail, status and passes.
func (tx *Tx) UpdateTask(ctx context.Context, t *spec.Task) error {
	t.UpdatedAt = tx.now
	tag, err := tx.Exec(ctx, `UPDATE tasks SET title=$1, detail=$2, status=$3, passes=$4, updated_at=$5 WHERE id=$6 AND run_id=$7`,
		t.Title, t.Detail, t.Status, t.Passes, tx.now.UnixMilli(), t.ID, t.RunID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Task not found.")
	}
	return nil
}

// ListTasks returns the run's checklist in order, inside tx.
func (tx *Tx) ListTasks(ctx context.Context, runID string) ([]*spec.Task, error) {
	rows, err := tx.Query(ctx, `SELECT `+taskCols+` FROM tasks WHERE run_id = $1 ORDER BY position`, runID)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

// ListTasks returns the user's run's checklist in order.
func (d reads) ListTasks(ctx context.Context, userID int64, runID string) ([]*spec.Task, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := d.q.Query(ctx, `SELECT `+taskCols+` FROM tasks WHERE run_id = $1 ORDER BY position`, runID)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

// InsertNotification stores a notification.
func (tx *Tx) InsertNotification(ctx context.Context, n *spec.Notification) error {
	n.CreatedAt = tx.now
	data := string(n.Data)
	if data == "" {
		data = "{}"
	}
	return tx.QueryRow(ctx, `INSERT INTO notifications (user_id, run_id, kind, title, message, action_url, data, created_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8) RETURNING id`, n.UserID, nullString(n.RunID), n.Kind, n.Title, n.Message, n.ActionURL,
		data, tx.now.UnixMilli()).Scan(&n.ID)
}

// ListNotifications returns up to limit of the user's notifications newest
// first, with id < beforeID when beforeID > 0.
func (d reads) ListNotifications(ctx context.Context, userID int64, beforeID int64, limit int) ([]*spec.Notification, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	rows, err := d.q.Query(ctx, `SELECT id, user_id, run_id, kind, title, message, action_url, data, read_at, created_at
		FROM notifications WHERE user_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, userID, beforeID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.Notification
	for rows.Next() {
		var n spec.Notification
		var runID *string
		var data string
		var read *int64
		var created int64
		if err := rows.Scan(&n.ID, &n.UserID, &runID, &n.Kind, &n.Title, &n.Message, &n.ActionURL, &data, &read, &created); err != nil {
			return nil, err
		}
		n.RunID, n.Data, n.ReadAt, n.CreatedAt = deref(runID), json.RawMessage(data), fromMS(read), time.UnixMilli(created).UTC()
		out = append(out, &n)
	}
	return out, rows.Err()
}

// CountUnread returns how many of the user's notifications are unread.
func (d reads) CountUnread(ctx context.Context, userID int64) (int, error) {
	var n int
	err := d.q.QueryRow(ctx, `SELECT COUNT(*) FROM notifications WHERE user_id = $1 AND read_at IS NULL`, userID).Scan(&n)
	return n, err
}

// MarkNotificationRead marks one of the user's notifications read (id > 0)
// or all of them (id == 0). Another user's notification is ENOTFOUND.
func (d *DB) MarkNotificationRead(ctx context.Context, userID, id int64) error {
	now := d.now().UnixMilli()
	if id == 0 {
		_, err := d.pool.Exec(ctx, `UPDATE notifications SET read_at = $1 WHERE user_id = $2 AND read_at IS NULL`, now, userID)
		return err
	}
	tag, err := d.pool.Exec(ctx, `UPDATE notifications SET read_at = COALESCE(read_at, $1) WHERE id = $2 AND user_id = $3`,
		now, id, userID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Notification not found.")
	}
	return nil
}
