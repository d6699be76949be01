package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"homework/engine/spec"
)

// querier is what both the pool and a transaction offer for reads.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readTxOptions make a transaction read one snapshot, taken by its first
// statement, and refuse to write.
var readTxOptions = pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}

// reads holds the read methods a page view uses (spec.ReadStore). On the
// DB they query the pool; in a ReadTx they query one transaction, so they
// all see one snapshot.
type reads struct {
	q querier
	// pool is the pool outside a ReadTx, nil inside one: a method that
	// needs several statements to agree begins its own transaction only
	// when it is not already in one.
	pool *pgxpool.Pool
}

var _ spec.ReadStore = reads{}

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
	if err := fn(reads{q: tx}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
