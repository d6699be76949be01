package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"homework/engine/spec"
)

const runCols = `id, user_id, parent_run_id, objective, mode, executor, config, status, iteration, attempt,
	stop_reason, waiting, metrics, report, workspace_doc_id, lease_owner, lease_until, running_since,
	created_at, started_at, updated_at, completed_at`

type rowScanner interface{ Scan(dest ...any) error }

func scanRun(s rowScanner) (*spec.Run, error) {
	var r spec.Run
	var parent, stop, waiting, report, ws, leaseOwner sql.NullString
	var config, metrics string
	var leaseUntil, runningSince, created, started, updated, completed sql.NullInt64
	if err := s.Scan(&r.ID, &r.UserID, &parent, &r.Objective, &r.Mode, &r.Executor, &config, &r.Status,
		&r.Iteration, &r.Attempt, &stop, &waiting, &metrics, &report, &ws, &leaseOwner, &leaseUntil,
		&runningSince, &created, &started, &updated, &completed); err != nil {
		return nil, err
	}
	r.ParentRunID, r.WorkspaceDocID, r.LeaseOwner = parent.String, ws.String, leaseOwner.String
	r.Config = json.RawMessage(config)
	if stop.Valid && stop.String != "" {
		r.StopReason = &spec.StopReason{}
		if err := json.Unmarshal([]byte(stop.String), r.StopReason); err != nil {
			return nil, fmt.Errorf("run %s stop_reason: %w", r.ID, err)
		}
	}
	if waiting.Valid && waiting.String != "" {
		r.Waiting = &spec.Waiting{}
		if err := json.Unmarshal([]byte(waiting.String), r.Waiting); err != nil {
			return nil, fmt.Errorf("run %s waiting: %w", r.ID, err)
		}
	}
	if err := json.Unmarshal([]byte(metrics), &r.Metrics); err != nil {
		return nil, fmt.Errorf("run %s metrics: %w", r.ID, err)
	}
	if report.Valid && report.String != "" {
		r.Report = &spec.Report{}
		if err := json.Unmarshal([]byte(report.String), r.Report); err != nil {
			return nil, fmt.Errorf("run %s report: %w", r.ID, err)
		}
	}
	r.LeaseUntil, r.RunningSince = fromMS(leaseUntil), fromMS(runningSince)
	r.CreatedAt, r.StartedAt, r.UpdatedAt, r.CompletedAt = fromMS(created), fromMS(started), fromMS(updated), fromMS(completed)
	return &r, nil
}

func jsonOrNil(v any) (any, error) {
	switch x := v.(type) {
	case *spec.StopReason:
		if x == nil {
			return nil, nil
		}
	case *spec.Waiting:
		if x == nil {
			return nil, nil
		}
	case *spec.Report:
		if x == nil {
			return nil, nil
		}
	case json.RawMessage:
		if len(x) == 0 {
			return nil, nil
		}
		return string(x), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func runArgs(r *spec.Run) ([]any, error) {
	stop, err := jsonOrNil(r.StopReason)
	if err != nil {
		return nil, err
	}
	waiting, err := jsonOrNil(r.Waiting)
	if err != nil {
		return nil, err
	}
	metrics, err := json.Marshal(r.Metrics)
	if err != nil {
		return nil, err
	}
	report, err := jsonOrNil(r.Report)
	if err != nil {
		return nil, err
	}
	return []any{r.ID, r.UserID, nullString(r.ParentRunID), r.Objective, r.Mode, r.Executor, string(r.Config),
		r.Status, r.Iteration, r.Attempt, stop, waiting, string(metrics), report, nullString(r.WorkspaceDocID),
		nullString(r.LeaseOwner), ms(r.LeaseUntil), ms(r.RunningSince), ms(r.CreatedAt), ms(r.StartedAt),
		ms(r.UpdatedAt), ms(r.CompletedAt)}, nil
}

// InsertRun stores a new run. CreatedAt and UpdatedAt default to the
// transaction's time.
func (tx *Tx) InsertRun(ctx context.Context, r *spec.Run) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = tx.now
	}
	r.UpdatedAt = tx.now
	args, err := runArgs(r)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO runs (`+runCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args...)
	if isForeignKeyViolation(err) {
		return spec.FieldError("parent_run_id", "Parent run not found.")
	}
	return err
}

// UpdateRun writes every mutable column of r and stamps UpdatedAt.
func (tx *Tx) UpdateRun(ctx context.Context, r *spec.Run) error {
	r.UpdatedAt = tx.now
	args, err := runArgs(r)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `UPDATE runs SET parent_run_id=?3, objective=?4, mode=?5, executor=?6, config=?7,
		status=?8, iteration=?9, attempt=?10, stop_reason=?11, waiting=?12, metrics=?13, report=?14,
		workspace_doc_id=?15, lease_owner=?16, lease_until=?17, running_since=?18, created_at=?19,
		started_at=?20, updated_at=?21, completed_at=?22 WHERE id=?1 AND user_id=?2`, args...)
	if err != nil {
		return fmt.Errorf("update run: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Run not found.")
	}
	return nil
}

// SetLease sets the run's lease owner and end, and nothing else.
func (tx *Tx) SetLease(ctx context.Context, r *spec.Run, owner string, until time.Time) error {
	r.LeaseOwner, r.LeaseUntil, r.UpdatedAt = owner, until, tx.now
	_, err := tx.ExecContext(ctx, `UPDATE runs SET lease_owner = ?, lease_until = ?, updated_at = ? WHERE id = ?`,
		nullString(owner), ms(until), tx.now.UnixMilli(), r.ID)
	return err
}

// SetRunMetrics writes the run's metrics, and nothing else.
func (tx *Tx) SetRunMetrics(ctx context.Context, r *spec.Run) error {
	b, err := json.Marshal(r.Metrics)
	if err != nil {
		return err
	}
	r.UpdatedAt = tx.now
	_, err = tx.ExecContext(ctx, `UPDATE runs SET metrics = ?, updated_at = ? WHERE id = ?`, string(b), tx.now.UnixMilli(), r.ID)
	return err
}

// FindRun returns the run inside tx, whoever owns it (engine use).
func (tx *Tx) FindRun(ctx context.Context, id string) (*spec.Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	return r, notFound(err, "Run")
}

// FindRun returns the user's run. Another user's run is ENOTFOUND.
func (d reads) FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error) {
	r, err := scanRun(d.q.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ? AND user_id = ?`, id, userID))
	return r, notFound(err, "Run")
}

// FindRunByID returns the run whoever owns it (engine use only).
func (d *DB) FindRunByID(ctx context.Context, id string) (*spec.Run, error) {
	r, err := scanRun(d.reader.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	return r, notFound(err, "Run")
}

func (d reads) checkRunOwner(ctx context.Context, userID int64, runID string) error {
	var n int
	err := d.q.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ? AND user_id = ?`, runID, userID).Scan(&n)
	return notFound(err, "Run")
}

// runSortKey is how one order pages: its key column and direction.
type runSortKey struct {
	col  string // created_at or cost_usd
	desc bool
}

func sortKey(sort string) (runSortKey, bool) {
	switch sort {
	case "", spec.SortNewest:
		return runSortKey{"created_at", true}, true
	case spec.SortOldest:
		return runSortKey{"created_at", false}, true
	case spec.SortCostDesc:
		return runSortKey{"cost_usd", true}, true
	case spec.SortCostAsc:
		return runSortKey{"cost_usd", false}, true
	}
	return runSortKey{}, false
}

// ListRuns returns the user's runs matching f, one page at a time, in
// f.Sort's order (ties broken by id) with keyset paging, so that a page
// costs the same after thousands of runs. A bad cursor or sort is
// EINVALID on its field.
func (d reads) ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 200 {
		f.Limit = 200
	}
	key, ok := sortKey(f.Sort)
	if !ok {
		return nil, spec.FieldError("sort", "Unknown sort order.")
	}
	where := []string{"user_id = ?"}
	args := []any{userID}
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	if f.Status != "" {
		add("status = ?", f.Status)
	}
	if f.Executor != "" {
		add("executor = ?", f.Executor)
	}
	if f.StopType != "" {
		add("stop_type = ?", f.StopType)
	}
	if !f.CreatedFrom.IsZero() {
		add("created_at >= ?", f.CreatedFrom.UnixMilli())
	}
	if !f.CreatedBefore.IsZero() {
		add("created_at < ?", f.CreatedBefore.UnixMilli())
	}
	if q := ftsQuery(f.Query); q != "" {
		add(`(rowid IN (SELECT rowid FROM runs_fts WHERE runs_fts MATCH ?)
			OR id IN (SELECT d.run_id FROM documents_fts JOIN documents d ON d.rowid = documents_fts.rowid
				WHERE documents_fts MATCH ? AND d.user_id = ?))`, q, q, userID)
	}
	if f.Tag != "" {
		add("id IN (SELECT run_id FROM run_tags WHERE user_id = ? AND tag = ?)", userID, f.Tag)
	}
	if f.Cursor != "" {
		k, id, ok := strings.Cut(f.Cursor, "_")
		kv, err := strconv.ParseFloat(k, 64)
		if !ok || err != nil || id == "" || math.IsNaN(kv) || math.IsInf(kv, 0) {
			return nil, spec.FieldError("cursor", "Invalid cursor.")
		}
		var cursorKey any = kv
		if key.col == "created_at" {
			cursorKey = int64(kv)
		}
		op := ">"
		if key.desc {
			op = "<"
		}
		add("("+key.col+" "+op+" ? OR ("+key.col+" = ? AND id "+op+" ?))", cursorKey, cursorKey, id)
	}
	dir := "ASC"
	if key.desc {
		dir = "DESC"
	}
	args = append(args, f.Limit+1)
	rows, err := d.q.QueryContext(ctx, `SELECT `+runCols+`, cost_usd FROM runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY `+key.col+` `+dir+`, id `+dir+` LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page := &spec.RunPage{}
	var costs []float64
	for rows.Next() {
		var cost float64
		r, err := scanRun(withExtra{rows, &cost})
		if err != nil {
			return nil, err
		}
		page.Runs = append(page.Runs, r)
		costs = append(costs, cost)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(page.Runs) > f.Limit {
		page.Runs = page.Runs[:f.Limit]
		last := page.Runs[len(page.Runs)-1]
		if key.col == "created_at" {
			page.NextCursor = fmt.Sprintf("%d_%s", last.CreatedAt.UnixMilli(), last.ID)
		} else {
			// The stored column's value, not the one decoded from the
			// metrics JSON: the cursor must compare equal in SQL.
			page.NextCursor = strconv.FormatFloat(costs[f.Limit-1], 'g', -1, 64) + "_" + last.ID
		}
	}
	return page, nil
}

// withExtra scans a run row followed by one more column.
type withExtra struct {
	rows  *sql.Rows
	extra any
}

func (w withExtra) Scan(dest ...any) error { return w.rows.Scan(append(dest, w.extra)...) }

// CountRunsByStatus returns the user's run count per status.
func (d reads) CountRunsByStatus(ctx context.Context, userID int64) (map[string]int, error) {
	return d.countByStatus(ctx, `SELECT status, COUNT(*) FROM runs WHERE user_id = ? GROUP BY status`, userID)
}

// CountAllRunsByStatus returns the run count per status over all users.
func (d *DB) CountAllRunsByStatus(ctx context.Context) (map[string]int, error) {
	return d.countByStatus(ctx, `SELECT status, COUNT(*) FROM runs GROUP BY status`)
}

func (d reads) countByStatus(ctx context.Context, query string, args ...any) (map[string]int, error) {
	rows, err := d.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// LockUserSlots locks the user's run slots until the transaction ends, so
// two promotions cannot both take the last free slot. SQLite needs nothing:
// write transactions are serialised (BEGIN IMMEDIATE on one connection). A
// store with concurrent writers locks the user's row here.
func (tx *Tx) LockUserSlots(ctx context.Context, userID int64) error { return nil }

// CountRunning returns how many of the user's runs are running, inside tx.
func (tx *Tx) CountRunning(ctx context.Context, userID int64) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs WHERE user_id = ? AND status = 'running'`, userID).Scan(&n)
	return n, err
}

// QueuedUsers returns the ids of users with queued runs, in the order of
// their oldest queued run.
func (tx *Tx) QueuedUsers(ctx context.Context) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT user_id FROM runs WHERE status = 'queued'
		GROUP BY user_id ORDER BY MIN(created_at), MIN(id)`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// OldestQueued returns up to n of the user's queued runs, oldest first.
func (tx *Tx) OldestQueued(ctx context.Context, userID int64, n int) ([]*spec.Run, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE user_id = ? AND status = 'queued'
		ORDER BY created_at, id LIMIT ?`, userID, n)
	if err != nil {
		return nil, err
	}
	return scanRuns(rows)
}

// scanRuns reads every run of rows and closes them.
func scanRuns(rows *sql.Rows) ([]*spec.Run, error) {
	defer rows.Close()
	var out []*spec.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RenewLease extends the lease of a running run held by owner. It reports
// false when the run is no longer running under that owner.
func (d *DB) RenewLease(ctx context.Context, runID, owner string, until time.Time) (bool, error) {
	var ok bool
	err := d.WriteTx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs SET lease_until = ? WHERE id = ? AND lease_owner = ? AND status = 'running'`,
			until.UnixMilli(), runID, owner)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	return ok, err
}
