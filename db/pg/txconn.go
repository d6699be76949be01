package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"homework/db/sqlstore"
)

// txConn is a write transaction's sqlstore.Conn. A write whose only result
// is whether it failed (ExecDeferred: an iteration's row, the run's row or
// its metrics, a model call, transcript lines) is held back and sent in
// the round trip of the transaction's next statement, whatever sends it
// (this Conn, River's driver through flushingTx, the commit): a
// transaction pays one round trip for a run of such writes and the
// statement after them, not one each. The statements run in the order
// they were made, so every statement sees the writes made before it.
//
// A held write that fails fails the statement it went out with, and every
// later one: the transaction cannot commit. An error the database gives
// it is reported as the write's; an error of the round trip (the
// connection) as it is.
type txConn struct {
	tx      pgx.Tx
	pending []heldWrite
	err     error
}

// divisionByZero is the SQLSTATE of a held write that changed another
// number of rows than it must (ExecDeferred).
const divisionByZero = "22012"

// heldWrite is a write waiting for the transaction's next round trip.
type heldWrite struct {
	query string // rebound
	args  []any
	want  int64 // the rows it must change; -1: any number
	miss  error // the error when it changed another number
	label string
}

var (
	_ sqlstore.Conn      = (*txConn)(nil)
	_ sqlstore.Pipeliner = (*txConn)(nil)
	_ sqlstore.Deferrer  = (*txConn)(nil)
)

// ExecDeferred holds the write back until the transaction's next round
// trip (see txConn). A write that must change want rows checks it in the
// database: the round trip may end with COMMIT, which must not run after
// it changed another number. It is sent as a statement that fails with
// division by zero then (a count of rows is not a constant PostgreSQL
// folds when it plans), and the failure is reported as miss. A statement
// with want -1 may check a condition of its own the same way: its division
// by zero is reported as miss too, when miss is not nil.
func (c *txConn) ExecDeferred(ctx context.Context, want int64, miss error, label, query string, args ...any) error {
	if c.err != nil {
		return c.err
	}
	if want >= 0 {
		query = fmt.Sprintf(`WITH w AS (%s RETURNING 1) SELECT 1 / (count(*) = %d)::int FROM w`, query, want)
	}
	c.pending = append(c.pending, heldWrite{query: rebinder.Rebind(query), args: textArgs(args), want: want, miss: miss, label: label})
	return nil
}

// queuePending queues the held writes first in b and returns how many it
// queued; their results are the first of b's (checkPending).
func (c *txConn) queuePending(b *pgx.Batch) int {
	for _, w := range c.pending {
		b.Queue(w.query, w.args...)
	}
	return len(c.pending)
}

// checkPending reads the results of the n held writes queued first in the
// batch br answers, and forgets them. The first that failed fails the
// transaction.
func (c *txConn) checkPending(br pgx.BatchResults, n int) error {
	held := c.pending[:n]
	c.pending = c.pending[n:]
	for _, w := range held {
		_, err := br.Exec()
		var pe *pgconn.PgError
		var pre pgx.ErrPreprocessingBatch
		switch {
		case c.err != nil || err == nil:
		case errors.As(err, &pre) || !errors.As(err, &pe) || unavailableCode(pe.Code):
			// Not the write's doing: the round trip failed (preparing
			// or encoding any statement in it, before it was sent; the
			// connection or the server, after, when it may have ended
			// with COMMIT or not).
			c.err = err
		case w.miss != nil && pe.Code == divisionByZero:
			c.err = w.miss
		default:
			c.err = fmt.Errorf("%s: %w", w.label, err)
		}
	}
	return c.err
}

// send sends the held writes with what queue queues after them in one
// round trip, and checks theirs. When it returns nil, br's next results are
// queue's, and the caller closes br; else br is closed.
func (c *txConn) send(ctx context.Context, q func(b *pgx.Batch)) (pgx.BatchResults, error) {
	if c.err != nil {
		return nil, c.err
	}
	b := &pgx.Batch{}
	n := c.queuePending(b)
	q(b)
	br := c.tx.SendBatch(ctx, b)
	if err := c.checkPending(br, n); err != nil {
		br.Close()
		return nil, err
	}
	return br, nil
}

// flush sends the held writes, if any, in a round trip of their own.
func (c *txConn) flush(ctx context.Context) error {
	if c.err != nil || len(c.pending) == 0 {
		return c.err
	}
	br, err := c.send(ctx, func(*pgx.Batch) {})
	if err != nil {
		return err
	}
	return br.Close()
}

func (c *txConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.exec(ctx, rebinder.Rebind(query), textArgs(args)...)
	return tag.RowsAffected(), err
}

// exec runs an already rebound statement after the held writes.
func (c *txConn) exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	if c.err != nil {
		return pgconn.CommandTag{}, c.err
	}
	if len(c.pending) == 0 {
		return c.tx.Exec(ctx, query, args...)
	}
	br, err := c.send(ctx, func(b *pgx.Batch) { b.Queue(query, args...) })
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (c *txConn) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return c.query(ctx, rebinder.Rebind(query), textArgs(args)...)
}

// query runs an already rebound query after the held writes.
func (c *txConn) query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	if c.err != nil {
		return nil, c.err
	}
	if len(c.pending) == 0 {
		return c.tx.Query(ctx, query, args...)
	}
	br, err := c.send(ctx, func(b *pgx.Batch) { b.Queue(query, args...) })
	if err != nil {
		return nil, err
	}
	return lastRows(br)
}

func (c *txConn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return row{c.queryRow(ctx, rebinder.Rebind(query), textArgs(args)...)}
}

// queryRow runs an already rebound single-row query after the held writes.
func (c *txConn) queryRow(ctx context.Context, query string, args ...any) pgx.Row {
	if c.err != nil {
		return errRow{c.err}
	}
	if len(c.pending) == 0 {
		return c.tx.QueryRow(ctx, query, args...)
	}
	br, err := c.send(ctx, func(b *pgx.Batch) { b.Queue(query, args...) })
	if err != nil {
		return errRow{err}
	}
	return batchRow{br.QueryRow(), br}
}

// QueryAfter runs first and then query, after the held writes, in one
// round trip (a pipeline): query's snapshot is taken once first is done,
// as if it were sent after it. The rows end the round trip (batchRows).
func (c *txConn) QueryAfter(ctx context.Context, first string, firstArgs []any, query string, args ...any) (sqlstore.Rows, error) {
	br, err := c.send(ctx, func(b *pgx.Batch) {
		b.Queue(rebinder.Rebind(first), textArgs(firstArgs)...)
		b.Queue(rebinder.Rebind(query), textArgs(args)...)
	})
	if err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	return lastRows(br)
}

// commit commits the transaction, with the held writes in the same round
// trip.
func (c *txConn) commit(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	if len(c.pending) == 0 {
		return c.tx.Commit(ctx)
	}
	_, err := c.exec(ctx, "COMMIT")
	return err
}

// lastRows returns the rows of br's next query, the last of its pipeline,
// which end the pipeline (batchRows).
func lastRows(br pgx.BatchResults) (pgx.Rows, error) {
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of a pipeline's last query. The pipeline ends
// with them, as a plain query's connection is free again: once Next has
// returned false, or at Close.
type batchRows struct {
	pgx.Rows
	br   pgx.BatchResults
	done bool
	err  error // ending the pipeline's
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.end()
	return false
}

func (r *batchRows) Close() { r.end() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

func (r *batchRows) end() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	r.err = r.br.Close()
}

// batchRow is the row of a pipeline's last query; scanning it closes the
// pipeline.
type batchRow struct {
	r  pgx.Row
	br pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// flushingTx is the transaction as River's driver and this package's own
// statements on it see it: each statement goes out after the writes held
// back (txConn), in the same round trip where it can.
type flushingTx struct {
	pgx.Tx
	c *txConn
}

func (t flushingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.c.exec(ctx, sql, args...)
}

func (t flushingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.c.query(ctx, sql, args...)
}

func (t flushingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.c.queryRow(ctx, sql, args...)
}

func (t flushingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.c.flush(ctx); err != nil {
		return errBatch{err}
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t flushingTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.c.flush(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, cols, src)
}

func (t flushingTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.c.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

func (t flushingTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.c.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Begin(ctx)
}

func (t flushingTx) Commit(ctx context.Context) error { return t.c.commit(ctx) }

// errBatch is a batch that failed before it was sent.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
