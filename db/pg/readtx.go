package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"homework/db/sqlstore"
	"homework/engine/spec"
)

// readTxOptions make a transaction read one snapshot, taken by its first
// statement, and refuse to write.
var readTxOptions = pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}

// beginRead begins a read-only transaction of one snapshot on the pool, for
// a read whose statements must agree.
func (d *DB) beginRead(ctx context.Context) (sqlstore.Conn, func(), error) {
	tx, err := d.pool.BeginTx(ctx, readTxOptions)
	if err != nil {
		return nil, nil, err
	}
	return pgConn{tx}, func() { tx.Rollback(context.WithoutCancel(ctx)) }, nil
}

// ReadTx runs fn with reads that all see one snapshot of the database: one
// REPEATABLE READ, READ ONLY transaction, whose snapshot the first
// statement takes. fn must read only through r: the transaction holds one
// of the pool's connections until fn returns. The user feed is read no
// further than the last feed horizon this process knows of, announced
// before the snapshot (feedReads): a page's feed starts there, and a read
// waits for no horizon.
func (d *DB) ReadTx(ctx context.Context, fn func(r spec.ReadStore) error) error {
	h := d.announcer.told.Load()
	tx, err := d.pool.BeginTx(ctx, readTxOptions)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	c := pgConn{tx}
	if err := fn(feedReads{Reads: sqlstore.InReadTx(c, dialect), c: c, h: h}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// feedReads are a read transaction's reads, with the user feed read no
// further than h, a feed horizon known before the transaction's snapshot:
// every event up to it that will ever commit is in the snapshot, and an
// event after it that is there may have one before it that is not.
type feedReads struct {
	sqlstore.Reads
	c pgConn
	h int64
}

func (r feedReads) ListUserEvents(ctx context.Context, userID, afterID int64, limit int) ([]*spec.Event, error) {
	return listUserEvents(ctx, r.c, userID, afterID, r.h, limit)
}

func (r feedReads) LastUserEventID(ctx context.Context, userID int64) (int64, error) {
	return lastUserEventID(ctx, r.c, userID, r.h)
}
