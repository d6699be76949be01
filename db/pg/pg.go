// Package pg is Homework's PostgreSQL store: the same store contract as the
// SQLite store in package db, for running several server processes on one
// database. It uses pgx v5 through a pgxpool, applies its embedded
// migrations (recorded in schema_migrations) and River's own through
// rivermigrate with riverpgxv5.
//
// Nothing is cached between transactions, because other processes write the
// same rows (but a run's user, which never changes):
//   - Event seqs come from the run's last_seq counter, advanced by its
//     events as the appending transaction commits; the row lock that takes
//     orders every writer of the run, in any process, until commit. Seqs
//     are gap-free, and a run's event ids grow with its seqs.
//   - The user feed follows global event ids, drawn as transactions commit
//     (writeEvents), and its readers read no further than the feed horizon
//     (feedHorizon), up to which every id drawn has committed or never
//     will: no reader passes an id still in flight.
//   - Slot promotion takes a transaction-scoped advisory lock per user
//     (dialect.SlotsLock) before it counts, so two processes cannot both
//     take the last slot.
//   - Committed events are announced by the horizon, with NOTIFY, outside
//     the transactions that write them (announcer). Every process LISTENs
//     and hands the events up to each announced horizon to OnEvents in id
//     order, this process's own events included, so one path feeds every
//     bus.
package pg

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"homework/db/sqlstore"
	"homework/engine/spec"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// IsURL reports whether s names a PostgreSQL database (postgres:// or
// postgresql://) rather than a SQLite file.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Options configure Open.
type Options struct {
	// URL is the database's connection URL.
	URL string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// MaxConns bounds the pool; pgxpool's default when zero.
	MaxConns int32
	// OnEvents, when set, receives the events every process commits, in
	// commit order, from one goroutine. It must not block.
	OnEvents func([]*spec.Event)
	// OnInterrupt, when set, is told the run ids any process interrupted
	// (Interrupt), so this process stops the run's iteration if it works
	// it. It must not block.
	OnInterrupt func(runID string)
	// OnListenError is told when the event listener lost its connection
	// (or failed to catch up after it, or to read announced events), or an
	// announcement failed: events committed meanwhile are handed to
	// OnEvents, read from the database, once the connection is back or at
	// the next announcement. It may be nil.
	OnListenError func(error)
}

// DB is the PostgreSQL store.
type DB struct {
	sqlstore.Store // the shared reads (on the pool) and writes
	pool           *pgxpool.Pool
	now            func() time.Time
	listener       *listener
	announcer      *announcer

	mu    sync.Mutex
	lives []*liveness // HoldLiveness sessions, ended by Close
}

// Open connects to the database and applies every pending migration, ours
// and River's. Several processes may open the same database at once.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if !IsURL(opts.URL) {
		return nil, fmt.Errorf("pg: %q is not a postgres:// URL", Redact(opts.URL))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("pg: parse URL: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	cfg.AfterConnect = warmConn
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pg: connect: %w", err)
	}
	d := &DB{pool: pool, now: opts.Now}
	d.Store = sqlstore.NewStore(sqlstore.NewReads(pgConn{pool}, dialect, d.beginRead), d.writeShared, d.now)
	if err := d.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	d.warmIdle(ctx)
	d.announcer = startAnnouncer(d, opts.OnListenError)
	if opts.OnEvents != nil || opts.OnInterrupt != nil {
		l, err := startListener(ctx, d, opts)
		if err != nil {
			d.announcer.stop()
			pool.Close()
			return nil, err
		}
		d.listener = l
	} else if h, err := d.feedHorizon(ctx); err == nil {
		d.announcer.saw(h)
	} else {
		d.announcer.stop()
		pool.Close()
		return nil, err
	}
	return d, nil
}

// Redact drops the password from a URL for messages.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return p.Redacted()
}

// Close announces what this process committed since its last
// announcement, stops the announcer and the listener and closes the pool.
func (d *DB) Close() error {
	d.stopLiveness()
	d.announcer.stop()
	if d.listener != nil {
		d.listener.stop()
	}
	d.pool.Close()
	return nil
}

// Pool returns the connection pool, for River's driver.
func (d *DB) Pool() *pgxpool.Pool { return d.pool }

// Now returns the store's clock reading.
func (d *DB) Now() time.Time { return d.now() }

// Ping checks that the database answers a query.
func (d *DB) Ping(ctx context.Context) error {
	var n int
	return d.pool.QueryRow(ctx, `SELECT 1`).Scan(&n)
}

// migrationLock is the advisory lock key under which one process at a time
// migrates; the others wait and then find nothing to do.
const migrationLock = 0x486f6d65776f726b // "Homework"

// migrate applies our embedded migrations in order, each recorded in
// schema_migrations, then River's own through rivermigrate.
func (d *DB) migrate(ctx context.Context) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pg: acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLock)); err != nil {
		return fmt.Errorf("pg: migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLock))
	c := conn.Conn()
	err = sqlstore.Migrate(ctx, migrationFS, "migrations", `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`, d.now,
		func(ctx context.Context, q string) error { _, err := c.Exec(ctx, q); return err },
		func(ctx context.Context) (sqlstore.Conn, func() error, func(), error) {
			tx, err := c.Begin(ctx)
			if err != nil {
				return nil, nil, nil, err
			}
			return pgConn{tx}, func() error { return tx.Commit(ctx) }, func() { tx.Rollback(context.WithoutCancel(ctx)) }, nil
		})
	if err != nil {
		return err
	}
	return sqlstore.MigrateRiver(ctx, riverpgxv5.New(d.pool))
}

// Tx is a write transaction. Events appended through it are announced to
// every process when it commits.
type Tx struct {
	*sqlstore.Tx // the shared methods
	// PG is the transaction itself, for River's driver: its statements go
	// out after the writes the shared methods held back (txConn).
	PG     pgx.Tx
	conn   *txConn
	db     *DB
	events []*spec.Event
}

// WriteTx runs fn in one transaction and commits it when fn returns nil.
// Transactions of this and other processes run concurrently; the rows they
// share are locked by the statements that write them.
func (d *DB) WriteTx(ctx context.Context, fn func(tx spec.Tx) error) error {
	return d.write(ctx, func(tx *Tx) error { return fn(tx) })
}

// write runs fn in one write transaction, as WriteTx. A transaction with
// events commits in the round trip that writes them (writeEvents).
func (d *DB) write(ctx context.Context, fn func(tx *Tx) error) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Released idle once the transaction has ended; the pool closes a
	// connection still in one (fn panicked).
	defer conn.Release()
	ptx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	rollback := func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			ptx.Rollback(context.WithoutCancel(ctx))
		}
	}
	c := &txConn{tx: ptx}
	tx := &Tx{Tx: sqlstore.NewTx(c, dialect, d.now()), PG: flushingTx{ptx, c}, conn: c, db: d}
	if err := fn(tx); err != nil {
		rollback()
		return err
	}
	committed, err := tx.writeEvents(ctx)
	if err != nil {
		rollback()
		return err
	}
	if committed {
		return nil
	}
	if err := c.commit(ctx); err != nil {
		rollback()
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// writeShared runs fn, a shared write, in one write transaction.
func (d *DB) writeShared(ctx context.Context, fn func(tx *sqlstore.Tx) error) error {
	return d.write(ctx, func(tx *Tx) error { return fn(tx.Tx) })
}

// sqlErrNoRows is the shared code's no-rows error.
var sqlErrNoRows = sql.ErrNoRows

// pgCode returns the SQLSTATE of a PostgreSQL error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// unavailableCode reports whether a SQLSTATE says the server could not
// serve, whatever the statement: class 08, connection exception;
// 57P01-57P03, the server is shutting down or starting; 53300, too many
// connections.
func unavailableCode(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300"
}

// Unavailable reports whether err means the database could not be reached
// or could not serve (a refused or broken connection, a timeout, a server
// shutting down or out of connections), as opposed to a fault of the
// statement: the engine retries an iteration's final writes through such
// an outage and names it when it ends a run.
func (d *DB) Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if code := pgCode(err); code != "" {
		return unavailableCode(code)
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgx.ErrTxClosed) || strings.Contains(err.Error(), "conn closed")
}

// The PostgreSQL write transaction checks a user's run slots in its commit
// (spec.SlotChecker).
var _ spec.SlotChecker = (*Tx)(nil)

// slotFreeSQL holds when user ?1 has fewer than ?2 running runs and no
// queued run but ?3.
const slotFreeSQL = `(SELECT count(*) FROM runs WHERE user_id = ?1 AND status = 'running') < ?2
	AND NOT EXISTS (SELECT 1 FROM runs WHERE user_id = ?1 AND status = 'queued' AND id <> ?3)`

// FreeSlot is spec.SlotChecker's: one read, without the slot lock.
func (tx *Tx) FreeSlot(ctx context.Context, userID int64, max int, except string) (bool, error) {
	var free bool
	err := tx.conn.QueryRow(ctx, `SELECT `+slotFreeSQL, userID, max, except).Scan(&free)
	return free, err
}

// CheckSlotAtCommit is spec.SlotChecker's. The lock and the check are held
// writes (txConn): they go out with the transaction's next statement, its
// commit's round trip when nothing else comes, where the commit follows
// them without waiting for this process. Two statements, not one: a
// statement's snapshot is taken before it waits for the lock, and the
// check's must see what committed meanwhile. The check is FreeSlot's with
// one slot more, for the runs the transaction started, which run already;
// it fails as a division by zero, which ExecDeferred reports as
// ErrNoFreeSlot.
func (tx *Tx) CheckSlotAtCommit(ctx context.Context, userID int64, max int) error {
	lock, args := dialect.SlotsLock(userID)
	if err := tx.conn.ExecDeferred(ctx, -1, nil, "lock the user's run slots", lock, args...); err != nil {
		return err
	}
	return tx.conn.ExecDeferred(ctx, -1, spec.ErrNoFreeSlot, "check the user's run slots",
		`SELECT 1 / (`+slotFreeSQL+`)::int`, userID, max+1, "")
}
