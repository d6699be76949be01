package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"homework/engine/spec"
)

// InsertNotification stores a notification.
func (tx *Tx) InsertNotification(ctx context.Context, n *spec.Notification) error {
	n.CreatedAt = tx.now
	data := string(n.Data)
	if data == "" {
		data = "{}"
	}
	return tx.c.QueryRow(ctx, `INSERT INTO notifications (user_id, run_id, kind, title, message, action_url, data, created_at)
		VALUES (?,?,?,?,?,?,?,?) RETURNING id`, n.UserID, nullString(n.RunID), n.Kind, n.Title, n.Message, n.ActionURL,
		data, tx.now.UnixMilli()).Scan(&n.ID)
}

// ListNotifications returns up to limit of the user's notifications newest
// first, with id < beforeID when beforeID > 0.
func (r Reads) ListNotifications(ctx context.Context, userID int64, beforeID int64, limit int) ([]*spec.Notification, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	rows, err := r.c.Query(ctx, `SELECT id, user_id, run_id, kind, title, message, action_url, data, read_at, resolved_at, created_at
		FROM notifications WHERE user_id = ? AND id < ? ORDER BY id DESC LIMIT ?`, userID, beforeID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.Notification
	for rows.Next() {
		var n spec.Notification
		var runID sql.NullString
		var data string
		var read, resolved sql.NullInt64
		var created int64
		if err := rows.Scan(&n.ID, &n.UserID, &runID, &n.Kind, &n.Title, &n.Message, &n.ActionURL, &data, &read, &resolved, &created); err != nil {
			return nil, err
		}
		n.RunID, n.Data, n.ReadAt, n.CreatedAt = runID.String, json.RawMessage(data), fromMS(read), msTime(created)
		n.ResolvedAt = fromMS(resolved)
		out = append(out, &n)
	}
	return out, rows.Err()
}

// CountUnread returns how many of the user's notifications are unread.
func (r Reads) CountUnread(ctx context.Context, userID int64) (int, error) {
	var n int
	err := r.c.QueryRow(ctx, `SELECT COUNT(*) FROM notifications WHERE user_id = ? AND read_at IS NULL`, userID).Scan(&n)
	return n, err
}

// MarkNotificationRead marks one of the user's notifications read (id > 0)
// or all of them (id == 0). Another user's notification is ENOTFOUND.
func (s Store) MarkNotificationRead(ctx context.Context, userID, id int64) error {
	return s.write(ctx, func(tx *Tx) error {
		if id == 0 {
			_, err := tx.c.Exec(ctx, `UPDATE notifications SET read_at = ? WHERE user_id = ? AND read_at IS NULL`, tx.now.UnixMilli(), userID)
			return err
		}
		n, err := tx.c.Exec(ctx, `UPDATE notifications SET read_at = COALESCE(read_at, ?) WHERE id = ? AND user_id = ?`,
			tx.now.UnixMilli(), id, userID)
		if err != nil {
			return err
		}
		if n == 0 {
			return spec.Errorf(spec.ENOTFOUND, "Notification not found.")
		}
		return nil
	})
}

// MarkRunNotificationsRead marks every unread notification of the user's
// run read: opening the run is reading them. It reports how many changed.
func (s Store) MarkRunNotificationsRead(ctx context.Context, userID int64, runID string) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		n, err = tx.c.Exec(ctx, `UPDATE notifications SET read_at = ? WHERE run_id = ? AND user_id = ? AND read_at IS NULL`,
			tx.now.UnixMilli(), runID, userID)
		return err
	})
	return int(n), err
}

// CountRunUnread returns how many of the run's notifications are unread.
func (r Reads) CountRunUnread(ctx context.Context, userID int64, runID string) (int, error) {
	var n int
	err := r.c.QueryRow(ctx, `SELECT COUNT(*) FROM notifications WHERE run_id = ? AND user_id = ? AND read_at IS NULL`,
		runID, userID).Scan(&n)
	return n, err
}

// ResolveRunNotifications resolves the run's unresolved notifications of
// kind: the run has moved on, so they no longer need the person and stop
// counting as unread.
func (tx *Tx) ResolveRunNotifications(ctx context.Context, runID, kind string) error {
	_, err := tx.c.Exec(ctx, `UPDATE notifications SET resolved_at = ?1, read_at = COALESCE(read_at, ?1)
		WHERE run_id = ?2 AND kind = ?3 AND resolved_at IS NULL`, tx.now.UnixMilli(), runID, kind)
	return err
}
