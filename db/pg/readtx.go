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
// of the pool's connections until fn returns.
func (d *DB) ReadTx(ctx context.Context, fn func(r spec.ReadStore) error) error {
	tx, err := d.pool.BeginTx(ctx, readTxOptions)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(sqlstore.InReadTx(pgConn{tx}, dialect)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
