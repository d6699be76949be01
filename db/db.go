// Package db holds all of Homework's SQL: the SQLite connections, the embedded
// migrations and one file of store methods per aggregate.
//
// There is exactly one writer connection (MaxOpenConns 1, _txlock=immediate)
// and a separate pool of read-only connections. Every write goes through
// WriteTx, which serialises our writers, stamps one time per transaction and,
// after commit, publishes the events the transaction appended to the
// OnEvents hook in commit order.
package db

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"homework/db/sqlstore"
	"homework/engine/spec"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options configure Open.
type Options struct {
	// Path is the database file. It is created when missing.
	Path string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// ReadConns is the size of the reader pool; 4 when zero.
	ReadConns int
	// OnEvents, when set, receives the events of every committed write
	// transaction, in commit order, before the next writer starts. It must not
	// block.
	OnEvents func([]*spec.Event)
	// Lock takes an exclusive lock on Path+".lock" so that a second server on
	// the same file refuses to start. Short-lived commands leave it false.
	// It is the store's single-process guard: with it, this process is the
	// database's only writer and may cache what the database would otherwise
	// have to be asked (event seqs).
	Lock bool
	// SharedWriters says other processes write the same database, so nothing
	// that only one writer may know is cached between transactions (event
	// seqs are read in each transaction). It excludes Lock.
	SharedWriters bool
}

// DB is the store: one writer connection and a reader pool on one SQLite file.
type DB struct {
	path     string
	now      func() time.Time
	onEvents func([]*spec.Event)

	sqlstore.Store // the shared reads (on the reader pool) and writes
	writer         *sql.DB
	reader         *sql.DB
	readConn       *cachingConnector // counts the reader's statements
	lock           *os.File

	// writeMu serialises our write transactions so that events are
	// published in commit order. River's own statements use the same
	// single writer connection but append no events.
	writeMu sync.Mutex

	// pending holds event appends waiting for the next group commit.
	pendingMu sync.Mutex
	pending   []*appendReq
	leading   bool

	// seqs caches each run's next event seq; guarded by writeMu.
	seqs seqCache

	ckpt *checkpointer // WAL checkpoints, off the write path
	fts  *ftsLater     // indexes the documents whose full-text indexing waits
}

// ErrLocked is returned by Open when another server holds the database lock.
var ErrLocked = errors.New("database is in use by another homework server")

// Open opens (creating if needed) the database at opts.Path and applies every
// pending migration, ours and River's.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.Path == "" {
		return nil, fmt.Errorf("db: empty path")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, runtime.NumCPU())
	}
	if opts.Lock && opts.SharedWriters {
		return nil, fmt.Errorf("db: Lock and SharedWriters exclude each other")
	}
	d := &DB{path: opts.Path, now: opts.Now, onEvents: opts.OnEvents, seqs: processSeqs{}}
	if opts.SharedWriters {
		d.seqs = noSeqs{}
	}
	if dir := filepath.Dir(opts.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create database directory: %w", err)
		}
	}
	if opts.Lock {
		f, err := lockFile(opts.Path + ".lock")
		if err != nil {
			return nil, err
		}
		d.lock = f
	}

	d.writer = sql.OpenDB(&cachingConnector{dsn: dsn(opts.Path, false), drv: &sqlite.Driver{}})
	d.writer.SetMaxOpenConns(1)
	d.writer.SetMaxIdleConns(1)
	d.writer.SetConnMaxLifetime(0)
	d.writer.SetConnMaxIdleTime(0)

	if err := d.migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	d.ckpt = newCheckpointer(opts.Path, d.writer)

	d.readConn = &cachingConnector{dsn: dsn(opts.Path, true), drv: &sqlite.Driver{}}
	d.reader = sql.OpenDB(d.readConn)
	d.reader.SetMaxOpenConns(opts.ReadConns)
	d.reader.SetMaxIdleConns(opts.ReadConns)
	if err := d.reader.PingContext(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("ping reader: %w", err)
	}
	d.Store = sqlstore.NewStore(sqlstore.NewReads(conn{d.reader}, dialect, d.beginRead), d.writeShared, d.now)
	d.fts = newFTSLater(d)
	if ok, _ := d.pendingSearch(ctx); ok {
		d.fts.queued() // what an earlier process left waiting
	}
	return d, nil
}

// WriterDSN is the connection string of the store's writer connection on
// path: the raw-SQLite limits the benchmarks measure open their plain
// database/sql connection with it, so they run with the store's pragmas.
func WriterDSN(path string) string { return dsn(path, false) }

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// Statement journals (a multi-row insert inside a transaction writes
	// one) in memory, not in a temporary file: they cost a pwrite per page.
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set("_time_format", "sqlite")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
		// Checkpoints run off the write path (see checkpointer).
		q.Add("_pragma", "wal_autocheckpoint(0)")
	}
	return "file:" + path + "?" + q.Encode()
}

func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (lock %s is held)", ErrLocked, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// Close closes both pools and releases the lock.
func (d *DB) Close() error {
	var errs []error
	if d.fts != nil {
		d.fts.close()
	}
	if d.ckpt != nil {
		errs = append(errs, d.ckpt.close())
	}
	if d.reader != nil {
		errs = append(errs, d.reader.Close())
	}
	if d.writer != nil {
		errs = append(errs, d.writer.Close())
	}
	if d.lock != nil {
		errs = append(errs, d.lock.Close())
		d.lock = nil
	}
	return errors.Join(errs...)
}

// Path returns the database file path.
func (d *DB) Path() string { return d.path }

// Writer returns the single writer pool, for River's driver.
func (d *DB) Writer() *sql.DB { return d.writer }

// Reader returns the read-only pool.
func (d *DB) Reader() *sql.DB { return d.reader }

// Now returns the store's clock reading.
func (d *DB) Now() time.Time { return d.now() }

// Ping checks that the database answers a query on both pools.
func (d *DB) Ping(ctx context.Context) error {
	var n int
	if err := d.reader.QueryRowContext(ctx, `SELECT 1`).Scan(&n); err != nil {
		return fmt.Errorf("reader: %w", err)
	}
	return nil
}

// migrate applies our embedded migrations in order, each recorded in
// schema_migrations, then River's own through rivermigrate.
func (d *DB) migrate(ctx context.Context) error {
	err := sqlstore.Migrate(ctx, migrationFS, "migrations", `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`, d.now,
		func(ctx context.Context, q string) error { _, err := d.writer.ExecContext(ctx, q); return err },
		func(ctx context.Context) (sqlstore.Conn, func() error, func(), error) {
			tx, err := d.writer.BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return conn{tx}, tx.Commit, func() { tx.Rollback() }, nil
		})
	if err != nil {
		return err
	}
	return sqlstore.MigrateRiver(ctx, riversqlite.New(d.writer))
}

// Tx is a write transaction. Events appended through it are published after
// it commits.
type Tx struct {
	*sqlstore.Tx         // the shared methods
	SQL          *sql.Tx // the transaction itself, for River's driver; events appended may not be written yet
	db           *DB
	events       []*spec.Event
	seqs         map[string]*seqState // runs whose seq this transaction read or advanced
	unwritten    []*spec.Event        // appended, written before the next statement or the commit
	writeErr     error                // writing them failed: the commit fails
	indexLater   bool                 // it created a document whose full-text indexing waits (ftslater.go)
}

// WriteTx runs fn in one immediate write transaction, commits it when fn
// returns nil and then publishes the events it appended.
func (d *DB) WriteTx(ctx context.Context, fn func(tx spec.Tx) error) error {
	return d.write(ctx, func(tx *Tx) error { return fn(tx) })
}

// write runs fn in one write transaction, as WriteTx.
func (d *DB) write(ctx context.Context, fn func(tx *Tx) error) error {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	return d.writeTxLocked(ctx, fn)
}

func (d *DB) writeTxLocked(ctx context.Context, fn func(tx *Tx) error) error {
	sqlTx, err := d.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	tx := &Tx{SQL: sqlTx, db: d, seqs: map[string]*seqState{}}
	tx.Tx = sqlstore.NewTx(conn{eventsFirst{tx}}, dialect, d.now())
	forget := func() {
		for runID := range tx.seqs {
			d.seqs.forget(runID)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			// The writer's one connection would stay in this transaction
			// and every later write wait for it.
			sqlTx.Rollback()
			forget()
			panic(p)
		}
	}()
	err = fn(tx)
	if err == nil {
		err = tx.writeEvents(ctx)
	}
	if err != nil {
		sqlTx.Rollback()
		forget()
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		forget()
		return fmt.Errorf("commit: %w", err)
	}
	if d.ckpt != nil {
		d.ckpt.committed()
	}
	if tx.indexLater && d.fts != nil {
		d.fts.queued()
	}
	if len(tx.events) > 0 && d.onEvents != nil {
		d.onEvents(tx.events)
	}
	return nil
}

// writeShared runs fn, a shared write, in one write transaction.
func (d *DB) writeShared(ctx context.Context, fn func(tx *sqlstore.Tx) error) error {
	return d.write(ctx, func(tx *Tx) error { return fn(tx.Tx) })
}

// sqliteCode returns the extended SQLite result code of err, 0 when err is
// not a SQLite error.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// Unavailable reports whether err means the database could not be used for
// a while (busy past the busy timeout, an I/O error, a full disk, a file
// that cannot be opened), as opposed to a fault of the statement: the
// engine retries an iteration's final writes through such an outage and
// names it when it ends a run.
func (d *DB) Unavailable(err error) bool {
	switch sqliteCode(err) & 0xff { // the primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return false
}
