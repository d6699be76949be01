package pg

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/engine/spec"
)

const runCols = `id, user_id, parent_run_id, objective, mode, executor, config, status, iteration, attempt,
	stop_reason, waiting, metrics, report, workspace_doc_id, lease_owner, lease_until, running_since,
	created_at, started_at, updated_at, completed_at`

func scanRun(s pgx.Row) (*spec.Run, error) {
	var r spec.Run
	var parent, stop, waiting, report, ws, leaseOwner *string
	var config, metrics string
	var leaseUntil, runningSince, started, completed *int64
	var created, updated int64
	if err := s.Scan(&r.ID, &r.UserID, &parent, &r.Objective, &r.Mode, &r.Executor, &config, &r.Status,
		&r.Iteration, &r.Attempt, &stop, &waiting, &metrics, &report, &ws, &leaseOwner, &leaseUntil,
		&runningSince, &created, &started, &updated, &completed); err != nil {
		return nil, err
	}
	r.ParentRunID, r.WorkspaceDocID, r.LeaseOwner = deref(parent), deref(ws), deref(leaseOwner)
	r.Config = json.RawMessage(config)
	if s := deref(stop); s != "" {
		r.StopReason = &spec.StopReason{}
		if err := json.Unmarshal([]byte(s), r.StopReason); err != nil {
			return nil, fmt.Errorf("run %s stop_reason: %w", r.ID, err)
		}
	}
	if w := deref(waiting); w != "" {
		r.Waiting = &spec.Waiting{}
		if err := json.Unmarshal([]byte(w), r.Waiting); err != nil {
			return nil, fmt.Errorf("run %s waiting: %w", r.ID, err)
		}
	}
	if err := json.Unmarshal([]byte(metrics), &r.Metrics); err != nil {
		return nil, fmt.Errorf("run %s metrics: %w", r.ID, err)
	}
	if report != nil && *report != "" {
		r.Report = &spec.Report{}
		if err := json.Unmarshal([]byte(*report), r.Report); err != nil {
			return nil, fmt.Errorf("run %s report: %w", r.ID, err)
		}
	}
	r.LeaseUntil, r.RunningSince = fromMS(leaseUntil), fromMS(runningSince)
	r.CreatedAt, r.StartedAt = time.UnixMilli(created).UTC(), fromMS(started)
	r.UpdatedAt, r.CompletedAt = time.UnixMilli(updated).UTC(), fromMS(completed)
	return &r, nil
}

func scanRuns(rows pgx.Rows) ([]*spec.Run, error) {
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
	_, err = tx.Exec(ctx, `INSERT INTO runs (`+runCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22)`, args...)
	if pgCode(err) == foreignKeyViolation {
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
	tag, err := tx.Exec(ctx, `UPDATE runs SET parent_run_id=$3, objective=$4, mode=$5, executor=$6, config=$7,
		status=$8, iteration=$9, attempt=$10, stop_reason=$11, waiting=$12, metrics=$13, report=$14,
		workspace_doc_id=$15, lease_owner=$16, lease_until=$17, running_since=$18, created_at=$19,
		started_at=$20, updated_at=$21, completed_at=$22 WHERE id=$1 AND user_id=$2`, args...)
	if err != nil {
		return fmt.Errorf("update run: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Run not found.")
	}
	return nil
}

// SetLease sets the run's lease owner and end, and nothing else.
func (tx *Tx) SetLease(ctx context.Context, r *spec.Run, owner string, until time.Time) error {
	r.LeaseOwner, r.LeaseUntil, r.UpdatedAt = owner, until, tx.now
	_, err := tx.Exec(ctx, `UPDATE runs SET lease_owner = $1, lease_until = $2, updated_at = $3 WHERE id = $4`,
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
	_, err = tx.Exec(ctx, `UPDATE runs SET metrics = $1, updated_at = $2 WHERE id = $3`, string(b), tx.now.UnixMilli(), r.ID)
	return err
}

// FindRun returns the run inside tx, whoever owns it (engine use). It
// row-locks the run until tx ends, so the state the caller read is the one
// it changes even when another process works on the run.
func (tx *Tx) FindRun(ctx context.Context, id string) (*spec.Run, error) {
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1 FOR UPDATE`, id))
	return r, notFound(err, "Run")
}

// FindRun returns the user's run. Another user's run is ENOTFOUND.
func (d reads) FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error) {
	r, err := scanRun(d.q.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1 AND user_id = $2`, id, userID))
	return r, notFound(err, "Run")
}

// FindRunByID returns the run whoever owns it (engine use only).
func (d *DB) FindRunByID(ctx context.Context, id string) (*spec.Run, error) {
	r, err := scanRun(d.pool.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1`, id))
	return r, notFound(err, "Run")
}

func (d reads) checkRunOwner(ctx context.Context, userID int64, runID string) error {
	var n int
	err := d.q.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1 AND user_id = $2`, runID, userID).Scan(&n)
	return notFound(err, "Run")
}

// args numbers query arguments as they are added.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// ListRuns returns the user's runs matching f, one page at a time, in
// f.Sort's order (ties broken by id) with keyset paging. A bad cursor or
// sort is EINVALID on its field.
func (d reads) ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 200 {
		f.Limit = 200
	}
	col, desc := "created_at", true
	switch f.Sort {
	case "", spec.SortNewest:
	case spec.SortOldest:
		desc = false
	case spec.SortCostDesc:
		col = "cost_usd"
	case spec.SortCostAsc:
		col, desc = "cost_usd", false
	default:
		return nil, spec.FieldError("sort", "Unknown sort order.")
	}
	var a args
	where := []string{"user_id = " + a.add(userID)}
	if f.Status != "" {
		where = append(where, "status = "+a.add(f.Status))
	}
	if f.Executor != "" {
		where = append(where, "executor = "+a.add(f.Executor))
	}
	if f.StopType != "" {
		where = append(where, "stop_type = "+a.add(f.StopType))
	}
	if !f.CreatedFrom.IsZero() {
		where = append(where, "created_at >= "+a.add(f.CreatedFrom.UnixMilli()))
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+a.add(f.CreatedBefore.UnixMilli()))
	}
	if q := strings.TrimSpace(f.Query); q != "" {
		// Every word required, taken literally (plainto_tsquery), over the
		// objective and the run's documents.
		p := a.add(q)
		where = append(where, `(objective_tsv @@ plainto_tsquery('english', `+p+`)
			OR id IN (SELECT d.run_id FROM documents d WHERE d.user_id = `+a.add(userID)+`
				AND d.search @@ plainto_tsquery('english', `+p+`)))`)
	}
	if f.Tag != "" {
		where = append(where, "id IN (SELECT run_id FROM run_tags WHERE user_id = "+a.add(userID)+" AND tag = "+a.add(f.Tag)+")")
	}
	op, dir := ">", "ASC"
	if desc {
		op, dir = "<", "DESC"
	}
	if f.Cursor != "" {
		k, id, ok := strings.Cut(f.Cursor, "_")
		kv, err := strconv.ParseFloat(k, 64)
		if !ok || err != nil || id == "" || math.IsNaN(kv) || math.IsInf(kv, 0) {
			return nil, spec.FieldError("cursor", "Invalid cursor.")
		}
		var key any = kv
		if col == "created_at" {
			key = int64(kv)
		}
		c := a.add(key)
		where = append(where, "("+col+" "+op+" "+c+" OR ("+col+" = "+c+" AND id "+op+" "+a.add(id)+"))")
	}
	rows, err := d.q.Query(ctx, `SELECT `+runCols+`, cost_usd FROM runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY `+col+` `+dir+`, id `+dir+` LIMIT `+a.add(f.Limit+1), a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page := &spec.RunPage{}
	var costs []float64
	for rows.Next() {
		var cost float64
		r, err := scanRun(withCost{rows, &cost})
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
		if col == "created_at" {
			page.NextCursor = fmt.Sprintf("%d_%s", last.CreatedAt.UnixMilli(), last.ID)
		} else {
			page.NextCursor = strconv.FormatFloat(costs[f.Limit-1], 'g', -1, 64) + "_" + last.ID
		}
	}
	return page, nil
}

// withCost scans a run row followed by its cost_usd column.
type withCost struct {
	pgx.Row
	cost *float64
}

func (w withCost) Scan(dest ...any) error { return w.Row.Scan(append(dest, w.cost)...) }

// ListReports returns the user's runs that have a report, most recently
// finished first, one page at a time. The cursor is opaque.
func (d reads) ListReports(ctx context.Context, userID int64, cursor string, limit int) (*spec.RunPage, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	var a args
	where := []string{"user_id = " + a.add(userID), "report IS NOT NULL", "report <> ''", "report <> 'null'"}
	if cursor != "" {
		at, id, ok := strings.Cut(cursor, "_")
		atMS, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || id == "" {
			return nil, spec.FieldError("cursor", "Invalid cursor.")
		}
		c := a.add(atMS)
		where = append(where, "(COALESCE(completed_at, updated_at) < "+c+" OR (COALESCE(completed_at, updated_at) = "+c+
			" AND id < "+a.add(id)+"))")
	}
	rows, err := d.q.Query(ctx, `SELECT `+runCols+` FROM runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY COALESCE(completed_at, updated_at) DESC, id DESC LIMIT `+a.add(limit+1), a...)
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
	rows, err := d.q.Query(ctx, `SELECT `+runCols+` FROM runs WHERE user_id = $1 AND parent_run_id = $2
		ORDER BY created_at, id LIMIT 50`, userID, parentID)
	if err != nil {
		return nil, err
	}
	return scanRuns(rows)
}

// CountRunsByStatus returns the user's run count per status.
func (d reads) CountRunsByStatus(ctx context.Context, userID int64) (map[string]int, error) {
	return d.countByStatus(ctx, `SELECT status, COUNT(*) FROM runs WHERE user_id = $1 GROUP BY status`, userID)
}

// CountAllRunsByStatus returns the run count per status over all users.
func (d *DB) CountAllRunsByStatus(ctx context.Context) (map[string]int, error) {
	return d.countByStatus(ctx, `SELECT status, COUNT(*) FROM runs GROUP BY status`)
}

func (d reads) countByStatus(ctx context.Context, query string, a ...any) (map[string]int, error) {
	rows, err := d.q.Query(ctx, query, a...)
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

// slotsLock is the first key of the per-user advisory lock on run slots.
const slotsLock = 0x486f6d65 // "Home"

// LockUserSlots takes a transaction-scoped advisory lock on the user's run
// slots, so two processes promoting the same user's runs cannot both take
// the last free slot: the second waits for the first to commit and then
// counts its runs.
func (tx *Tx) LockUserSlots(ctx context.Context, userID int64) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, int32(slotsLock), int32(userID))
	return err
}

// CountRunning returns how many of the user's runs are running, inside tx.
func (tx *Tx) CountRunning(ctx context.Context, userID int64) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM runs WHERE user_id = $1 AND status = 'running'`, userID).Scan(&n)
	return n, err
}

// QueuedUsers returns the ids of users with queued runs, in the order of
// their oldest queued run.
func (tx *Tx) QueuedUsers(ctx context.Context) ([]int64, error) {
	rows, err := tx.Query(ctx, `SELECT user_id FROM runs WHERE status = 'queued'
		GROUP BY user_id ORDER BY MIN(created_at), MIN(id)`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// OldestQueued returns up to n of the user's queued runs, oldest first.
func (tx *Tx) OldestQueued(ctx context.Context, userID int64, n int) ([]*spec.Run, error) {
	rows, err := tx.Query(ctx, `SELECT `+runCols+` FROM runs WHERE user_id = $1 AND status = 'queued'
		ORDER BY created_at, id LIMIT $2`, userID, n)
	if err != nil {
		return nil, err
	}
	return scanRuns(rows)
}

// RenewLease extends the lease of a running run held by owner. It reports
// false when the run is no longer running under that owner.
func (d *DB) RenewLease(ctx context.Context, runID, owner string, until time.Time) (bool, error) {
	tag, err := d.pool.Exec(ctx, `UPDATE runs SET lease_until = $1 WHERE id = $2 AND lease_owner = $3 AND status = 'running'`,
		until.UnixMilli(), runID, owner)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// RunningRuns returns the runs in status running with their lease owner and
// lease end.
func (d *DB) RunningRuns(ctx context.Context) ([]spec.RunLease, error) {
	rows, err := d.pool.Query(ctx, `SELECT id, COALESCE(lease_owner, ''), COALESCE(lease_until, 0) FROM runs
		WHERE status = 'running' ORDER BY id`)
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

// QueueDepth returns how many iterate jobs wait to be worked.
func (d *DB) QueueDepth(ctx context.Context) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT COUNT(*) FROM river_job WHERE state IN ('available', 'retryable', 'scheduled')`).Scan(&n)
	return n, err
}
