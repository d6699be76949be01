package db

import (
	"context"
	"fmt"
	"homework/engine/spec"
	"strconv"
	"strings"
)

// ListReports returns the user's runs that have a report, most recently
// finished first, one page at a time. The cursor is opaque.
func (d reads) ListReports(ctx context.Context, userID int64, cursor string, limit int) (*spec.RunPage, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	where := []string{"user_id = ?", "report IS NOT NULL", "report <> ''", "report <> 'null'"}
	args := []any{userID}
	if cursor != "" {
		at, id, ok := strings.Cut(cursor, "_")
		atMS, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || id == "" {
			return nil, spec.FieldError("cursor", "Invalid cursor.")
		}
		where = append(where, "(COALESCE(completed_at, updated_at) < ? OR (COALESCE(completed_at, updated_at) = ? AND id < ?))")
		args = append(args, atMS, atMS, id)
	}
	args = append(args, limit+1)
	rows, err := d.q.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY COALESCE(completed_at, updated_at) DESC, id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return nil, err
	}
	page := &spec.RunPage{Runs: runs}
	if len(page.Runs) > limit {
		page.Runs = page.Runs[:limit]
		last := page.Runs[len(page.Runs)-1]
		at := last.CompletedAt
		if at.IsZero() {
			at = last.UpdatedAt
		}
		page.NextCursor = fmt.Sprintf("%d_%s", at.UnixMilli(), last.ID)
	}
	return page, nil
}

// ListChildRuns returns the user's follow-up runs of parentID, oldest first.
func (d reads) ListChildRuns(ctx context.Context, userID int64, parentID string) ([]*spec.Run, error) {
	rows, err := d.q.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE user_id = ? AND parent_run_id = ?
		ORDER BY created_at, id LIMIT 50`, userID, parentID)
	if err != nil {
		return nil, err
	}
	return scanRuns(rows)
}

// LastUserEventID returns the id of the newest event of the user's runs, or
// 0. Pages start the dashboard feed after it.
func (d reads) LastUserEventID(ctx context.Context, userID int64) (int64, error) {
	var id int64
	err := d.q.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events WHERE user_id = ?`, userID).Scan(&id)
	return id, err
}
