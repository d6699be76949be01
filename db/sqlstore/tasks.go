package sqlstore

import (
	"context"
	"homework/engine/spec"

	"github.com/google/uuid"
)

const taskCols = `id, run_id, title, detail, status, passes, position, created_at, updated_at`

func scanTasks(rows Rows) ([]*spec.Task, error) {
	defer rows.Close()
	var out []*spec.Task
	for rows.Next() {
		var t spec.Task
		var created, updated int64
		if err := rows.Scan(&t.ID, &t.RunID, &t.Title, &t.Detail, &t.Status, &t.Passes, &t.Position, &created, &updated); err != nil {
			return nil, err
		}
		t.CreatedAt, t.UpdatedAt = msTime(created), msTime(updated)
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
	err := tx.c.QueryRow(ctx, `INSERT INTO tasks (`+taskCols+`)
		VALUES (?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(position), 0) + 1 FROM tasks WHERE run_id = ?), ?, ?) RETURNING position`,
		t.ID, t.RunID, t.Title, t.Detail, t.Status, t.Passes, t.RunID, tx.now.UnixMilli(), tx.now.UnixMilli()).Scan(&t.Position)
	return err
}

// UpdateTask writes a task's title, detail, status and passes.
func (tx *Tx) UpdateTask(ctx context.Context, t *spec.Task) error {
	t.UpdatedAt = tx.now
	n, err := tx.c.Exec(ctx, `UPDATE tasks SET title=?, detail=?, status=?, passes=?, updated_at=? WHERE id=? AND run_id=?`,
		t.Title, t.Detail, t.Status, t.Passes, tx.now.UnixMilli(), t.ID, t.RunID)
	if err != nil {
		return err
	}
	if n == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Task not found.")
	}
	return nil
}

// ListTasks returns the run's checklist in order, inside tx.
func (tx *Tx) ListTasks(ctx context.Context, runID string) ([]*spec.Task, error) {
	rows, err := tx.c.Query(ctx, `SELECT `+taskCols+` FROM tasks WHERE run_id = ? ORDER BY position`, runID)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

// ListTasks returns the user's run's checklist in order.
func (r Reads) ListTasks(ctx context.Context, userID int64, runID string) ([]*spec.Task, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := r.c.Query(ctx, `SELECT `+taskCols+` FROM tasks WHERE run_id = ? ORDER BY position`, runID)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}
