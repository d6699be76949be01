package pg

import (
	"context"

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
// Nothing it does waits long. The events' insert, which draws no id with
// no rows, takes no lock; were it to wait for the feed lock (held
// exclusively while a horizon is read), it runs last, gives up after
// warmLockTimeout, and is planned by then all the same. Failing changes
// nothing (the tables are not there before the first migration): a
// statement not prepared here is prepared when first run, as before.
func warmConn(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
		set_config('homework.horizon', '', true), set_config('homework.first_event', '0', true)`, warmLockTimeout, warmStatementTimeout); err != nil {
		return nil
	}
	if _, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobInsertFastMany(ctx, &riverdriver.JobInsertFastManyParams{}); err != nil {
		return nil
	}
	if _, err := tx.Exec(ctx, tryAnnounceSQL, eventsChannel, maxPayload); err != nil {
		return nil
	}
	if _, err := tx.Exec(ctx, announceSQL, eventsChannel, maxPayload, int64(0)); err != nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		return nil
	}
	tx.Exec(ctx, insertSQL, []string{}, []string{}, []string{}, []int64{}, int32(feedLock))
	return nil
}

// warmLockTimeout and warmStatementTimeout bound what warmConn waits for:
// it runs as a connection is made, while a caller waits for it.
const warmLockTimeout, warmStatementTimeout = "100ms", "5s"

// warmIdle prepares the write path's statements on the pool's idle
// connections, which were made before the tables were there (warmConn
// could not prepare them then).
func (d *DB) warmIdle(ctx context.Context) {
	for _, c := range d.pool.AcquireAllIdle(ctx) {
		warmConn(ctx, c.Conn())
		c.Release()
	}
}
