package sqlstore

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

// RunColumns are a run row's columns, in scanRun's order.
const RunColumns = `id, user_id, parent_run_id, objective, mode, executor, config, status, iteration, attempt,
	stop_reason, waiting, metrics, report, workspace_doc_id, lease_owner, lease_until, running_since,
	created_at, started_at, updated_at, completed_at`

func scanRun(s Row) (*spec.Run, error) { return scanRunKeys(s, nil) }

// runKeyArgs are the positions in runArgs of the columns runs' indexes
// read (metrics for the cost index's generated column), with their SET
// clauses. SQLite rewrites an index's entries for every column in an
// UPDATE's SET list, changed or not, so UpdateRun sets these only when they
// changed: four of the five runs indexes were rewritten on every iteration
// for nothing.
var runKeyArgs = [...]struct {
	arg int
	set string
}{{2, "parent_run_id=?3, "}, {7, "status=?8, "}, {12, "metrics=?13, "}, {18, "created_at=?19, "}}

// runKeys holds the values of runKeyArgs' columns as a transaction read or
// last wrote them, as runArgs encodes them.
type runKeys [len(runKeyArgs)]any

// scanRunKeys is scanRun that also fills keys, when not nil.
func scanRunKeys(s Row, keys *runKeys) (*spec.Run, error) {
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
	if err := decodeJSON(stop.String, &r.StopReason); err != nil {
		return nil, fmt.Errorf("run %s stop_reason: %w", r.ID, err)
	}
	if err := decodeJSON(waiting.String, &r.Waiting); err != nil {
		return nil, fmt.Errorf("run %s waiting: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(metrics), &r.Metrics); err != nil {
		return nil, fmt.Errorf("run %s metrics: %w", r.ID, err)
	}
	if err := decodeJSON(report.String, &r.Report); err != nil {
		return nil, fmt.Errorf("run %s report: %w", r.ID, err)
	}
	r.LeaseUntil, r.RunningSince = fromMS(leaseUntil), fromMS(runningSince)
	r.CreatedAt, r.StartedAt, r.UpdatedAt, r.CompletedAt = fromMS(created), fromMS(started), fromMS(updated), fromMS(completed)
	if keys != nil {
		*keys = runKeys{nullString(r.ParentRunID), r.Status, metrics, ms(r.CreatedAt)}
	}
	return &r, nil
}

// decodeJSON decodes a nullable JSON column into a new *T; an empty column
// leaves *dst nil.
func decodeJSON[T any](s string, dst **T) error {
	if s == "" {
		return nil
	}
	*dst = new(T)
	return json.Unmarshal([]byte(s), *dst)
}

// scanRuns reads every run of rows and closes them.
func scanRuns(rows Rows, err error) ([]*spec.Run, error) {
	if err != nil {
		return nil, err
	}
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

// jsonOrNil encodes v as JSON text, NULL for a nil pointer or empty JSON.
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
	_, err = tx.c.Exec(ctx, `INSERT INTO runs (`+RunColumns+`) VALUES (`+placeholders(22)+`)`, args...)
	if tx.d.IsForeignKeyViolation(err) {
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
	// The columns an index reads are set only when they changed since this
	// transaction read the run (all of them when it did not read it here).
	k, read := tx.runKeys[r.ID]
	read = read && tx.d.SetOnlyChangedKeys
	mask := 0
	for i, c := range runKeyArgs {
		if !read || args[c.arg] != k[i] {
			mask |= 1 << i
		}
	}
	if err := tx.execHeld(ctx, 1, spec.Errorf(spec.ENOTFOUND, "Run not found."), "update run", updateRunSQLs[mask], args...); err != nil {
		return err
	}
	for i, c := range runKeyArgs {
		k[i] = args[c.arg]
	}
	tx.rememberRun(r.ID, k)
	return nil
}

// rememberRun records a run's indexed columns as they now are in tx.
func (tx *Tx) rememberRun(id string, k runKeys) {
	if tx.runKeys == nil {
		tx.runKeys = map[string]runKeys{}
	}
	tx.runKeys[id] = k
}

// updateRunSQLs holds UpdateRun's statement for each set of changed
// indexed columns (bit i for runKeyArgs[i]), built once.
var updateRunSQLs = func() (out [1 << len(runKeyArgs)]string) {
	for mask := range out {
		q := "UPDATE runs SET "
		for i, c := range runKeyArgs {
			if mask&(1<<i) != 0 {
				q += c.set
			}
		}
		out[mask] = q + `objective=?4, mode=?5, executor=?6, config=?7, iteration=?9, attempt=?10, stop_reason=?11,
		waiting=?12, report=?14, workspace_doc_id=?15, lease_owner=?16, lease_until=?17, running_since=?18,
		started_at=?20, updated_at=?21, completed_at=?22 WHERE id=?1 AND user_id=?2`
	}
	return out
}()

// SetLease sets the run's lease owner and end, and nothing else.
func (tx *Tx) SetLease(ctx context.Context, r *spec.Run, owner string, until time.Time) error {
	r.LeaseOwner, r.LeaseUntil, r.UpdatedAt = owner, until, tx.now
	_, err := tx.c.Exec(ctx, `UPDATE runs SET lease_owner = ?, lease_until = ?, updated_at = ? WHERE id = ?`,
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
	if err := tx.execHeld(ctx, -1, nil, "set run metrics", `UPDATE runs SET metrics = ?, updated_at = ? WHERE id = ?`, string(b), tx.now.UnixMilli(), r.ID); err != nil {
		return err
	}
	// The metrics are an indexed column UpdateRun compares against: the
	// run's next update in tx writes them all again.
	delete(tx.runKeys, r.ID)
	return nil
}

// FindRun returns the run inside tx, whoever owns it (engine use). Where
// several processes write (PostgreSQL) it row-locks the run until tx ends,
// so the state the caller read is the one it changes.
func (tx *Tx) FindRun(ctx context.Context, id string) (*spec.Run, error) {
	var k runKeys
	r, err := scanRunKeys(tx.c.QueryRow(ctx, `SELECT `+RunColumns+` FROM runs WHERE id = ?`+tx.d.ForUpdate, id), &k)
	if err != nil {
		return nil, notFound(err, "Run")
	}
	tx.rememberRun(id, k)
	return r, nil
}

// FindRun returns the user's run. Another user's run is ENOTFOUND.
func (r Reads) FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error) {
	run, err := scanRun(r.c.QueryRow(ctx, `SELECT `+RunColumns+` FROM runs WHERE id = ? AND user_id = ?`, id, userID))
	return run, notFound(err, "Run")
}

// FindRunByID returns the run whoever owns it (engine use only).
func (r Reads) FindRunByID(ctx context.Context, id string) (*spec.Run, error) {
	run, err := scanRun(r.c.QueryRow(ctx, `SELECT `+RunColumns+` FROM runs WHERE id = ?`, id))
	return run, notFound(err, "Run")
}

func (r Reads) checkRunOwner(ctx context.Context, userID int64, runID string) error {
	var n int
	err := r.c.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = ? AND user_id = ?`, runID, userID).Scan(&n)
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
func (r Reads) ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error) {
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
	if cond, a := r.d.Search.RunMatch(f.Query, userID); cond != "" {
		add(cond, a...)
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
	rows, err := r.c.Query(ctx, `SELECT `+RunColumns+`, cost_usd FROM runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY `+key.col+` `+dir+`, id `+dir+` LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page := &spec.RunPage{}
	var costs []float64
	for rows.Next() {
		var cost float64
		run, err := scanRun(withExtra{rows, &cost})
		if err != nil {
			return nil, err
		}
		page.Runs = append(page.Runs, run)
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

// withExtra scans a row followed by one more column.
type withExtra struct {
	row   Row
	extra any
}

func (w withExtra) Scan(dest ...any) error { return w.row.Scan(append(dest, w.extra)...) }

// ListReports returns the user's runs that have a report, most recently
// finished first, one page at a time. The cursor is opaque.
func (r Reads) ListReports(ctx context.Context, userID int64, cursor string, limit int) (*spec.RunPage, error) {
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
	runs, err := scanRuns(r.c.Query(ctx, `SELECT `+RunColumns+` FROM runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY COALESCE(completed_at, updated_at) DESC, id DESC LIMIT ?`, args...))
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
func (r Reads) ListChildRuns(ctx context.Context, userID int64, parentID string) ([]*spec.Run, error) {
	return scanRuns(r.c.Query(ctx, `SELECT `+RunColumns+` FROM runs WHERE user_id = ? AND parent_run_id = ?
		ORDER BY created_at, id LIMIT 50`, userID, parentID))
}

// CountRunsByStatus returns the user's run count per status.
func (r Reads) CountRunsByStatus(ctx context.Context, userID int64) (map[string]int, error) {
	return r.countByStatus(ctx, `SELECT status, COUNT(*) FROM runs WHERE user_id = ? GROUP BY status`, userID)
}

// CountAllRunsByStatus returns the run count per status over all users.
func (r Reads) CountAllRunsByStatus(ctx context.Context) (map[string]int, error) {
	return r.countByStatus(ctx, `SELECT status, COUNT(*) FROM runs GROUP BY status`)
}

func (r Reads) countByStatus(ctx context.Context, query string, args ...any) (map[string]int, error) {
	rows, err := r.c.Query(ctx, query, args...)
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

// afterSlotsLock runs query once it holds the user's slot lock (the
// dialect's SlotsLock), so that two promotions cannot both take the last
// free slot; where write transactions are serialised anyway (SQLite) there
// is no lock. The lock is taken in the query's round trip, where the
// connection pipelines: it is held until the transaction commits, and
// every round trip it waits through is one more that the user's other
// promotions wait for.
func (tx *Tx) afterSlotsLock(ctx context.Context, userID int64, query string, args ...any) (Rows, error) {
	if tx.d.SlotsLock == nil {
		return tx.c.Query(ctx, query, args...)
	}
	p, ok := tx.c.(Pipeliner)
	if !ok {
		return nil, fmt.Errorf("%s: the slot lock needs a pipelining connection", tx.d.Name)
	}
	lock, lockArgs := tx.d.SlotsLock(userID)
	return p.QueryAfter(ctx, lock, lockArgs, query, args...)
}

// LockedRunningCount locks the user's run slots (afterSlotsLock) and then
// returns how many of the user's runs are running.
func (tx *Tx) LockedRunningCount(ctx context.Context, userID int64) (int, error) {
	rows, err := tx.afterSlotsLock(ctx, userID, `SELECT COUNT(*) FROM runs WHERE user_id = ? AND status = 'running'`, userID)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, err
		}
		return 0, sql.ErrNoRows
	}
	var n int
	if err := rows.Scan(&n); err != nil {
		return 0, err
	}
	return n, rows.Err()
}

// QueuedUsers returns the ids of users with queued runs, in the order of
// their oldest queued run.
func (tx *Tx) QueuedUsers(ctx context.Context) ([]int64, error) {
	rows, err := tx.c.Query(ctx, `SELECT user_id FROM runs WHERE status = 'queued'
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

// LockedStartable locks the user's run slots (afterSlotsLock) and then
// returns the user's oldest queued runs, as many as the user has free
// slots (max less the runs running), oldest first: the count and the read
// are one statement. Where several processes write, it locks the runs for
// the rest of the transaction (as FindRun): a run that another transaction
// holds is read once that one ends, and only if it is still queued then,
// so a promotion never starts a run canceled (or started) meanwhile by
// writing back the copy it read before; the next queued run takes its
// place.
func (tx *Tx) LockedStartable(ctx context.Context, userID int64, max int) ([]*spec.Run, error) {
	return scanRuns(tx.afterSlotsLock(ctx, userID, `SELECT `+RunColumns+` FROM runs WHERE user_id = ? AND status = 'queued'
		ORDER BY created_at, id
		LIMIT (SELECT CASE WHEN COUNT(*) < ? THEN ? - COUNT(*) ELSE 0 END FROM runs WHERE user_id = ? AND status = 'running')`+tx.d.ForUpdate,
		userID, max, max, userID))
}

// RenewAttemptLease extends the lease of a running run held by owner while
// (iteration, attempt) is still the run's current attempt. It reports
// false when the run moved on (recovered, canceled, finished): an attempt
// that is not current never extends the lease of the one that replaced it.
func (s Store) RenewAttemptLease(ctx context.Context, runID, owner string, iteration, attempt int, until time.Time) (bool, error) {
	return s.changedOne(ctx, `UPDATE runs SET lease_until = ? WHERE id = ? AND lease_owner = ? AND status = 'running'
		AND iteration = ? AND attempt = ?`, until.UnixMilli(), runID, owner, iteration, attempt)
}

// changedOne runs a one-statement write and reports whether it changed a
// row.
func (s Store) changedOne(ctx context.Context, query string, args ...any) (bool, error) {
	var ok bool
	err := s.write(ctx, func(tx *Tx) error {
		n, err := tx.c.Exec(ctx, query, args...)
		ok = n == 1
		return err
	})
	return ok, err
}

// RunningRuns returns the runs in status running with their lease owner and
// lease end.
func (r Reads) RunningRuns(ctx context.Context) ([]spec.RunLease, error) {
	rows, err := r.c.Query(ctx, `SELECT id, COALESCE(lease_owner, ''), COALESCE(lease_until, 0) FROM runs
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
			l.Until = msTime(until)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// QueueDepth returns how many iterate jobs wait to be worked.
func (r Reads) QueueDepth(ctx context.Context) (int, error) {
	var n int
	err := r.c.QueryRow(ctx, `SELECT COUNT(*) FROM river_job WHERE kind = 'iterate' AND state IN ('available', 'retryable', 'scheduled')`).Scan(&n)
	return n, err
}
