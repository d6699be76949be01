package pg

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"homework/engine/spec"
)

// RenewAttemptLease extends owner's lease only while (iteration, attempt)
// is still the run's current attempt; false otherwise.
func (d *DB) RenewAttemptLease(ctx context.Context, runID, owner string, iteration, attempt int, until time.Time) (bool, error) {
	tag, err := d.pool.Exec(ctx, `UPDATE runs SET lease_until = $1 WHERE id = $2 AND lease_owner = $3 AND status = 'running'
		AND iteration = $4 AND attempt = $5`, until.UnixMilli(), runID, owner, iteration, attempt)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// InsertRunTags records the run's tags for filtering and grouping. The tags
// are already validated (engine.NormalizeTags).
func (tx *Tx) InsertRunTags(ctx context.Context, runID string, userID int64, tags []string) error {
	for _, t := range tags {
		if _, err := tx.Exec(ctx, `INSERT INTO run_tags (run_id, user_id, tag) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			runID, userID, t); err != nil {
			return fmt.Errorf("insert run tag: %w", err)
		}
	}
	return nil
}

// ListUserTags returns every tag on the user's runs with its run count,
// most used first.
func (d reads) ListUserTags(ctx context.Context, userID int64) ([]spec.TagCount, error) {
	rows, err := d.q.Query(ctx, `SELECT tag, COUNT(*) FROM run_tags WHERE user_id = $1
		GROUP BY tag ORDER BY COUNT(*) DESC, tag LIMIT 200`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spec.TagCount
	for rows.Next() {
		var t spec.TagCount
		var n int64
		if err := rows.Scan(&t.Tag, &n); err != nil {
			return nil, err
		}
		t.Runs = int(n)
		out = append(out, t)
	}
	return out, rows.Err()
}

// ResolveRunNotifications resolves (and so reads) the run's unresolved
// notifications of kind: the run moved on from what they asked.
func (tx *Tx) ResolveRunNotifications(ctx context.Context, runID, kind string) error {
	_, err := tx.Exec(ctx, `UPDATE notifications SET resolved_at = $1, read_at = COALESCE(read_at, $1)
		WHERE run_id = $2 AND kind = $3 AND resolved_at IS NULL`, tx.now.UnixMilli(), runID, kind)
	return err
}

// MarkRunNotificationsRead marks the user's unread notifications of the run
// read and returns how many changed.
func (d *DB) MarkRunNotificationsRead(ctx context.Context, userID int64, runID string) (int, error) {
	tag, err := d.pool.Exec(ctx, `UPDATE notifications SET read_at = $1 WHERE run_id = $2 AND user_id = $3 AND read_at IS NULL`,
		d.now().UnixMilli(), runID, userID)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// StatsRows returns the user's runs selected by f, oldest first, with the
// figures the effectiveness report needs; see the SQLite store's StatsRows.
func (d reads) StatsRows(ctx context.Context, userID int64, f spec.StatsFilter) ([]spec.StatsRow, error) {
	var a args
	where := []string{"r.user_id = " + a.add(userID)}
	if !f.Since.IsZero() {
		where = append(where, "r.created_at >= "+a.add(f.Since.UnixMilli()))
	}
	if !f.Until.IsZero() {
		where = append(where, "r.created_at < "+a.add(f.Until.UnixMilli()))
	}
	if f.Executor != "" {
		where = append(where, "r.executor = "+a.add(f.Executor))
	}
	if f.Mode != "" {
		where = append(where, "r.mode = "+a.add(f.Mode))
	}
	const model = "COALESCE(r.config::jsonb ->> 'model', '')"
	if f.Model != "" {
		where = append(where, model+" = "+a.add(f.Model))
	}
	if f.Tag != "" {
		where = append(where, "r.id IN (SELECT run_id FROM run_tags WHERE user_id = "+a.add(userID)+" AND tag = "+a.add(f.Tag)+")")
	}
	detail := "'', ''"
	if f.Detail {
		detail = "r.objective, " + model
	}
	q := `SELECT r.id, r.created_at, ` + detail + `, r.executor, r.mode, r.status,
		COALESCE(r.stop_type, ''), r.metrics,
		EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.type = 'run_waiting_on_user'),
		COALESCE((SELECT string_agg(tag, ',' ORDER BY tag) FROM run_tags t WHERE t.run_id = r.id), '')
		FROM runs r WHERE ` + strings.Join(where, " AND ") + ` ORDER BY r.created_at, r.id`
	if f.Limit > 0 {
		q += " LIMIT " + a.add(f.Limit)
	}
	rows, err := d.q.Query(ctx, q, a...)
	if err != nil {
		return nil, fmt.Errorf("stats rows: %w", err)
	}
	defer rows.Close()
	var out []spec.StatsRow
	for rows.Next() {
		var r spec.StatsRow
		var created int64
		var tags, metrics string
		if err := rows.Scan(&r.RunID, &created, &r.Objective, &r.Model, &r.Executor, &r.Mode, &r.Status, &r.StopReason,
			&metrics, &r.Escalated, &tags); err != nil {
			return nil, fmt.Errorf("stats rows: %w", err)
		}
		var m spec.Metrics
		if metrics != "" {
			if err := json.Unmarshal([]byte(metrics), &m); err != nil {
				return nil, fmt.Errorf("run %s metrics: %w", r.RunID, err)
			}
		}
		r.Iterations, r.RunningMS, r.CostUSD, r.TokensTotal = m.Iterations, m.RunningMS, m.CostTotalUSD, m.TokensTotal
		r.ToolCalls, r.FalseCompletionsBlocked = m.ToolCallsTotal, m.FalseCompletionsBlocked
		r.CreatedAt = time.UnixMilli(created).UTC()
		r.Finish(tags)
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListUsers returns every account, oldest first.
func (d *DB) ListUsers(ctx context.Context) ([]*spec.User, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+userCols+` FROM users ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.User
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// SetPassword sets the account's password hash and signs out its sessions.
// An unknown email is ENOTFOUND.
func (d *DB) SetPassword(ctx context.Context, email, passwordHash string) (*spec.User, error) {
	var u *spec.User
	err := d.WriteTx(ctx, func(tx *Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `UPDATE users SET password_hash = $1 WHERE lower(email) = lower($2) RETURNING `+userCols,
			passwordHash, strings.TrimSpace(email)))
		if err != nil {
			return notFound(err, "User")
		}
		_, err = tx.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1`, u.ID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}
