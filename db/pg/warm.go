package pg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// warmConn prepares, on a new connection of the pool, the statements of
// the write path that cost PostgreSQL milliseconds to parse and plan the
// first time a connection runs them: River's job insert, the announcements
// and the events' insert (its plan made once, see writeEvents). It runs
// them with nothing to write, in a transaction it rolls back.
//
// A connection's first run of them otherwise came in the middle of a
// write, a run's creation holding the user's slot lock among them: in a
// burst of creations on new connections (a server's first, or a pool
// growing) the user's creations in every process waited through one
// connection's parsing and planning after another.
//
// Nothing it does waits long, and nothing it does makes anyone wait: the
// events' insert takes its advisory lock on a key of its own (warmLock,
// not feedLock; the plan made does not depend on the key's value), and
// the whole of it is given warmTimeout, with lock and statement timeouts
// of its own, as a caller waits for the connection. A statement it could
// not run is prepared when first run, as before (pgx drops a statement
// that failed), so failing changes nothing: the tables are not there
// before the first migration. Only a connection it found closed is an
// error, so that the pool does not hand it out.
func warmConn(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	warmStatements(ctx, conn)
	if conn.IsClosed() {
		return errors.New("pg: the connection closed while its statements were prepared")
	}
	return nil
}

// warmStatements runs the statements warmConn prepares, in a transaction
// it rolls back.
func warmStatements(ctx context.Context, conn *pgx.Conn) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '100ms', true), set_config('statement_timeout', '1s', true),
		set_config('homework.horizon', '', true), set_config('homework.first_event', '0', true)`); err != nil {
		return
	}
	if _, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobInsertFastMany(ctx, &riverdriver.JobInsertFastManyParams{}); err != nil {
		return
	}
	if _, err := tx.Exec(ctx, tryAnnounceSQL, eventsChannel, maxPayload); err != nil {
		return
	}
	if _, err := tx.Exec(ctx, announceSQL, eventsChannel, maxPayload, int64(0)); err != nil {
		return
	}
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		return
	}
	tx.Exec(ctx, insertSQL, []string{}, []string{}, []string{}, []int64{}, int32(warmLock))
}

// warmTimeout bounds warmConn.
const warmTimeout = 2 * time.Second

// warmLock is the advisory lock key warmConn's events insert takes in
// feedLock's place, shared: no one else takes it.
const warmLock = 0x5761726d // "Warm"

// warmIdle prepares the write path's statements on the pool's idle
// connections, which were made before the tables were there (warmConn
// could not prepare them then).
func (d *DB) warmIdle(ctx context.Context) {
	for _, c := range d.pool.AcquireAllIdle(ctx) {
		warmConn(ctx, c.Conn())
		c.Release()
	}
}
